"""Overhead and capacity benchmarks: `uv run scripts/bench.py [--only NAME] [--quick] ...`.

The benchmarks live in scripts/overhead/ (one module each); this file is the command the docs
and the issue name, and only hands its arguments over.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # scripts.overhead, when this file runs as a script
    from scripts.overhead.__main__ import main

    sys.exit(main())
