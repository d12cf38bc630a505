"""Validation: replay an allocation log through the kernels and check every output.

``python -m kernels.validate LOG`` (``run.py``) reads the log ``simulate.py
--record-allocation-log`` writes (``log.py``), rebuilds each sequence's K/V content from its
token prefix (``kv_content.py``, ``state.py``, ``setup.py``), replays the step's copies, swaps
and writes (``ops.py``), compares attention with a float64 reference (``attn.py``), can inject
allocator mistakes to prove they are caught (``mutate.py``) and formats the results
(``report.py``). Importing this package loads torch.
"""
from __future__ import annotations

from kernels.validate.report import SectionResult, format_section
from kernels.validate.run import (
    CPU_SHRINK,
    Options,
    cpu_args,
    main,
    validate_log,
    validate_section,
    write_report,
)

__all__ = ["CPU_SHRINK", "Options", "SectionResult", "cpu_args", "format_section", "main",
           "validate_log", "validate_section", "write_report"]
