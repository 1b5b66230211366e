"""Tokens the LLM engine sends for the same incident at 8, 64 and 512 ranks.

    python bench/llm_tokens.py [--ranks 8 64 512] [--cls gpu_fallen_off_bus]

Each bundle is written by ``crashcart synth`` (deterministic), then diagnosed with ``--engine llm``
against the local stand-in model of tests/fake_openai.py (no network). The table shows bytes of logs,
distinct windows, characters and prompt tokens sent to the swarm and to the reduce model. What the
swarm is sent should grow with the number of distinct line templates, not with the number of ranks.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crashcart.pipeline import diagnose  # noqa: E402
from crashcart.settings import Settings  # noqa: E402
from crashcart.synth import synthesize  # noqa: E402
from crashcart.text.mask import template  # noqa: E402
from tests.fake_openai import FakeOpenAI, request_text, role_of  # noqa: E402

_SHOWN = re.compile(r"^[^\s|]+:\d+\| (.*)$", re.M)


async def measure(cls: str, ranks: int, work: Path) -> dict[str, object]:
    bundle = work / f"{cls}-{ranks}"
    synthesize(cls, bundle, ranks=ranks, nodes=max(1, ranks // 8), seed=7, layout="per_rank")
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    fake = FakeOpenAI()
    url = await fake.start()
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, work_dir=work / "w", engine="llm", llm_base_url=url, llm_api_key="stand-in"
    )
    try:
        out = await diagnose(bundle, settings)
    finally:
        await fake.close()
    llm = out.document.stats.llm
    swarm = [r for r in fake.requests if role_of(r) == "swarm"]
    reduce = [r for r in fake.requests if role_of(r) == "reduce"]
    shown = [m.group(1) for r in swarm for m in _SHOWN.finditer(request_text(r))]
    return {
        "ranks": ranks,
        "log MB": round(size / 1e6, 1),
        "chunks": llm.chunks,
        "lines shown": len(shown),
        "templates": len({template(t) for t in shown}),
        "swarm chars": sum(len(request_text(r)) for r in swarm),
        "reduce chars": sum(len(request_text(r)) for r in reduce),
        "prompt tokens": llm.prompt_tokens,
        "class": out.document.root_cause.class_,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 512])
    ap.add_argument("--cls", default="gpu_fallen_off_bus")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [asyncio.run(measure(args.cls, n, Path(tmp))) for n in args.ranks]
    cols = list(rows[0])
    print(" | ".join(f"{c:>13}" for c in cols))
    for row in rows:
        print(" | ".join(f"{row[c]!s:>13}" for c in cols))
    first, last = rows[0], rows[-1]
    growth = int(str(last["prompt tokens"])) / max(1, int(str(first["prompt tokens"])))
    print(f"ranks x{int(str(last['ranks'])) // int(str(first['ranks']))}: prompt tokens x{growth:.2f}")


if __name__ == "__main__":
    main()
