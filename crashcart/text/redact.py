"""Redaction: replace secrets in log text with stable placeholders before any text leaves the machine.

Input: text, one or many lines. Output: the same text with each secret replaced by
``«redacted:<kind>:<first 8 hex of sha256(secret)>»``, keeping the text around it; a line without a
secret comes back byte-identical. ``redact_text`` is pure and works line by line; ``Redactor`` adds a
local map back to the originals and follows PEM blocks across lines. No I/O.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

POLICY_VERSION = "redact/v2"

_PLACEHOLDER = re.compile(r"«redacted:[a-z0-9_]+:[0-9a-f]{8}»")
# Cheap anchors, searched in the lower-cased line: a line that has none of them (and is not a 64-76
# character run that could be a PEM body line) holds nothing any rule below would find.
_PRECHECK = re.compile(
    r"xox|xapp-|hooks\.slack|sk-|k_live_|k_test_|whsec_|bearer|authoriz|gh[pousr]_|github_pat_"
    r"|gl(?:pat|rt|dt|cbt|ptt|ft|soat)-|hf_|akia|asia|abia|acca|aiza|sig=|eyj|-----|passw|passph|pwd|secret"
    r"|token(?![a-z])|key|wandb|://"
)
# a PEM body line, alone or after a log prefix ("0: ", "[rank3]: ", a timestamp)
_B64_TAIL = r"(?:^|(?<=[\s:|\]>]))(?P<s>[A-Za-z0-9+/]{64,76})\s*$"
_B64_LINE = re.compile(_B64_TAIL)
_STEMS = (
    r"(?:pass(?:word|wd|phrase)|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?(?:access[_-]?)?key"
    r"|private[_-]?key|account[_-]?key|signing[_-]?key|auth[_-]?key|master[_-]?key)"
)
_TERM = "\"'`«»,;&\\s"  # ends an unquoted value


def _value(first_excluded: str = "") -> str:
    """A value: ``\\"…\\"``, ``"…"``, ``'…'`` or a bare run; groups v1..v4."""
    return (
        r"(?:\\\"(?P<v1>(?:(?!\\\").)+)\\\"|\"(?P<v2>(?:[^\"\\]|\\.)+)\"|'(?P<v3>(?:[^'\\]|\\.)+)'"
        rf"|(?P<v4>[^{_TERM}{first_excluded}][^{_TERM}]*))"
    )


_VALUE_GROUPS = ("v1", "v2", "v3", "v4")
_PEM_BEGIN = r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM_BEGIN_RE = re.compile(_PEM_BEGIN)
_PEM_END_RE = re.compile(_PEM_END)
_PEM_BODY = re.compile(r"(?:^|(?<=[\s:|\]>\"']))(?P<s>[A-Za-z0-9+/]{4,}={0,2})\s*$")
_PEM_HEADER = re.compile(r"^\s*(?:Proc-Type|DEK-Info|Comment):|^\s*$")
_PEM_MAX_LINES = 256
_BENIGN_WORDS = frozenset(
    {
        *("none", "null", "nil", "true", "false", "yes", "no", "on", "off", "undefined", "unset", "empty"),
        *("redacted", "hidden", "masked", "omitted", "n/a", "na", "notset", "not_set", "secret", "password", "token"),
    }
)
_ENV_REF = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\(.*\)|%\(\w+\)s|%s|\{\{.*\}\}")


@dataclass(frozen=True)
class _Rule:
    kind: str | Callable[[re.Match[str]], str]
    pattern: re.Pattern[str]
    groups: tuple[str, ...] = ("s",)
    check: Callable[[re.Match[str], str], bool] | None = None


def _has_digit(s: str) -> bool:
    return any(c.isdigit() for c in s)


def _mixed_case(s: str) -> bool:
    return any(c.isupper() for c in s) and any(c.islower() for c in s)


def _tokenish(_m: re.Match[str], s: str) -> bool:
    """An opaque credential, not an English word: has a digit and a letter, or is long and mixed-case."""
    if _has_digit(s) and any(c.isalpha() for c in s):
        return True
    return len(s) >= 32 and _mixed_case(s)


def _openai_ok(_m: re.Match[str], s: str) -> bool:
    body = s[3:]
    return _has_digit(body) and (any(c.isupper() for c in body) or re.fullmatch(r"[0-9a-f]{32,}", body) is not None)


def _pem_line_ok(_m: re.Match[str], s: str) -> bool:
    return _mixed_case(s) and _has_digit(s) and re.fullmatch(r"[0-9a-fA-F]+", s) is None and s.count("/") <= 6


def _benign(value: str) -> bool:
    """Values that are not secrets: empty, masked, None/True, references like $VAR, tokenizer tokens."""
    v = value.strip()
    if not v.replace("«", "").strip():
        return True
    if v[0] in "<[{(" or v[-1] in "([":  # tokenizer tokens, structures, code like os.environ[
        return True
    if v.lower() in _BENIGN_WORDS or _ENV_REF.fullmatch(v) is not None:
        return True
    return all(c in "*xX•#.-_?" for c in v)


def _generic_kind(key: str) -> str:
    k = key.lower().replace("-", "_").lstrip("_.")
    if "wandb" in k:
        return "wandb_key"
    if "aws" in k and "secret" in k:
        return "aws_secret_key"
    for suffixes, kind in (
        (("password", "passwd", "passphrase", "pwd"), "password"),
        (("client_secret", "clientsecret"), "client_secret"),
        (("secret",), "secret"),
        (("token",), "token"),
        (("api_key", "apikey"), "api_key"),
        (("secret_access_key", "secretaccesskey", "secret_key", "secretkey"), "secret_key"),
        (("access_key", "accesskey"), "access_key"),
        (("private_key", "privatekey"), "private_key"),
        (("account_key", "accountkey"), "account_key"),
    ):
        if k.endswith(suffixes):
            return kind
    return "secret"


def _generic_ok(m: re.Match[str], s: str) -> bool:
    if _benign(s):
        return False
    kind = _generic_kind(m.group("k"))
    if m.group("k").lower().endswith("pwd") and s[:1] in "/~":
        return False  # $PWD is the working directory
    if kind in ("token", "api_key", "access_key", "secret_key"):
        return len(s) >= 8 and not re.fullmatch(r"[\d.]+", s)
    return True


def _url_ok(_m: re.Match[str], s: str) -> bool:
    return not _benign(s)


def _auth_kind(m: re.Match[str]) -> str:
    scheme = (m.group("scheme") or "").lower()
    return {"bearer": "bearer", "basic": "basic_auth"}.get(scheme, "authorization")


def _auth_ok(m: re.Match[str], s: str) -> bool:
    scheme = (m.group("scheme") or "").lower()
    if scheme == "basic":
        return len(s) >= 4
    if scheme:  # "Authorization: Bearer …" is context enough for any opaque value
        return len(s) >= 8 and not _benign(s)
    return _tokenish(m, s)


_NB = r"(?<![A-Za-z0-9])"  # not glued to a preceding alphanumeric
_RULES: tuple[_Rule, ...] = (
    _Rule("private_key", re.compile(rf"(?P<s>{_PEM_BEGIN}(?:.*?{_PEM_END}|.*))")),
    _Rule("private_key", re.compile(rf"(?P<s>{_PEM_END})")),
    _Rule("private_key", _B64_LINE, check=_pem_line_ok),
    _Rule("slack_webhook", re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/-]{8,})")),
    _Rule(
        "slack_token",
        re.compile(rf"{_NB}(?P<s>(?:xoxe\.)?xox[a-z]-[A-Za-z0-9-]{{8,}}|xapp-\d-[A-Za-z0-9-]{{8,}})"),
        check=lambda _m, s: _has_digit(s[5:]),
    ),
    _Rule(
        lambda m: "anthropic_key" if m.group("s").startswith("sk-ant-") else "openai_key",
        re.compile(r"(?<![A-Za-z0-9_-])(?P<s>sk-[A-Za-z0-9_-]{20,})"),
        check=_openai_ok,
    ),
    _Rule("stripe_key", re.compile(rf"{_NB}(?P<s>[sr]k_(?:live|test)_[A-Za-z0-9]{{10,}}|whsec_[A-Za-z0-9+/=]{{20,}})")),
    _Rule("github_token", re.compile(rf"{_NB}(?P<s>gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{30,}})")),
    _Rule("gitlab_token", re.compile(rf"{_NB}(?P<s>gl(?:pat|rt|dt|cbt|ptt|ft|soat)-[A-Za-z0-9_.-]{{20,}})")),
    _Rule("hf_token", re.compile(rf"{_NB}(?P<s>hf_[A-Za-z0-9]{{30,}})")),
    _Rule("aws_access_key_id", re.compile(rf"{_NB}(?P<s>(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{{16}})(?![A-Za-z0-9])")),
    _Rule("gcp_api_key", re.compile(r"(?<![A-Za-z0-9_-])(?P<s>AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])")),
    _Rule("azure_storage_key", re.compile(rf"{_NB}(?:Account|SharedAccess)Key=(?P<s>[^;\s\"'«»]+)")),
    _Rule("azure_sas", re.compile(r"(?<![A-Za-z0-9_])sig=(?P<s>[A-Za-z0-9%+/=]{16,})")),
    _Rule("wandb_key", re.compile(r"\bwandb\s+login\s+(?:--?[a-z-]+\s+)*(?P<s>[A-Za-z0-9_-]{40,})")),
    _Rule(
        _auth_kind,
        re.compile(
            r"(?i:(?:proxy-)?authorization)[\"']?\s*[:=]\s*[\"']?"
            r"(?:(?P<scheme>(?i:bearer|basic|token|bot|apikey|ssws))\s+)?(?P<s>[A-Za-z0-9._~+/=-]{4,})"
        ),
        check=_auth_ok,
    ),
    _Rule("bearer", re.compile(rf"{_NB}(?i:bearer)\s+(?P<s>[A-Za-z0-9._~+/=-]{{8,}})"), check=_tokenish),
    _Rule("jwt", re.compile(r"(?<![A-Za-z0-9_-])(?P<s>eyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*)")),
    _Rule(
        "url_password",
        re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@«»\"']*:(?P<s>[^\s/?#@«»\"']+)@(?!sha\d+:)[A-Za-z0-9\[]"),
        check=_url_ok,
    ),
    _Rule(
        lambda m: _generic_kind(m.group("k")),
        re.compile(rf"(?<![^\s\"'=(,])(?P<k>--?[A-Za-z0-9_.-]*?{_STEMS})\s+{_value('-')}", re.IGNORECASE),
        _VALUE_GROUPS,
        _generic_ok,
    ),
    _Rule(
        lambda m: _generic_kind(m.group("k")),
        re.compile(
            rf"(?<![A-Za-z0-9_./-])(?P<k>[A-Za-z0-9_.-]*?{_STEMS})\\?[\"']?\s*(?:=>|[:=])\s*{_value()}", re.IGNORECASE
        ),
        _VALUE_GROUPS,
        _generic_ok,
    ),
)


def _trim(value: str, start: int) -> tuple[str, int, int]:
    """Drop trailing punctuation that closes the surrounding text, e.g. ``(password=x)`` or ``token=x.``."""
    v = value
    while v and v[-1] in ".:)]}>":
        opener = {")": "(", "]": "[", "}": "{", ">": "<"}.get(v[-1])
        if opener is not None and v.count(opener) >= v.count(v[-1]):
            break
        v = v[:-1]
    return v, start, start + len(v)


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    kind: str


def _may_hold_secret(line: str) -> bool:
    return _PRECHECK.search(line.lower()) is not None or _B64_LINE.search(line) is not None


def _spans(line: str, in_pem: bool) -> list[_Span]:
    return _find(line, in_pem) if in_pem or _may_hold_secret(line) else []


def _find(line: str, in_pem: bool) -> list[_Span]:
    """Where the secrets are in ``line``; existing placeholders are never matched again."""
    scan = _PLACEHOLDER.sub(lambda m: "«" * len(m.group()), line) if "«" in line else line
    found: list[tuple[int, int, int, str]] = []  # start, end, priority, kind
    if in_pem:
        body = _PEM_BODY.search(scan)
        if body is not None:
            found.append((body.start("s"), body.end("s"), -1, "private_key"))
    for priority, rule in enumerate(_RULES):
        for m in rule.pattern.finditer(scan):
            name = next((g for g in rule.groups if m.group(g) is not None), None)
            if name is None:
                continue
            secret, start, end = m.group(name), m.start(name), m.end(name)
            if name == "v4":
                secret, start, end = _trim(secret, start)
            if not secret or (rule.check is not None and not rule.check(m, secret)):
                continue
            kind = rule.kind if isinstance(rule.kind, str) else rule.kind(m)
            found.append((start, end, priority, kind))
    if not found:
        return []
    found.sort()
    merged: list[tuple[int, int, int, str]] = []  # overlapping finds become one span named by the widest
    for start, end, priority, kind in found:
        if merged and start < merged[-1][1]:
            m_start, m_end, m_pri, m_kind = merged[-1]
            wider = (end - start, -priority) > (m_end - m_start, -m_pri)
            merged[-1] = (m_start, max(m_end, end), priority if wider else m_pri, kind if wider else m_kind)
        else:
            merged.append((start, end, priority, kind))
    return [_Span(s, e, k) for s, e, _, k in merged]


def _placeholder(kind: str, secret: str) -> str:
    digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"«redacted:{kind}:{digest}»"


def _apply(line: str, spans: list[_Span], sink: dict[str, str] | None) -> str:
    parts: list[str] = []
    pos = 0
    for span in spans:
        secret = line[span.start : span.end]
        ph = _placeholder(span.kind, secret)
        if sink is not None:
            sink[ph] = secret
        parts += (line[pos : span.start], ph)
        pos = span.end
    parts.append(line[pos:])
    return "".join(parts)


def _redact_line(line: str, in_pem: bool = False, sink: dict[str, str] | None = None) -> str:
    """Redact ``line`` until nothing more is found.

    Replacing a secret can expose a neighbour that its text was shielding (``-----END … KEY-----sk-…``);
    running to the fixed point is what makes redaction idempotent.
    """
    for _ in range(len(line)):  # each round turns at least one character into a placeholder, so this ends
        spans = _spans(line, in_pem)
        if not spans:
            break
        line = _apply(line, spans, sink)
    return line


def redact_text(text: str) -> str:
    """Replace every secret in ``text`` with ``«redacted:<kind>:<8 hex>»``; see the module docstring.

    Deterministic and line-local: ``redact_text(a + "\\n" + b) == redact_text(a) + "\\n" + redact_text(b)``.
    Lines without a secret and all newlines are kept byte for byte; ``redact_text`` is idempotent.
    """
    return "\n".join(_redact_line(line) for line in text.split("\n"))


def contains_secret(text: str) -> bool:
    """Whether ``redact_text`` would replace anything in ``text``."""
    return any(_spans(line, in_pem=False) for line in text.split("\n"))


def _is_pem_body(line: str) -> bool:
    if _PEM_HEADER.search(line) is not None:
        return True
    m = _PEM_BODY.search(line)
    if m is None:
        return False
    s = m.group("s")
    return len(s) >= 16 or s.endswith("=") or any(c.isdigit() or c in "+/" for c in s) or _mixed_case(s)


class Redactor:
    """Redacts like ``redact_text`` and remembers each placeholder's original, for local display only.

    It also follows PEM private-key blocks across lines and calls: after a ``-----BEGIN … PRIVATE KEY-----``
    line, base64 body lines (of any length, after any log prefix) are redacted until the END line.
    """

    def __init__(self) -> None:
        self._originals: dict[str, str] = {}
        self._pem_lines = 0  # > 0 while inside a PEM private-key block

    def redact(self, text: str) -> str:
        """Redact ``text``, recording placeholder -> original."""
        return "\n".join(self._line(line) for line in text.split("\n"))

    def _line(self, line: str) -> str:
        in_pem = self._pem_lines > 0
        if in_pem and _PEM_END_RE.search(line) is None and not _is_pem_body(line):
            in_pem = False
        out = _redact_line(line, in_pem, self._originals)
        begins = list(_PEM_BEGIN_RE.finditer(line))
        if begins and _PEM_END_RE.search(line, begins[-1].end()) is None:
            self._pem_lines = 1
        elif in_pem and _PEM_END_RE.search(line) is None and self._pem_lines < _PEM_MAX_LINES:
            self._pem_lines += 1
        else:
            self._pem_lines = 0
        return out

    def restore(self, text: str) -> str:
        """Put the originals back in place of this redactor's placeholders (others are left as they are)."""
        for _ in range(len(self._originals) + 1):  # a secret can contain an earlier placeholder
            restored = _PLACEHOLDER.sub(lambda m: self._originals.get(m.group(), m.group()), text)
            if restored == text:
                break
            text = restored
        return text

    @property
    def count(self) -> int:
        """How many distinct secrets were replaced."""
        return len(self._originals)

    @property
    def kinds(self) -> dict[str, int]:
        """Kind -> number of distinct secrets of that kind."""
        return dict(Counter(ph.split(":")[1] for ph in self._originals))
