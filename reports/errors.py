"""The one error type of reports/: bad or missing result files.

Every problem with the input (a missing file, unreadable JSON or Parquet, a missing key or
column, an unknown schema version) raises ``ReportError`` with one line that names the file,
so ``python -m reports`` can print it and exit with code 2. Plotting bugs are not caught:
they surface as ordinary exceptions with their tracebacks.
"""
from __future__ import annotations


class ReportError(ValueError):
    """A result file is missing or malformed; the message names the file."""
