"""What identifies a bundle, and which of its files' clocks cannot be aligned.

``fingerprint`` hashes (path, content sha256) of every analysed file, so the same logs in a directory,
a tarball or a zip are one incident. ``unaligned_clocks`` lists the files whose times stay in file order.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from crashcart.ingest.bundle import SCANNED_KINDS, Bundle
from crashcart.models import Finding
from crashcart.scan.run import ScanResult


def fingerprint(bundle: Bundle, scanned: ScanResult) -> str:
    """sha256 over (path, content sha256) of every analysed file, so the archive format does not matter."""
    h = hashlib.sha256()
    for bf in sorted(bundle.files, key=lambda f: f.path):
        fs = scanned.scans.get(bf.path)
        digest = fs.sha256 if fs is not None and fs.sha256 else _sha_file(bundle.physical(bf.path))
        h.update(f"{bf.path}\0{digest}\n".encode())
    return h.hexdigest()


def _sha_file(path: Path | None) -> str:
    if path is None:
        return ""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1024 * 1024):
            h.update(block)
    return h.hexdigest()


def unaligned_clocks(bundle: Bundle, findings: list[Finding]) -> list[str]:
    """Files with findings whose clock cannot be put on the common one (their order is kept instead)."""
    with_findings = {f.evidence[0].file for f in findings if f.role in {"root_candidate", "confirmation"}}
    boots = {n.host for n in bundle.manifest.nodes if n.boot_time} if bundle.manifest else set()
    out = []
    for bf in bundle.files:
        if bf.kind not in SCANNED_KINDS or bf.path not in with_findings:
            continue
        if bf.clock == "none":
            out.append(f"{bf.path} (no timestamps)")
        elif bf.clock == "boot_relative" and bf.host not in boots:
            out.append(f"{bf.path} (seconds since boot, boot time unknown)")
        elif bf.clock == "no_year" and bundle.year is None:
            out.append(f"{bf.path} (no year)")
    return out
