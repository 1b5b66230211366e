"""Scan stage, data half: the signature catalogue shipped in ``crashcart/data`` and its loader.

Input: the package's ``signatures.toml``, ``xid.toml`` and ``classes.toml``. Output: a validated,
frozen ``Catalogue`` (compiled line regexes, field extraction, summaries, Xid/SXid lookup) and the
expressions for one hyperscan database. Reads package data once (cached); otherwise pure.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
import sys
import threading
import tomllib
from collections.abc import Mapping
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crashcart.models import FileKind, Role, Severity
from crashcart.text import regex_end, template

ClassRole = Literal["root_candidate", "cascade", "teardown", "confirmation", "verdict"]  # verdict: no_failure
Block = Literal["traceback", "torchrun_summary"]

#: Class ids a signature may use besides the TAXONOMY ids of ``classes.toml``.
SPECIAL_CLASSES = frozenset({"unknown", "context", "xid", "sxid"})
#: Fields a summary may name although the pattern does not capture them (the scanner adds them:
#: the Xid/SXid mnemonic, and the fields of a traceback or torchrun summary block).
DERIVED_FIELDS = frozenset({"mnemonic"})
# libstdc++'s __verbose_terminate_handler (vterminate.cc) prints "terminate called after throwing an instance of
# 'T'" and then "  what():  <e.what()>": the exception's own message within this many lines below (interleaving)
TERMINATE_WHAT_LINES = 3
BLOCK_FIELDS: dict[str, frozenset[str]] = {
    "traceback": frozenset({"exception", "message"}),
    "torchrun_summary": frozenset({"rank", "local_rank", "exitcode", "pid", "host", "failure_time"}),
}

_DATA = "crashcart.data"


class CatalogueError(ValueError):
    """The shipped catalogue data is inconsistent (a packaging bug, caught by the tests)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Example(_Frozen):
    """A real line shape the signature must match, with fields it must extract."""

    text: str
    fields: dict[str, str] = Field(default_factory=dict)


class Signature(_Frozen):
    """One catalogue entry: a single-line regex and what a match means."""

    id: str
    class_id: str = Field(alias="class")
    role: Role
    severity: Severity
    pattern: str
    flags: list[Literal["i"]] = Field(default_factory=list)
    kinds: list[FileKind] = Field(default_factory=list)
    priority: int = 50
    summary: str
    block: Block | None = None
    sampled: bool = False  # progress-like lines: one match per scan buffer is enough (hyperscan SINGLEMATCH)
    examples: list[Example] = Field(min_length=1)
    counter_examples: list[str] = Field(default_factory=list)


class XidEntry(_Frozen):
    """What an Xid (GPU) or SXid (NVSwitch) code means for CrashCart."""

    code: int
    mnemonic: str
    class_id: str = Field(alias="class")
    role: Role
    severity: Severity
    description: str


class ClassInfo(_Frozen):
    """One TAXONOMY class (section 2 of TAXONOMY.md)."""

    id: str
    number: int
    title: str
    layer: str
    default_role: ClassRole
    severity: Severity
    hardware: bool
    explanation: str


_UNKNOWN_XID = XidEntry(
    code=-1,
    mnemonic="UNKNOWN_XID",
    class_id="unknown",
    role="root_candidate",
    severity="P1",
    description="Xid code not in CrashCart's catalogue; look it up in NVIDIA's Xid catalog.",
)
_UNKNOWN_SXID = XidEntry(
    code=-1,
    mnemonic="UNKNOWN_SXID",
    class_id="nvswitch_fabric_manager_error",
    role="root_candidate",
    severity="P1",
    description="NVSwitch SXid not in CrashCart's catalogue; see the Fabric Manager user guide.",
)


class Catalogue(BaseModel):
    """Signatures (index = position, used as hyperscan id), Xid/SXid tables and class metadata."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    signatures: list[Signature]
    xids: dict[int, XidEntry]
    sxids: dict[int, XidEntry]
    classes: dict[str, ClassInfo]

    @cached_property
    def index(self) -> dict[str, int]:
        """Signature id -> index."""
        return {s.id: i for i, s in enumerate(self.signatures)}

    @cached_property
    def compiled(self) -> dict[int, re.Pattern[str]]:
        """Signature index -> its compiled line regex, as ``regex`` compiles them (a plain attribute: a pydantic
        private one costs tens of microseconds a look-up, once per finding)."""
        return {}

    def regex(self, sig_index: int) -> re.Pattern[str]:
        """The compiled line regex of a signature (ASCII classes, like hyperscan; cached)."""
        got = self.compiled.get(sig_index)
        if got is None:
            sig = self.signatures[sig_index]
            flags = re.ASCII | (re.IGNORECASE if "i" in sig.flags else 0)
            got = self.compiled[sig_index] = re.compile(sig.pattern, flags)
        return got

    def extract(self, sig_index: int, line: str) -> dict[str, str] | None:
        """Named groups that took part in the first match on ``line``; None when it does not match.

        The values are interned: findings of many ranks repeat them (a tenth of the 10,000-rank bundle: 170,857
        values, 10,217 distinct), and each finding kept its own copy of each (~50 bytes) to the end."""
        m = self.regex(sig_index).search(line)
        if m is None:
            return None
        return {k: sys.intern(v) for k, v in m.groupdict().items() if v is not None}

    def summarize(self, sig_index: int, fields: Mapping[str, str]) -> str:
        """The signature's summary template filled from ``fields``; a missing field and the words that only
        introduce it are left out (``crashcart.text.template``)."""
        return template.fill(self.signatures[sig_index].summary, fields)

    def xid_info(self, code: int) -> XidEntry:
        """The catalogue entry of a GPU Xid; unknown codes get a generic ``unknown`` entry."""
        return self.xids.get(code) or _UNKNOWN_XID.model_copy(update={"code": code})

    def sxid_info(self, code: int) -> XidEntry:
        """The catalogue entry of an NVSwitch SXid; unknown codes get a generic NVSwitch entry."""
        return self.sxids.get(code) or _UNKNOWN_SXID.model_copy(update={"code": code})

    def class_title(self, class_id: str) -> str:
        """Short plain-English title of a class id (the id itself when it is not a TAXONOMY class)."""
        info = self.classes.get(class_id)
        if info is not None:
            return info.title
        return "Unclassified error" if class_id == "unknown" else class_id


def summary_fields(template: str) -> set[str]:
    """Field names a ``str.format`` template refers to."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


_FILES = ("signatures.toml", "xid.toml", "classes.toml")
_READING_MAGIC = "crashcart-catalogue-1"


def user_cache_dir() -> Path:
    """Where CrashCart keeps what it can rebuild (compiled databases, the catalogue's reading)."""
    return Path.home() / ".cache" / "crashcart"


def _cached_reading(key: str) -> dict[str, Any] | None:
    try:
        got = json.loads((user_cache_dir() / f"catalogue-{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RuntimeError):
        return None
    if not isinstance(got, dict) or got.get("magic") != _READING_MAGIC or got.get("key") != key:
        return None
    data = got.get("data")
    if not isinstance(data, dict) or not all(isinstance(data.get(n), dict) for n in _FILES):
        return None
    return data


def _keep_reading(key: str, data: dict[str, Any]) -> None:
    try:
        text = json.dumps({"magic": _READING_MAGIC, "key": key, "data": data})
        if json.loads(text)["data"] != data:  # a TOML date or time would not survive: keep no copy
            return
        target = user_cache_dir() / f"catalogue-{key}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except (OSError, TypeError, ValueError, RuntimeError):
        return


def _validate(cat: Catalogue, *, compile_patterns: bool = True) -> None:
    problems: list[str] = []
    known = set(cat.classes) | SPECIAL_CLASSES
    seen: set[str] = set()
    for sig in cat.signatures:
        if sig.id in seen:
            problems.append(f"duplicate signature id {sig.id}")
        seen.add(sig.id)
        if sig.class_id not in known:
            problems.append(f"{sig.id}: unknown class {sig.class_id}")
        if (sig.class_id == "context") != (sig.role == "context"):
            problems.append(f"{sig.id}: class 'context' and role 'context' go together")
        if compile_patterns:
            try:
                groups = set(re.compile(sig.pattern, re.ASCII).groupindex)
            except re.error as exc:
                problems.append(f"{sig.id}: bad pattern: {exc}")
                continue
        else:  # a reading already validated: its patterns compiled then
            groups = set(_GROUP_NAME.findall(sig.pattern))
        try:
            names = summary_fields(sig.summary)
        except ValueError as exc:
            problems.append(f"{sig.id}: bad summary: {exc}")
            continue
        derived = DERIVED_FIELDS | BLOCK_FIELDS.get(sig.block or "", frozenset())
        if missing := names - groups - derived:
            problems.append(f"{sig.id}: summary names fields the pattern lacks: {sorted(missing)}")
    for table, entries in (("xid", cat.xids), ("sxid", cat.sxids)):
        for code, entry in entries.items():
            if entry.class_id not in set(cat.classes) | {"unknown"}:
                problems.append(f"{table} {code}: unknown class {entry.class_id}")
    if problems:
        raise CatalogueError("; ".join(problems))


def _table(rows: list[dict[str, Any]], what: str) -> dict[int, XidEntry]:
    out: dict[int, XidEntry] = {}
    for row in rows:
        entry = XidEntry.model_validate(row)
        if entry.code in out:
            raise CatalogueError(f"duplicate {what} code {entry.code}")
        out[entry.code] = entry
    return out


@cache
def load_catalogue() -> Catalogue:
    """Load and validate the shipped catalogue (once per process)."""
    return read_catalogue()


def read_catalogue() -> Catalogue:
    """Read and validate the shipped catalogue (``load_catalogue`` keeps the one a process uses).

    The three TOML files are read as text; what tomllib made of them is kept as JSON in the user's cache,
    named by the texts' sha256 and written only once that reading validated (tomllib and compiling every
    pattern took about 0.2 s of every run; JSON reads it in a few ms). A cache hit is therefore a text
    already checked: the patterns are not compiled again (a signature's regex compiles when first used).
    Any problem with the cache means reading the TOML again, never a failure."""
    texts = {name: resources.files(_DATA).joinpath(name).read_text(encoding="utf-8") for name in _FILES}
    key = hashlib.sha256("\0".join(texts[n] for n in _FILES).encode()).hexdigest()[:32]
    data = _cached_reading(key)
    fresh = data is None
    if data is None:
        data = {name: tomllib.loads(text) for name, text in texts.items()}
    sigs = data["signatures.toml"].get("signature", [])
    xid = data["xid.toml"]
    cls = data["classes.toml"].get("class", [])
    classes: dict[str, ClassInfo] = {}
    for row in cls:
        info = ClassInfo.model_validate(row)
        if info.id in classes:
            raise CatalogueError(f"duplicate class id {info.id}")
        classes[info.id] = info
    cat = Catalogue(
        signatures=[Signature.model_validate(row) for row in sigs],
        xids=_table(xid.get("xid", []), "xid"),
        sxids=_table(xid.get("sxid", []), "sxid"),
        classes=classes,
    )
    _validate(cat, compile_patterns=fresh)
    if fresh:
        _keep_reading(key, data)
    return cat


_LINE_SPACE = r"\t\x0b\x0c\r "  # \s without \n
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
_GROUP_NAME = re.compile(r"\(\?P<(\w+)>")


def line_pattern(pattern: str, *, strip_names: bool = False) -> str:
    """``pattern`` made unable to match a newline, so a match never spans two lines of a buffer.

    Python ``re`` and hyperscan scan multi-line buffers; a negated class (``[^,]*``), ``\\s``, ``\\W`` or
    ``\\D`` would let a match run into the next line (ripgrep, which is line-oriented, never does). The
    rewrite adds ``\\n`` to negated classes and spells those escapes without it; the match set on any
    single line is unchanged. ``strip_names`` turns ``(?P<name>`` into ``(?:`` (ripgrep joins all patterns
    into one regex and rejects a group name used twice). Raises ``CatalogueError`` on a construct it
    cannot rewrite (``(?s``, ``(?x``, ``\\W`` inside a class).
    """
    if "(?s" in pattern or "(?x" in pattern:
        raise CatalogueError(f"dotall/verbose flags are not supported: {pattern}")
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            esc = pattern[i : i + 2]
            out.append({"\\s": f"[{_LINE_SPACE}]", "\\W": "[^\\w\\n]", "\\D": "[^\\d\\n]"}.get(esc, esc))
            i += 2
        elif c == "[":
            end, text = _line_class(pattern, i)
            out.append(text)
            i = end
        elif strip_names and (m := _NAMED_GROUP.match(pattern, i)):
            out.append("(?:")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _line_class(pattern: str, start: int) -> tuple[int, str]:
    """The character class at ``start`` rewritten to exclude ``\\n``; returns (index after it, text)."""
    i = start + 1
    negated = pattern.startswith("^", i)
    i += negated
    body: list[str] = []
    if pattern.startswith("]", i):  # a leading ] is a literal
        body.append("\\]")
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        if pattern[i] == "\\":
            esc = pattern[i : i + 2]
            if esc in ("\\W", "\\D") and not negated:
                raise CatalogueError(f"{esc} inside a character class is not supported: {pattern}")
            body.append(_LINE_SPACE if esc == "\\s" and not negated else esc)
            i += 2
        else:
            body.append(pattern[i])
            i += 1
    if i >= len(pattern):
        raise CatalogueError(f"unterminated character class: {pattern}")
    text = "[^" + "".join(body) + "\\n]" if negated else "[" + "".join(body) + "]"
    return i + 1, text


def hyperscan_expressions(cat: Catalogue) -> tuple[list[bytes], list[int], list[int]]:
    """Expressions, ids (= signature index) and flags for one ``hyperscan.Database.compile``.

    Each expression is ``line_pattern`` of the signature's pattern (a match stays on one line). Flags
    carry ``HS_FLAG_CASELESS`` for signatures with the ``i`` flag, and ``HS_FLAG_SINGLEMATCH`` for
    ``sampled`` ones (progress lines that occur on every step: one per buffer is enough); every other
    signature reports every match end, so the scanner finds every matching line.
    """
    import hyperscan

    expressions = [_one_end_per_line(line_pattern(s.pattern).encode("ascii")) for s in cat.signatures]
    ids = list(range(len(cat.signatures)))
    flags = [
        (hyperscan.HS_FLAG_CASELESS if "i" in s.flags else 0) | (hyperscan.HS_FLAG_SINGLEMATCH if s.sampled else 0)
        for s in cat.signatures
    ]
    return expressions, ids, flags


def _one_end_per_line(expression: bytes) -> bytes:
    """``expression`` extended to the end of its line, so that hyperscan reports one match per line.

    Hyperscan reports every offset where a match can end: ``\\d+(?:\\.\\d+)?`` ends after each digit, an
    optional trailing group once more, so a progress line printed every step used to cost eight callbacks
    into Python, and the scan ran at half speed on a Megatron log. ``(?:P)[^\\n]*$`` matches on exactly the
    lines ``P`` matches (``P`` never spans a newline, ``$`` is multi-line) and all its matches on a line end
    at the same offset, which hyperscan reports once. Expressions that already hold ``$`` are left alone
    (hyperscan rejects an end anchor inside a larger expression), and so are those that end on a literal
    character (``text.regex_end``): they end once per occurrence of it.
    """
    if b"$" in expression or regex_end.ends_on_literal(expression.decode("ascii")):
        return expression  # a literal ends it: one end per occurrence already (and the wrapper costs compile time)
    return b"(?:" + expression + b")[^\\n]*$"


def ripgrep_patterns(cat: Catalogue, *, sampled: bool = True) -> list[str]:
    """The catalogue as ``rg -f`` patterns (one per line) meaning what the scanner's matchers mean.

    ``(?-u:...)``: ASCII classes and bytes, like hyperscan and Python ``re`` on bytes; ``(?i:...)`` for
    case-insensitive signatures; group names removed (ripgrep rejects a name used twice). ``sampled=False``
    leaves out the sampled signatures, whose every line ripgrep reports but the scanner samples.
    """
    out = []
    for s in cat.signatures:
        if s.sampled and not sampled:
            continue
        p = line_pattern(s.pattern, strip_names=True)
        out.append(f"(?-u:(?i:{p}))" if "i" in s.flags else f"(?-u:{p})")
    return out
