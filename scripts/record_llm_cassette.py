"""Record model answers for `incidents/` into a replay file, so CI can run the LLM path without a network.

    python scripts/record_llm_cassette.py                       # stand-in model (tests/fake_openai.py)
    CRASHCART_LLM_API_KEY=... python scripts/record_llm_cassette.py --live   # the configured endpoint

The stand-in is a deterministic local program, not a language model: a tape recorded from it proves the
replay path and the plumbing (windows, checks, fallbacks), not model accuracy. Record with --live to
measure a real model. Prompts or redaction rules that change make old answers unreachable: re-record.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TAPE = ROOT / "tests" / "data" / "llm" / "incidents.jsonl"


def _serve_stand_in() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.fake_openai import FakeOpenAI

    ready = threading.Event()
    box: dict[str, str] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        server = FakeOpenAI()
        box["url"] = loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)
    return box["url"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--live", action="store_true", help="record from CRASHCART_LLM_BASE_URL instead of the stand-in")
    ap.add_argument("--tape", type=Path, default=DEFAULT_TAPE)
    ap.add_argument("dirs", nargs="*", default=[str(ROOT / "incidents")])
    args = ap.parse_args()
    if args.tape.exists():
        args.tape.unlink()
    env = {"CRASHCART_LLM_CASSETTE": str(args.tape), "CRASHCART_LLM_CASSETTE_MODE": "record"}
    if not args.live:
        env |= {"CRASHCART_LLM_BASE_URL": _serve_stand_in(), "CRASHCART_LLM_API_KEY": "stand-in"}
    os.environ.update(env)  # noqa: TID251 - this script configures the CLI it runs, through its environment
    from crashcart.cli import main as cli

    return cli(["eval", *args.dirs, "--engine", "llm"])


if __name__ == "__main__":
    raise SystemExit(main())
