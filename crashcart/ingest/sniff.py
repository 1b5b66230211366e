"""Sniffing a file's first bytes: the head read for classification, UTF-16 transcoding, and why a file is binary."""

from __future__ import annotations

import codecs
import tempfile
from pathlib import Path

from crashcart.ingest import extract

HEAD_BYTES = extract.HEAD_BYTES  # what classification reads of each file


def _read_head(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(HEAD_BYTES)


def _is_utf16(head: bytes) -> bool:
    return head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _transcode_utf16(path: Path, work_dir: Path, cleanup: list[Path]) -> Path:
    """UTF-16 text (Windows tools) re-encoded as UTF-8 in the work dir; newlines, so line numbers, kept."""
    target_dir = Path(tempfile.mkdtemp(prefix="utf16-", dir=work_dir))
    cleanup.append(target_dir)
    target = target_dir / path.name
    with path.open("rb") as src, target.open("wb") as dst:
        decoder = codecs.getincrementaldecoder("utf-16")("replace")
        while chunk := src.read(1024 * 1024):
            dst.write(decoder.decode(chunk).encode("utf-8"))
        dst.write(decoder.decode(b"", final=True).encode("utf-8"))
    return target


def _binary_reason(head: bytes) -> str | None:
    """Why the start of a file is binary data and not text (None when it reads as text)."""
    if not head:
        return None
    nul = head.count(b"\x00")
    if nul > len(head) // 100:
        share = "all" if nul == len(head) else f"{nul * 100 // len(head)}% of"
        return f"{share} its first {len(head):,} bytes are NUL"
    sample = head[:8192]
    control = len(sample.translate(None, _NOT_CONTROL))  # the control bytes left once the rest is deleted
    if control > len(sample) * 0.10:
        return f"{control * 100 // len(sample)}% of its first {len(sample):,} bytes are control bytes"
    if control > len(sample) * 0.02:  # random bytes: ~10% control bytes, and never valid UTF-8
        try:
            sample.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(sample) - 4:  # not just a character cut at the end of the sample
                pct = control * 100 // len(sample)
                return f"{pct}% of its first {len(sample):,} bytes are control bytes, and not UTF-8"
    return None


_NOT_CONTROL = bytes(b for b in range(256) if not (b < 9 or (13 < b < 32 and b != 27)))  # text, tabs, newlines, ESC
