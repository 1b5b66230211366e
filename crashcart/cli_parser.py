"""The command line's grammar: every subcommand, its options and their help (defaults shown), and usage
errors that say what to fix in one line."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from crashcart.plugins import Plugin

if TYPE_CHECKING:
    pass


class UsageError(Exception):
    """A command line that cannot run: exit 2 with this one line."""


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, when it has one worth showing; the epilog keeps its lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = action.default is not None and action.default is not False and action.default != argparse.SUPPRESS
        if shown and "%(default)" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says what to fix (and where to read more), exit 2."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(2)


def _whole(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more, not {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}, not {value:,}")
        return value

    return parse


def _synth_help() -> tuple[list[str], list[str], str]:
    from crashcart.synth import CLASSES, LAYOUTS

    text = "\n".join(
        [
            *textwrap.wrap(f"CLASS is one of: {', '.join(CLASSES)}.", 78, break_on_hyphens=False),
            "",
            *textwrap.wrap(
                f"LAYOUT is one of: {', '.join(LAYOUTS)} (default: one the class can use, picked by the seed).", 78
            ),
        ]
    )
    return list(CLASSES), list(LAYOUTS), text


def _parser(plugins: list[Plugin], *, synth: bool = False) -> argparse.ArgumentParser:
    fmt = _Help
    p = _Parser(prog="crashcart", description="Find and prove why a GPU training job died.", formatter_class=fmt)
    sub: argparse._SubParsersAction[argparse.ArgumentParser]
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def cmd(name: str, help: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".", formatter_class=fmt, **kw)

    engine_help = "offline (deterministic, no network) or llm (default: CRASHCART_ENGINE, else offline)"
    d = cmd("diagnose", "diagnose an incident bundle (dir, .tar, .tar.gz, .zip or a log file)")
    d.add_argument("bundle", type=Path, metavar="BUNDLE", help="the bundle: a directory, an archive or one log file")
    d.add_argument("--engine", choices=["offline", "llm"], default=None, help=engine_help)
    d.add_argument("--json", action="store_true", help="print diagnosis.json on stdout and nothing else")
    d.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write diagnosis.json, postmortem.md, runbook.md, runbook.json and timeline.png into DIR",
    )
    d.add_argument("--job-id", metavar="ID", help="the scheduler's job id, if the bundle does not say")
    d.add_argument("--no-store", action="store_true", help="do not record the run in the database")
    d.add_argument(
        "--cluster",
        metavar="ray://HOST:PORT|local",
        help="scan a directory bundle on a Ray cluster (pip install 'crashcart[ray]'; every worker must see the "
        "directory at the same path) or on a Ray started here (local); an archive or a single log file is still "
        "opened and scanned on this machine (default: CRASHCART_RAY_ADDRESS, else no Ray)",
    )
    ls = cmd("list", "recent incidents")
    ls.add_argument("--limit", type=_whole(1, 100_000), default=20, metavar="N", help="how many to show")
    sh = cmd("show", "show a stored incident")
    sh.add_argument("id", metavar="ID", help="an incident id (or its start) from crashcart list")
    sh.add_argument("--json", action="store_true", help="print its diagnosis.json")
    se = cmd("search", "full-text search over stored incidents")
    se.add_argument("text", metavar="TEXT", help="words to find")
    ev = cmd("eval", "diagnose labelled bundles (with expected.json) and score the answers")
    ev.add_argument(
        "dirs",
        nargs="*",
        type=Path,
        default=[Path("incidents")],
        metavar="DIR",
        help="where to look (default: incidents)",
    )
    ev.add_argument("--engine", choices=["offline", "llm"], default=None, help=engine_help)
    ev.add_argument(
        "--split",
        choices=["dev", "held-out"],
        default=None,
        help="only the cases labelled with this split (tune on dev, report held-out); default: every case",
    )
    ev.add_argument("--json", action="store_true", help="print the scores as JSON")
    rb = cmd("runbook", "show the dry-run runbook of an incident and its approval trail")
    rb.add_argument("id", metavar="ID", help="an incident id")
    rb.add_argument("--json", action="store_true", help="print runbook.json")
    ap = cmd("approve", "approve an incident's runbook (CrashCart never executes it)")
    ap.add_argument("id", metavar="ID", help="an incident id")
    ap.add_argument("--as", dest="user", required=True, metavar="USER", help="who approves")
    ap.add_argument("--plan", metavar="HASH", help="the plan hash you reviewed (crashcart runbook ID shows it)")
    rj = cmd("reject", "reject an incident's runbook")
    rj.add_argument("id", metavar="ID", help="an incident id")
    rj.add_argument("--as", dest="user", required=True, metavar="USER", help="who rejects")
    rj.add_argument("--reason", required=True, metavar="TEXT", help="why")
    rj.add_argument("--plan", metavar="HASH", help="the plan hash you reviewed")
    cmd("doctor", "check the model endpoint, the model ids and Slack auth (the offline engine needs none of them)")
    classes, layouts, epilog = _synth_help() if synth else ([], [], "")
    sy = cmd(
        "synth",
        "write a synthetic incident bundle of one failure class",
        epilog=epilog or None,
    )
    sy.add_argument("cls", metavar="CLASS", help="a failure class id (listed below)")
    sy.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty directory")
    sy.add_argument("--ranks", type=_whole(1, 65_536), default=8, metavar="N", help="ranks in the job")
    sy.add_argument("--nodes", type=_whole(1, 8_192), default=2, metavar="M", help="nodes in the job")
    sy.add_argument(
        "--seed", type=_whole(0, 2**32 - 1), default=0, metavar="S", help="random seed (same seed, same bytes)"
    )
    sy.add_argument("--layout", default=None, metavar="LAYOUT", help="bundle layout (listed below)")
    sy.set_defaults(classes=classes, layouts=layouts)
    for plugin in plugins:
        plugin.add_commands(sub)
    return p


def _fail(message: str) -> None:
    """One line on stderr, never wrapped, so scripts and people read the same thing (any bytes the
    terminal cannot show, such as a non-UTF-8 file name, are written as escapes)."""
    line = " ".join(message.split()) + "\n"
    sys.stderr.write(line.encode("utf-8", "backslashreplace").decode("utf-8"))
    sys.stderr.flush()
