"""Same answers before and after: ``diagnose --json`` (``stats.seconds`` zeroed) on every shipped bundle.

Usage: python bench/identity.py [--base COMMIT] [--prefix "speed (issue 16):"] [BUNDLE ...]

"Before" is the working tree with the commits whose message starts with ``--prefix`` reverted (their
patches applied in reverse to a copy of ``crashcart/``), so that work others commit in parallel (rules,
reports) is the same on both sides and only this change is compared. Without BUNDLE arguments it runs
every ``incidents/*/`` (including ``incidents/real/*/`` and ``incidents/torch/*/`` when present) and
every ``tests/data/foreign`` bundle. Prints one line per difference and a summary; exit 1 on any.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = [  # the files this change edits (others edit the rest of the working tree in parallel)
    "crashcart/scan/run.py",
    "crashcart/scan/reader.py",
    "crashcart/scan/findings.py",
    "crashcart/ingest/bundle.py",
    "crashcart/ingest/extract.py",
    "crashcart/ingest/archive.py",
    "crashcart/text/clock.py",
    "crashcart/text/prefix.py",
    "crashcart/pipeline.py",
    "crashcart/catalogue.py",
    "crashcart/scan/matcher.py",
    "crashcart/scan/hang_evidence/stacks.py",
    "crashcart/scan/hang_evidence/analyse.py",
    "crashcart/cli.py",
    "crashcart/scan/lazy.py",
    "crashcart/scan/numbering.py",
    "crashcart/scan/tails.py",
    "crashcart/locate/__init__.py",
    "crashcart/locate/topology.py",
    "crashcart/locate/last.py",
    "crashcart/group.py",
    "crashcart/text/mask.py",
    "crashcart/reduce/causal.py",
    "crashcart/reduce/adjust.py",
    "crashcart/reduce/throughput.py",
    "crashcart/reduce/explain.py",
    "crashcart/report/reading.py",
    "crashcart/report/document.py",
    "crashcart/verify.py",
    "crashcart/models.py",
    "crashcart/scan/budget.py",
    "crashcart/ingest/hang_kinds.py",
    "crashcart/locate/owned.py",
    "crashcart/scan/followups.py",
    "crashcart/text/template.py",
    "crashcart/scan/tails.py",
    "crashcart/text/regex_end.py",
    "crashcart/ingest/span.py",
    "crashcart/ingest/heads.py",
    "crashcart/scan/lines.py",
]


def bundles() -> list[Path]:
    out: list[Path] = []
    inc = ROOT / "incidents"
    for d in sorted(inc.iterdir()):
        if d.name in ("real", "torch"):
            out += sorted(x for x in d.iterdir() if x.is_dir())
        elif d.is_dir():
            out.append(d)
    foreign = ROOT / "tests" / "data" / "foreign"
    out += sorted(x for x in foreign.iterdir() if x.name != "README.md" and not x.name.endswith(".expected.json"))
    return out


def before_tree(prefix: str, dest: Path) -> int:
    """A copy of ``crashcart/`` with the commits starting with ``prefix`` reverted; how many were."""
    shutil.copytree(ROOT / "crashcart", dest / "crashcart", ignore=shutil.ignore_patterns("__pycache__"))
    log = subprocess.run(
        ["git", "log", "--format=%H%x00%s", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    mine = [h for h, _, s in (line.partition("\0") for line in log) if s.startswith(prefix)]
    for commit in mine:  # newest first: reverse each patch in turn
        patch = subprocess.run(
            ["git", "show", "--format=", commit, "--", *OWN], cwd=ROOT, capture_output=True, check=True
        ).stdout
        if patch.strip():
            subprocess.run(["git", "apply", "-R", "-"], cwd=dest, input=patch, check=True)
    # uncommitted edits to this change's own files are "after" only: revert them too (others' stay on both sides)
    diff = subprocess.run(["git", "diff", "HEAD", "--", *OWN], cwd=ROOT, capture_output=True, check=True).stdout
    if diff.strip():
        subprocess.run(["git", "apply", "-R", "-"], cwd=dest, input=diff, check=True)
    return len(mine)


def child(out: Path, todo: list[str]) -> None:
    """``--child``: diagnose every bundle in this one process (imports paid once), one JSON line each."""
    import contextlib
    import io

    from crashcart.cli import main as cli

    with out.open("w") as fh:
        for bundle in todo:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
                try:
                    code = cli(["diagnose", bundle, "--json", "--no-store"])
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
            if code != 0:
                fh.write(json.dumps(f"exit {code}") + "\n")
                continue
            doc = json.loads(buf.getvalue())
            doc["stats"]["seconds"] = 0.0
            fh.write(json.dumps(json.dumps(doc, sort_keys=True)) + "\n")


def run_all(todo: list[Path], pythonpath: Path, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHCART_")}  # noqa: TID251 (child env)
    work = tmp / f"work-{name}"
    env.update(CRASHCART_DB=str(work / "db.sqlite"), CRASHCART_WORK_DIR=str(work / "work"), PYTHONPATH=str(pythonpath))
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(tmp / f"{name}.jsonl"), *map(str, todo)],
        env=env,
        cwd=tmp,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bundles", nargs="*", type=Path)
    p.add_argument("--prefix", default="speed (issue 16):")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child, [str(b) for b in a.bundles])
        return
    todo = [b.resolve() for b in a.bundles] or bundles()
    with tempfile.TemporaryDirectory(prefix="crashcart-identity-") as d:
        tmp = Path(d)
        # both sides are copies taken now: edits others make to the working tree meanwhile reach neither
        shutil.copytree(ROOT / "crashcart", tmp / "after" / "crashcart", ignore=shutil.ignore_patterns("__pycache__"))
        reverted = before_tree(a.prefix, tmp / "before")
        procs = [run_all(todo, tmp / side, tmp, side) for side in ("before", "after")]
        for proc in procs:
            proc.wait()
        before, after = (
            [json.loads(x) for x in (tmp / f"{side}.jsonl").read_text().splitlines()] for side in ("before", "after")
        )
    differ = [b for b, x, y in zip(todo, before, after, strict=True) if x != y]
    for b in differ:
        print(f"DIFFERS: {b.relative_to(ROOT) if b.is_relative_to(ROOT) else b}")
    failed = sum(x.startswith("exit ") for x in after)
    print(
        f"{len(todo) - len(differ)}/{len(todo)} bundles identical (diagnose --json, stats.seconds zeroed); "
        f"{reverted} commits reverted for 'before'; {failed} exit non-zero on both sides alike"
        if not differ
        else f"{len(differ)}/{len(todo)} bundles differ"
    )
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
