"""Reading a trace file safely before any format parser sees it.

The whole file is read once: its sha256 goes into the metadata, gzip content is
recognised by its magic bytes (decompressed when the name ends in .gz, rejected when a
.csv or .jsonl name hides it), and the text must decode as UTF-8 so a wrong encoding is
reported with its line rather than surfacing later as garbled numbers.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class RawFile:
    """A trace file's decoded content. `data` is UTF-8 without a BOM."""

    path: Path
    data: bytes
    sha256: str

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


def read_raw(path: str | Path) -> RawFile:
    """Read, checksum, gunzip (.gz only) and UTF-8-check a trace file.

    Raises:
        TraceError: missing, unreadable, empty, gzip under a plain name, bad encoding.
    """
    p = Path(path)
    try:
        blob = p.read_bytes()
    except OSError as exc:
        raise TraceError(f"{p}: cannot read file ({exc.strerror or exc})") from None
    digest = hashlib.sha256(blob).hexdigest()
    if blob.startswith(GZIP_MAGIC):
        if p.suffix.lower() != ".gz":
            raise TraceError(f"{p}: file is gzip-compressed but named '{p.suffix or p.name}'; "
                             "rename it to end in .gz or decompress it")
        try:
            blob = gzip.decompress(blob)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{p}: corrupt gzip data ({exc})") from None
    _check_encoding(p, blob)
    if blob.startswith(b"\xef\xbb\xbf"):
        blob = blob[3:]
    if not blob[:65536].strip() and not blob.strip():
        raise TraceError(f"{p}: empty file (no requests)")
    return RawFile(p, blob, digest)


def _check_encoding(p: Path, blob: bytes) -> None:
    if blob[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in blob[:4096]:
        raise TraceError(f"{p}:1: wrong encoding (looks like UTF-16 or binary); "
                         "save the file as UTF-8")
    if blob.isascii():
        return
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = blob.count(b"\n", 0, exc.start) + 1
        raise TraceError(f"{p}:{line}: wrong encoding: byte 0x{blob[exc.start]:02x} is not "
                         "UTF-8; save the file as UTF-8") from None


def parse_jsonl(raw: RawFile) -> tuple[list[dict[str, Any]], list[int]]:
    """One JSON object per non-blank line; returns the objects and their 1-based lines.

    Raises:
        TraceError: a line that is not a complete JSON object (e.g. truncated).
    """
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    decode = json.JSONDecoder().decode
    for num, line in enumerate(raw.text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = decode(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{raw.path}:{num}: invalid or truncated JSON line "
                             f"({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{raw.path}:{num}: expected a JSON object, got "
                             f"{type(obj).__name__}")
        records.append(obj)
        lines.append(num)
    if not records:
        raise TraceError(f"{raw.path}: empty file (no requests)")
    return records, lines


def parse_json(raw: RawFile) -> Any:
    """The whole file as one JSON document.

    Raises:
        TraceError: invalid or truncated JSON (with its line).
    """
    try:
        return json.loads(raw.text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{raw.path}:{exc.lineno}: invalid or truncated JSON ({exc.msg})") \
            from None
