"""Command line: ``crashcart diagnose|list|show|search|synth`` (DESIGN §4.1).

Reads Settings once and passes them down. ``diagnose --json`` prints exactly one JSON object on
stdout; progress and logs go to stderr. Exit 0 when a diagnosis was produced (including
``unknown``), 2 for unusable input with a one-line reason, 1 for an internal error.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import sys
import traceback
from difflib import get_close_matches
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from crashcart.cli_parser import UsageError, _fail, _parser
from crashcart.errors import (
    BundleError,
    BundleNotVisible,
    ClusterUnavailable,
    ConfigError,
    CrashCartError,
    IncidentNotFound,
    RunbookError,
)
from crashcart.plugins import Check, Plugin, load_plugins
from crashcart.settings import Settings, ray_address

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from crashcart.pipeline import Outcome
    from crashcart.store import Store

PROGRESS_MIN_BYTES = 64 * 1024 * 1024


PIPED_WIDTH = 100  # columns when stdout is a pipe or a file and COLUMNS is not set


def _stdout() -> Console:
    """stdout in the terminal's width (or ``COLUMNS``); a pipe or a file gets ``PIPED_WIDTH`` columns."""
    from rich.console import Console  # rich only where something is drawn: ``diagnose --json`` never is

    console = Console(highlight=False)
    if console.is_terminal:
        return console
    return Console(width=shutil.get_terminal_size((PIPED_WIDTH, 24)).columns, highlight=False)


#: cyclic-GC thresholds of a ``crashcart diagnose`` process (Python's default: 700, 10, 10)
DIAGNOSE_GC_THRESHOLDS = (10_000, 50, 50)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["diagnose"]:
        # a one-shot process: what the imports made is never garbage (frozen, no collection traverses it again),
        # and the scan's millions of short-lived tuples and models are collected less often; (b): 0.35 s of
        # collections holding the GIL -> about 0.1 s, the same peak RSS
        gc.freeze()
        gc.set_threshold(*DIAGNOSE_GC_THRESHOLDS)
    code = _main(argv)
    if argv is None:  # this process's own command line (the ``crashcart`` script, ``python -m crashcart``): it ends
        # next, and its objects go with it; frozen, the interpreter's last collections do not traverse them all
        # first (0.1 s of a diagnose, about a third of it for the imports' objects alone)
        gc.freeze()
    return code


def _main(argv: list[str] | None) -> int:
    plugins = load_plugins()
    words = sys.argv[1:] if argv is None else argv
    try:
        args = _parser(plugins, synth="synth" in words).parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already reported in one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        _check_text(args)
        owner = next((p for p in plugins if args.command in p.commands), None)
        if owner is not None:
            return owner.run(args, _settings(owner.settings_class))
        settings = _settings()
        if args.command == "doctor":
            return _doctor(settings, plugins)
        return _run(args, settings)
    except BundleError as exc:
        _fail(f"error: {exc.detail or type(exc).__name__}")
        return 2
    except (IncidentNotFound, RunbookError) as exc:
        _fail(f"error: {exc.detail}")
        return 2
    except ConfigError as exc:
        _fail(f"configuration: {exc.detail}")
        return 2
    except (ClusterUnavailable, BundleNotVisible) as exc:
        _fail(f"cluster: {exc.detail}")
        return 2
    except UsageError as exc:
        _fail(f"crashcart {args.command}: {exc}")
        return 2
    except OSError as exc:  # a path the user named cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        _fail(f"crashcart {args.command}: {exc.strerror or type(exc).__name__}{where}")
        return 2
    except CrashCartError as exc:
        stage = f" during {exc.stage}" if exc.stage else ""
        _fail(f"error{stage}: {type(exc).__name__}: {exc.detail}")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:  # the CLI edge: one of the two places allowed to catch everything
        trace = traceback.format_exc().encode("utf-8", "backslashreplace").decode("utf-8")
        sys.stderr.write(f"internal error (please report it with this trace):\n{trace}")
        return 1


def _settings(cls: type[Settings] = Settings) -> Settings:
    """Settings from the environment; a malformed variable is a ConfigError naming it."""
    try:
        return cls()
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first.get("loc", ())) or "?"
        env = name.upper() if name.upper().startswith("SLACK_") else f"CRASHCART_{name.upper()}"
        raise ConfigError(f"{env}: {first.get('msg', 'invalid value')}") from None


def _run(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "synth":
        return _synth(args)
    if getattr(args, "engine", None):
        settings = settings.model_copy(update={"engine": args.engine})
    if getattr(args, "cluster", None):
        try:
            settings = settings.model_copy(update={"ray_address": ray_address(args.cluster)})
        except ValueError as exc:
            raise UsageError(f"--cluster: {exc}") from None
    if settings.engine == "llm":
        _check_llm(settings)
    if args.command == "eval":
        return _eval(args, settings)
    if args.command == "diagnose":
        _check_out(args.out)
    if args.command == "diagnose" and args.no_store:
        return _diagnose(args, settings, None)
    from crashcart.store import Store

    store = Store(settings.store)
    try:
        if args.command == "diagnose":
            return _diagnose(args, settings, store)
        if args.command == "list":
            _list(store.list(args.limit), _stdout())
            return 0
        if args.command == "search":
            _list(store.search(args.text), _stdout())
            return 0
        if args.command in {"runbook", "approve", "reject"}:
            return _runbook(args, settings, store)
        if args.command == "show":
            got = store.get(args.id)
            if args.json:
                sys.stdout.write(got.document.model_dump_json(by_alias=True, indent=2) + "\n")
            else:
                from crashcart.report.terminal import render

                render(got.document, _stdout())
            return 0
    finally:
        store.close()
    return 1


def _synth(args: argparse.Namespace) -> int:
    from crashcart.synth import synthesize

    if args.cls not in args.classes:
        near = get_close_matches(args.cls.replace("-", "_"), args.classes, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        raise UsageError(f"unknown class {args.cls!r}; {hint}valid classes: {', '.join(args.classes)}")
    if args.layout is not None and args.layout not in args.layouts:
        raise UsageError(f"unknown layout {args.layout!r}; valid layouts: {', '.join(args.layouts)}")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is a file; give a new or empty directory")
    if args.out.is_dir() and any(args.out.iterdir()):
        raise UsageError(f"--out {args.out} is not empty; give a new or empty directory")
    try:
        synthesize(args.cls, args.out, ranks=args.ranks, nodes=args.nodes, seed=args.seed, layout=args.layout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _fail(f"wrote a {args.cls} incident ({args.ranks} ranks on {args.nodes} nodes) to {args.out}")
    return 0


_TEXT_ARGS = {"id": "ID", "text": "TEXT", "user": "--as", "reason": "--reason", "plan": "--plan", "job_id": "--job-id"}


def _check_text(args: argparse.Namespace) -> None:
    """Words that are stored or matched (ids, names, reasons) must be text; paths may hold any bytes."""
    for name, shown in _TEXT_ARGS.items():
        value = getattr(args, name, None)
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise UsageError(f"{shown} is not valid UTF-8 text: {value!r}") from None
            if "\x00" in value:
                raise UsageError(f"{shown} holds a NUL character: {value!r}")


def _check_out(out: Path | None) -> None:
    """``--out`` must be a directory we can write, or a path where one can be made."""
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory (it is created if missing)")
    parent = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot write in {parent}; give a directory you can write to")


def _diagnose(args: argparse.Namespace, settings: Settings, store: Store | None) -> int:
    from crashcart.pipeline import diagnose

    bar: Progress | None = None
    task = None
    # the bundle's size only where a bar may be drawn: a walk of every file (10,000 of them in a large bundle)
    if _stderr_may_be_terminal() and (size := _size(args.bundle)) >= PROGRESS_MIN_BYTES:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        err = Console(stderr=True, highlight=False)
        if err.is_terminal:
            bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=err,
            )
            task = bar.add_task("scanning", total=size)
            bar.start()

    def progress(done: int, total: int) -> None:
        if bar is not None and task is not None:
            bar.update(task, completed=done, total=total)

    def on_stage(name: str) -> None:
        if bar is not None and task is not None:
            bar.update(task, description=name)

    try:
        outcome = asyncio.run(
            diagnose(
                args.bundle,
                settings,
                job_id=args.job_id,
                store=store,
                progress=progress,
                on_stage=on_stage,
            )
        )
    finally:
        if bar is not None:
            bar.stop()
    doc = outcome.document
    payload = doc.model_dump(mode="json", by_alias=True)
    written = _write_reports(args.out, outcome, store) if args.out else []
    if args.json:
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
    else:
        from crashcart.report.terminal import render

        render(doc, _stdout())
    if written:
        _fail(f"wrote {', '.join(p.name for p in written)} to {args.out.resolve()}")
    return 0


def _stderr_may_be_terminal() -> bool:
    """False only where rich's ``Console.is_terminal`` is False for stderr (no tty, neither ``TTY_COMPATIBLE`` nor
    ``FORCE_COLOR`` set), so that a piped ``diagnose`` never imports rich to be told so (0.02 s of every run)."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty or "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ  # noqa: TID251 (rich reads these)


def _check_llm(settings: Settings) -> None:
    """The LLM engine needs a key, unless it answers from a replay file."""
    try:
        llm = settings.llm  # parses CRASHCART_LLM_PRICES
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if llm.api_key is None and llm.cassette_mode != "replay":
        raise ConfigError(
            "the llm engine needs CRASHCART_LLM_API_KEY "
            "(or CRASHCART_LLM_CASSETTE with CRASHCART_LLM_CASSETTE_MODE=replay)"
        )
    if llm.cassette_mode != "off" and llm.cassette is None:
        raise ConfigError(f"CRASHCART_LLM_CASSETTE_MODE={llm.cassette_mode} needs CRASHCART_LLM_CASSETTE (a file path)")


def _doctor(settings: Settings, plugins: list[Plugin]) -> int:
    from crashcart.llm.doctor import run_checks

    extra = [check for p in plugins for check in p.doctor_checks(_settings(p.settings_class))]

    async def everything() -> list[Check]:
        return [*await run_checks(settings), *[await check() for check in extra]]

    checks = asyncio.run(everything())
    from rich.table import Table

    table = Table(show_edge=False)
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col)
    colour = {"ok": "green", "fail": "bold red", "skip": "dim"}
    for c in checks:
        table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail, c.fix)
    _stdout().print(table)
    return 1 if any(c.status == "fail" for c in checks) else 0


def _eval(args: argparse.Namespace, settings: Settings) -> int:
    from rich.table import Table

    from crashcart import evaluate

    cases = [c for c in evaluate.find_cases(args.dirs) if evaluate.in_split(c, args.split)]
    if not cases:
        where = ", ".join(map(str, args.dirs))
        split = f" labelled split {args.split!r}" if args.split else ""
        _fail(f"crashcart eval: no bundles with {evaluate.LABELS}{split} under {where}")
        return 2
    results = evaluate.run_eval(cases, settings)
    if args.json:
        sys.stdout.write(json.dumps(evaluate.as_json(results)) + "\n")
    else:
        console = _stdout()
        table = Table(show_edge=False)
        for col in ("case", "expected", "got", "culprit", "line hit", "cited ok", "s"):
            table.add_column(col)
        yes = {True: "[green]yes[/]", False: "[red]no[/]"}
        for r in results:
            got = _shown(r.got) if r.class_ok else f"[red]{_shown(r.got)}[/]"
            culprit = _shown(r.culprit or "") if r.culprit_ok else f"[red]{_shown(r.culprit or '-')}[/]"
            row = (_shown(r.case), _shown(r.expected), got, culprit, yes[r.line_hit], yes[r.citations_ok])
            table.add_row(*row, f"{r.seconds:.2f}")
        console.print(table)
        s = evaluate.summary(results)
        for line in evaluate.summary_lines(results):
            console.print(line, markup=False)
        if settings.engine == "llm":
            llm = s["llm"]
            states = ", ".join(f"{k} {v}" for k, v in sorted(llm["status"].items()))
            console.print(f"models: {llm['calls']} calls, {llm['tokens']:,} tokens, ${llm['cost_usd']:.4f}; {states}")
        for c in s["confusion"]:
            console.print(f"  confused {c['expected']} -> {c['got']} ({c['count']})")
        for r in results:
            for note in r.notes:
                console.print(f"  {_printable(r.case)}: {_printable(note)}", style="dim", markup=False)
    return 0 if all(r.passed for r in results) else 1


def _printable(text: str) -> str:
    """``text`` as any terminal can print it: a file name that is not UTF-8 keeps its bytes as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _shown(text: str) -> str:
    """``_printable`` and safe inside rich markup (a case named ``[red]x`` is shown as it is)."""
    from rich.markup import escape

    return escape(_printable(text))


def _write_reports(out: Path, outcome: Outcome, store: Store | None) -> list[Path]:
    """diagnosis.json, postmortem.md, runbook.md, runbook.json and timeline.png into ``out``."""
    from crashcart.report.postmortem import render_postmortem
    from crashcart.report.timeline import render_timeline
    from crashcart.runbook import workflow as runbooks
    from crashcart.runbook.render import render_runbook_md, runbook_json

    doc = outcome.document
    record = runbooks.get(store, doc.incident_id) if store is not None else None
    out.mkdir(parents=True, exist_ok=True)
    payload = doc.model_dump(mode="json", by_alias=True)
    (out / "diagnosis.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    (out / "postmortem.md").write_text(render_postmortem(doc, doc.runbook))
    (out / "runbook.md").write_text(render_runbook_md(doc, doc.runbook, record=record))
    plan = runbook_json(doc, doc.runbook, record=record)
    (out / "runbook.json").write_text(json.dumps(plan, indent=2, ensure_ascii=False) + "\n")
    render_timeline(doc, out / "timeline.png", series=outcome.series)
    names = ("diagnosis.json", "postmortem.md", "runbook.md", "runbook.json", "timeline.png")
    return [out / n for n in names]


def _runbook(args: argparse.Namespace, settings: Settings, store: Store) -> int:
    from crashcart.runbook import workflow as runbooks
    from crashcart.runbook.render import render_runbook_md, runbook_json

    approvers = settings.approver_ids or None
    if args.command == "approve":
        rec = runbooks.approve(store, args.id, args.user, plan_hash=args.plan, approvers=approvers)
        sys.stdout.write(f"approved the runbook of {rec.incident_id} (plan {rec.plan_hash[:12]}) as {args.user}\n")
        return 0
    if args.command == "reject":
        rec = runbooks.reject(store, args.id, args.user, args.reason, plan_hash=args.plan, approvers=approvers)
        sys.stdout.write(f"rejected the runbook of {rec.incident_id} as {args.user}: {args.reason}\n")
        return 0
    rec = runbooks.get(store, args.id)
    doc = store.get(rec.incident_id).document
    if args.json:
        sys.stdout.write(json.dumps(runbook_json(doc, rec.runbook, record=rec), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_runbook_md(doc, rec.runbook, record=rec))
    return 0


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return 0


def _list(rows: list, console: Console) -> None:  # type: ignore[type-arg]
    from rich.table import Table

    table = Table(show_edge=False)
    table.add_column("id", no_wrap=True, min_width=max((len(r.id) for r in rows), default=2))  # never cut: it is typed
    for col in ("when", "job", "root cause", "culprit", "confidence", "runs"):
        table.add_column(col)
    for r in rows:
        culprit = ", ".join(
            x for x in (r.culprit_node or "", f"rank {r.culprit_rank}" if r.culprit_rank is not None else "") if x
        )
        table.add_row(
            r.id,
            f"{r.updated_at:%Y-%m-%d %H:%M}",
            r.job_id or "",
            r.root_class,
            culprit,
            f"{r.confidence:.2f}",
            str(r.runs),
        )
    if not rows:
        console.print("no incidents")
        return
    console.print(table)
