"""A stand-in for a worker's module in tests/dev/test_fleet.py: prints its environment as one
JSON line, so that a test reads what the stack gave a worker without starting Celery."""

from __future__ import annotations

import json
import os

if __name__ == "__main__":
    print(json.dumps(dict(os.environ)), flush=True)
