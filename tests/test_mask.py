"""Masking volatile tokens into templates."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crashcart.text.mask import mask, template


def test_lines_that_differ_only_in_volatile_tokens_share_a_template() -> None:
    a = "[rank3]:[E1130 02:23:07.408271257 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600060 milliseconds"
    b = "[rank17]:[E1130 02:23:09.000000001 ProcessGroupNCCL.cpp:607] [Rank 17] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600712 milliseconds"
    assert template(a) == template(b)
    assert "<N>" in template(a) and "rank3" not in template(a)


def test_hosts_pci_and_hex_are_masked() -> None:
    t = mask("gpu-node-017:1234:1299 [3] NVRM: Xid (PCI:0000:3b:00): 79, comm 0x55d0a1b2")
    assert "017" not in t and "0000:3b:00" not in t and "0x55d0a1b2" not in t
    assert "<PCI>" in t and "<HEX>" in t


def test_different_messages_keep_different_templates() -> None:
    assert template("RuntimeError: CUDA error: out of memory") != template("ValueError: bad shape")


@given(st.text(max_size=200))
def test_mask_is_idempotent(text: str) -> None:
    once = mask(text)
    assert mask(once) == once
