"""Guards: the curated public surface, and the core never importing Slack or the bot."""

from __future__ import annotations

import subprocess
import sys

import crashcart


def test_all_is_sorted_and_complete() -> None:
    public = sorted(n for n in dir(crashcart) if (not n.startswith("_") and n[0].isupper()) or n in crashcart.__all__)
    assert crashcart.__all__ == sorted(crashcart.__all__)
    assert set(crashcart.__all__) <= set(dir(crashcart))
    assert [n for n in public if n not in crashcart.__all__] == []


def test_core_never_imports_slack_or_bot() -> None:
    code = (
        "import sys, crashcart, crashcart.cli, crashcart.pipeline;"
        "bad=[m for m in sys.modules if m.split('.')[0] in {'slack_bolt','slack_sdk','bot'}];"
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
