"""The one exception every trace loader raises for bad input.

A `TraceError` message is a single line that names the file, the line or row, and the
field at fault, so that a CLI can print it and exit with status 2. It subclasses
`ValueError` so callers that only know "bad value" still catch it.
"""
from __future__ import annotations


class TraceError(ValueError):
    """Malformed trace input: one line naming file, line/row and field."""


def where(path: object, line: int | None = None, field: str | None = None) -> str:
    """Format the 'file:line: field' prefix of a TraceError message."""
    text = str(path)
    if line is not None:
        text += f":{line}"
    if field is not None:
        text += f": field '{field}'"
    return text
