"""Guards: the curated public surface, and the core never importing Slack or the bot."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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


def test_loading_plugins_imports_no_http_client() -> None:
    """Every ``crashcart`` command loads the plugins; aiohttp alone took 0.2 s of an offline diagnose."""
    code = (
        "import sys; from crashcart.plugins import load_plugins; found = load_plugins();"
        "bad=[m for m in sys.modules if m.split('.')[0] in {'aiohttp','slack_bolt','slack_sdk','openai'}];"
        "print(len(found), bad); raise SystemExit(1 if bad or not found else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


CORE = Path(crashcart.__file__).resolve().parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy and TYPE_CHECKING imports included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_no_file_of_the_core_imports_the_bot_or_slack() -> None:
    bad = {
        str(p.relative_to(CORE)): sorted(
            m for m in _imports(p) if m.split(".")[0] in {"bot", "slack_bolt", "slack_sdk"}
        )
        for p in CORE.rglob("*.py")
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_core_import_graph_has_no_cycle() -> None:
    def name(p: Path) -> str:
        rel = p.relative_to(CORE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        return ".".join(parts)

    modules = {name(p): p for p in CORE.rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    for m in modules:  # a package's __init__ re-exporting its own modules is not a cycle between stages
        graph[m] = {i for i in graph[m] if not i.startswith(m + ".")}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n] if n in path else [m, n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_no_module_is_over_500_lines() -> None:
    """The tree reads as the pipeline only while each module stays small enough to read whole (issue 12)."""
    roots = [CORE, CORE.parent / "bot"]
    long = {
        str(p.relative_to(CORE.parent)): n
        for r in roots
        for p in r.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}
