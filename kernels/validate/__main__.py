"""``python -m kernels.validate LOG``: see ``kernels/validate/run.py``."""
from __future__ import annotations

import sys

from kernels.validate.run import main

sys.exit(main())
