"""``python -m sim.sweep SPEC.toml``: see ``sim/sweep/run.py``."""
from __future__ import annotations

import sys

from sim.sweep.run import main

sys.exit(main())
