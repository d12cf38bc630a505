"""``python -m kernels.execute LOG``: see ``kernels/execute/run.py``."""
from __future__ import annotations

import sys

from kernels.execute.run import main

sys.exit(main())
