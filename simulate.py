"""pagedsim's main job: replay a trace through every KV-cache allocator and compare them.

A thin entry point; the options, the run and the outputs live in ``sim/cli.py``.
``python simulate.py --help`` lists every option with its default.
"""
from __future__ import annotations

import sys

from sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
