"""`uv run scripts/bench_cards.py`: what a fleet's cards cost a dequeue+ack, with no item of
several cards queued and with a reservation active, beside the library and the floor
(scripts/benchkit/cards_cost.py)."""

import sys

from scripts.benchkit.cards_cost import main

if __name__ == "__main__":
    sys.exit(main())
