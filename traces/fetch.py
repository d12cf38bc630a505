"""Download public traces by name into a user cache and check their sha256.

The known checksums were computed from the copies kept in ../shared/traces, not
verified against an upstream release (none publishes checksums). BurstGPT has no known
sum here, so its download is kept with a warning instead of verified. Downloads stream
into a temporary file beside the target and are renamed only after the check passes.
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from traces.errors import TraceError


@dataclass(frozen=True, slots=True)
class Source:
    """A public trace: where to get it, what to call it, and its sha256 if known."""

    url: str
    filename: str
    sha256: str | None


_AZURE = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"
# Sums computed from local copies of the traces; not verified upstream.
SOURCES = {
    "azure-code": Source(_AZURE + "AzureLLMInferenceTrace_code.csv",
                         "AzureLLMInferenceTrace_code.csv",
                         "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"),
    "azure-conv": Source(_AZURE + "AzureLLMInferenceTrace_conv.csv",
                         "AzureLLMInferenceTrace_conv.csv",
                         "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"),
    "mooncake-conversation": Source(
        "https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/traces/"
        "conversation_trace.jsonl", "mooncake_conversation_trace.jsonl",
        "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"),
    # Stored with Git LFS upstream, hence the media host; sum unknown here.
    "burstgpt": Source("https://media.githubusercontent.com/media/HPMLL/BurstGPT/main/data/"
                       "BurstGPT_1.csv", "BurstGPT_1.csv", None),
}


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/pagedsim/traces, else ~/.cache/pagedsim/traces."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pagedsim" / "traces"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(url: str, dest_dir: Path, timeout: float) -> tuple[Path, str]:
    """Stream `url` into a temp file in dest_dir; returns (temp path, sha256)."""
    fd, tmp_name = tempfile.mkstemp(dir=dest_dir, prefix=".fetch-", suffix=".part")
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                h.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or exc
        raise TraceError(f"{url}: download failed ({reason})") from None
    return tmp, h.hexdigest()


def fetch(
    name: str, dest: str | Path | None = None, url: str | None = None, *,
    timeout: float = 60.0, log: TextIO | None = None,
) -> Path:
    """Download trace `name` (see SOURCES) into `dest` (default: cache_dir()).

    An existing file with the known sum is reused. `url` overrides the address; the
    known sum is still checked.

    Raises:
        TraceError: unknown name, download failure, Git LFS pointer, or sha256 mismatch.
    """
    if name not in SOURCES:
        raise TraceError(f"unknown trace name {name!r} (choose from {', '.join(SOURCES)})")
    src, log = SOURCES[name], log or sys.stderr
    dest_dir = Path(dest) if dest is not None else cache_dir()
    target = dest_dir / src.filename
    if src.sha256 and target.is_file() and _sha256(target) == src.sha256:
        return target
    try:
        dest_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceError(f"{dest_dir}: cannot create directory ({exc.strerror})") from None
    tmp, digest = _download(url or src.url, dest_dir, timeout)
    with tmp.open("rb") as f:
        is_pointer = f.read(40).startswith(b"version https://git-lfs")
    if is_pointer or (src.sha256 is not None and digest != src.sha256):
        tmp.unlink(missing_ok=True)
        why = ("got a Git LFS pointer, not the data" if is_pointer else
               f"sha256 mismatch: got {digest}, expected {src.sha256}")
        raise TraceError(f"{url or src.url}: {why}")
    if src.sha256 is None:
        print(f"warning: no known sha256 for {name}; not verified (got {digest})", file=log)
    os.replace(tmp, target)
    return target
