"""`uv run --extra torch python scripts/gpu_check.py`: the checks only a GPU machine can
make (scripts/benchkit/gpu_check.py); on a machine without the project's environment,
`scripts/gpu_wheels.sh` carries it. To try it without a GPU: `uv run python
scripts/gpu_check.py --cpu` (torch optional)."""

import sys

from scripts.benchkit.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
