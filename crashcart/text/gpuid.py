"""GPU identifiers: one canonical spelling for a PCI bus id, whatever tool printed it.

Xid lines print ``PCI:0000:3b:00``, nvidia-smi and DCGM print ``00000000:3B:00.0``, NCCL prints
``busId 3b000``. All become ``0000:3b:00`` (4-digit domain, bus, device; lower case; no function).
"""

from __future__ import annotations

import re

_FULL = re.compile(
    r"^(?:PCI:)?(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)
_NCCL = re.compile(r"^(?P<dom>[0-9a-fA-F]{0,4}?)(?P<bus>[0-9a-fA-F]{2})(?P<dev>[0-9a-fA-F]{2})(?P<fn>[0-9a-fA-F])$")


def canonical_pci(value: str) -> str | None:
    """Return ``dddd:bb:dd`` for any common spelling of a PCI bus id, or None if it is not one.

    >>> canonical_pci("00000000:3B:00.0"), canonical_pci("PCI:0000:3b:00"), canonical_pci("3b000")
    ('0000:3b:00', '0000:3b:00', '0000:3b:00')
    """
    text = value.strip()
    m = _FULL.match(text)
    if m is None:
        m = _NCCL.match(text.lower())
        if m is None:
            return None
    dom = int(m.group("dom") or "0", 16) & 0xFFFF
    return f"{dom:04x}:{int(m.group('bus'), 16):02x}:{int(m.group('dev'), 16):02x}"
