"""Block Kit within Slack's limits, only verified citations shown, secrets redacted; error messages;
approvers from the static list and the user group (cached; denied when Slack cannot answer)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_slack import INCIDENTS, FakeSlack
from slack_sdk.web.async_client import AsyncWebClient

import crashcart
from bot.approvers import Approvers
from bot.blocks import (
    MAX_BLOCKS,
    MAX_HEADER,
    MAX_SECTION,
    Block,
    cut_list,
    diagnosis_message,
    fit,
    section,
    text_length,
)
from bot.messages import ERROR_MESSAGES, error_reason, human_seconds
from bot.mrkdwn import escape
from crashcart import CrashCartError, DiagnosisDocument, Settings, diagnose, load_catalogue
from crashcart.models import DocCitation, DocSymptom


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> DiagnosisDocument:
    tmp = tmp_path_factory.mktemp("blocks")
    settings = Settings(_env_file=None, db=tmp / "db", work_dir=tmp / "work")  # type: ignore[call-arg]
    return asyncio.run(diagnose(INCIDENTS / "gpu-fell-off-bus", settings)).document


def all_text(blocks: list[Block]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def check_limits(blocks: list[Block]) -> None:
    assert len(blocks) <= MAX_BLOCKS
    assert text_length(blocks) <= 12_000
    for block in blocks:
        if block["type"] == "section" and "text" in block:
            assert len(block["text"]["text"]) <= MAX_SECTION
        if block["type"] == "header":
            assert len(block["text"]["text"]) <= MAX_HEADER


def test_a_huge_diagnosis_stays_within_the_limits(document: DiagnosisDocument) -> None:
    ok = document.root_cause.citations[0]
    many = [ok.model_copy(update={"line": n, "text": "x" * 5000}) for n in range(1, 200)]
    bad = DocCitation(
        file="rank-0.log", line=7, text="password=hunter2 FORGED LINE", verified=False, status="text_mismatch"
    )
    symptom = document.symptoms[0]
    symptoms = [symptom.model_copy(update={"summary": "s" * 3000, "count": n}) for n in range(300)]
    root = document.root_cause.model_copy(
        update={"citations": [*many, bad], "summary": "y" * 10_000, "class_": "z" * 500}
    )
    doc = document.model_copy(update={"root_cause": root, "symptoms": symptoms})
    message = diagnosis_message(doc)
    check_limits(message.blocks)
    text = all_text(message.blocks)
    assert "… and 194 more in the postmortem" in text
    assert "… and " in text and "more symptoms in the postmortem" in text
    assert "FORGED LINE" not in text and "hunter2" not in text  # never shown as evidence
    assert "⚠️ 1 citation could not be verified (not shown)." in text
    assert len(message.text) <= 300


def test_only_verified_citations_are_shown(document: DiagnosisDocument) -> None:
    root = document.root_cause
    forged = [c.model_copy(update={"verified": False, "status": "text_mismatch"}) for c in root.citations]
    doc = document.model_copy(update={"root_cause": root.model_copy(update={"citations": forged})})
    text = all_text(diagnosis_message(doc).blocks)
    assert "✅ verified" not in text and "kern.log:26" not in text
    assert "No citation of the root cause could be verified." in text
    assert f"{len(forged)} citations could not be verified" in text


def test_unverified_citations_are_counted_once_and_model_use_is_shown(document: DiagnosisDocument) -> None:
    root = document.root_cause
    bad = root.citations[0].model_copy(update={"verified": False, "status": "text_mismatch"})
    llm = document.stats.llm.model_copy(update={"status": "ok", "calls": 3, "prompt_tokens": 9000, "cost_usd": 0.0021})
    doc = document.model_copy(
        update={
            "root_cause": root.model_copy(update={"citations": [bad, *root.citations[1:]]}),
            "stats": document.stats.model_copy(update={"citations_dropped": 1, "llm": llm}),
        }
    )
    text = all_text(diagnosis_message(doc).blocks)
    assert "1 citation could not be verified" in text  # in the document and in the stats: one citation
    assert "models: 3 call(s), 9,000 tokens, $0.0021" in text


def test_log_text_is_redacted_and_escaped(document: DiagnosisDocument) -> None:
    root = document.root_cause
    secret = root.citations[0].model_copy(
        update={"text": "export SLACK_BOT_TOKEN=xoxb-1234-5678-abcdefghijkl <!channel> `x`"}
    )
    doc = document.model_copy(update={"root_cause": root.model_copy(update={"citations": [secret]})})
    text = all_text(diagnosis_message(doc).blocks)
    assert "xoxb-1234-5678-abcdefghijkl" not in text
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert "xoxb-9999-abcdefghijkl" not in escape("token xoxb-9999-abcdefghijkl")


def test_symptom_counts_and_first_citations(document: DiagnosisDocument) -> None:
    text = all_text(diagnosis_message(document).blocks)
    for s in document.symptoms[:3]:
        assert f"*{s.count}×* {load_catalogue().class_title(s.class_)}" in text
    assert isinstance(document.symptoms[0], DocSymptom)


def test_cut_list_and_fit() -> None:
    assert cut_list(["a", "b", "c"], max_items=2, max_chars=100, more="things") == ["a", "b", "… and 1 more things"]
    assert cut_list(["a" * 50, "b"], max_items=9, max_chars=10, more="x") == ["… and 2 more x"]
    blocks = [section("t" * 2900) for _ in range(80)]
    fitted = fit(blocks)
    check_limits(fitted)
    assert fitted[-1]["type"] == "context" and "more sections" in fitted[-1]["elements"][0]["text"]


def test_every_public_error_has_a_message() -> None:
    for name in crashcart.__all__:
        cls = getattr(crashcart, name)
        if isinstance(cls, type) and issubclass(cls, CrashCartError):
            assert cls in ERROR_MESSAGES, name
    reason = error_reason(crashcart.CorruptBundle("gzip: unexpected end of stream\n  in member x"))
    assert reason == "the archive is truncated or malformed: gzip: unexpected end of stream in member x"


async def test_approvers(slack: FakeSlack) -> None:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    slack.usergroups["S0ONCALL"] = ["UGROUP"]
    now = [0.0]
    approvers = Approvers(("USTATIC",), "S0ONCALL", client, ttl_s=60, clock=lambda: now[0])
    assert await approvers.check("USTATIC") == "allowed"
    assert await approvers.check("UGROUP") == "allowed"
    assert await approvers.check("UOTHER") == "denied"
    assert len(slack.calls_to("usergroups.users.list")) == 1  # cached
    now[0] = 61
    slack.fail_next("usergroups.users.list", error="missing_scope")
    assert await approvers.check("UGROUP") == "unknown"  # Slack could not answer: callers deny
    assert await approvers.check("UGROUP") == "allowed"  # failures are not cached
    assert len(slack.calls_to("usergroups.users.list")) == 3
    assert await Approvers((), None, client).check("UGROUP") == "unconfigured"
    assert await Approvers(("UA",), None, client).check("UGROUP") == "denied"


def test_no_module_is_too_long() -> None:
    for path in (Path(__file__).resolve().parent.parent / "bot").glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


@pytest.mark.parametrize(("seconds", "shown"), [(0.5, "0.5"), (0.25, "0.25"), (3.0, "3"), (9.999, "10"), (600, "600")])
def test_timeouts_are_shown_sensibly(seconds: float, shown: str) -> None:
    assert human_seconds(seconds) == shown


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("<!channel> & <@U1>", "&lt;!channel&gt; &amp; &lt;@U1&gt;"),
        ("*bold* _it_ ~s~ `c`", "∗bold∗ ＿it＿ ∼s∼ ʹcʹ"),
        ("rank_27.out nccl_watchdog_timeout", "rank_27.out nccl_watchdog_timeout"),  # inside words: as typed
        ("token xoxb-1234-5678-abcdefghijkl", "token «redacted:slack_token:"),
    ],
    ids=["tokens", "markers", "underscores-in-words", "secrets"],
)
def test_escape(raw: str, shown: str) -> None:
    assert escape(raw).startswith(shown)


def test_code_keeps_commands_copyable() -> None:
    from bot.mrkdwn import code

    assert code("ls *_x_* > out && echo `id`") == "`ls *_x_* &gt; out &amp;&amp; echo ʹidʹ`"


def test_no_message_holds_link_syntax() -> None:
    """Slack reads <...> as a link or a mention: the bot's own sentences write placeholders as ‹job-id›."""
    import re

    import bot.messages as messages

    texts = {k: v for k, v in vars(messages).items() if k.isupper() and isinstance(v, str)}
    assert len(texts) > 40
    for name, text in texts.items():
        assert not re.search(r"<(?![@!#])", text), name
        assert "CRASHCART_" not in text, name  # operators' variable names are logged, not shown


def test_only_real_factors_are_listed_as_contributing(document: DiagnosisDocument) -> None:
    from crashcart.models import DocContributing

    factor = DocContributing(class_="host_oom_kill", summary="a real factor", citations=[], kind="contributing")
    noise = [
        DocContributing(class_="unknown", summary="NCCL net plugin not found", citations=[], kind="benign"),
        DocContributing(class_="unknown", summary="watchdog terminate", citations=[], kind="teardown"),
    ]
    blocks = diagnosis_message(document.model_copy(update={"contributing": [factor, *noise]})).blocks
    contributing = [b for b in blocks if b.get("block_id") == "contributing"]
    assert len(contributing) == 1 and "a real factor" in all_text(contributing)
    assert "plugin" not in all_text(contributing) and "terminate" not in all_text(contributing)
    none = diagnosis_message(document.model_copy(update={"contributing": noise})).blocks
    assert not [b for b in none if b.get("block_id") == "contributing"]
