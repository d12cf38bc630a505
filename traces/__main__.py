"""Entry point for `python -m traces`.

Subcommands `summary FILE` and `fetch NAME`; the parsing lives in traces/cli.py.
"""
from __future__ import annotations

import sys

from traces.cli import main

sys.exit(main())
