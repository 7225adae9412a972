"""handup Requests (spec 004): the shipped schema, checking, mapping, the decision, the sink."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.sources.handup import validation
from adapters.sources.handup.document import request_document
from adapters.sources.handup.elicitation import to_elicitation
from adapters.sources.handup.sink import HandupSink
from bot.domain.errors import PayloadRejected, PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Answer, AnswerMode, Elicitation, Kind, Meaning, Status
from bot.domain.ports import PromptView

SCHEMA = Path(__file__).resolve().parents[2] / "fixtures" / "sources" / "handup-request.schema.json"
"""The Request schema the handup spec publishes, copied from it word for word."""
FIXTURES = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "sources" / "handup.json").read_text(
        encoding="utf-8"
    )
)
VALID: dict[str, Any] = FIXTURES["valid"]
REFUSED: dict[str, Any] = FIXTURES["refused"]
ALLOW = ["https://handup.example.org/hooks"]
NOW = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
NOW_MS = 1_794_303_000_000


def request(case: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(VALID[case])
    data.update(changes)
    return data


def elicitation(case: str, request_id: str = "req_x", **changes: Any) -> Elicitation:
    checked = validation.check(request(case, **changes), ALLOW)
    return to_elicitation(checked, request_id=checked.id or request_id, now=NOW)


def view(e: Elicitation, status: Status, answer: Answer | None = None) -> PromptView:
    return PromptView(e, status, answer, 2, "http://x/#k", NOW)


def person(*options: str, text: str | None = None, **more: Any) -> Answer:
    return Answer(
        option_ids=options,
        text=text,
        respondent="slack:U0ALICE",
        principal="usr_alice",
        via="slack:C1",
        at=NOW + timedelta(minutes=5),
        **more,
    )


# --- the schema --------------------------------------------------------------------------------


def test_the_shipped_schema_is_the_specs_request_schema() -> None:
    published = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert validation.schema() == published
    assert validation.schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("case", sorted(VALID))
def test_every_valid_fixture_passes(case: str) -> None:
    checked = validation.check(request(case), ALLOW)
    assert checked.document["title"] == VALID[case]["title"]


@pytest.mark.parametrize("reason", sorted(REFUSED))
def test_every_refused_fixture_is_refused_naming_its_field(reason: str) -> None:
    case = REFUSED[reason]
    with pytest.raises(PayloadRejected) as exc:
        validation.check(case["request"], ALLOW)
    assert case["field"] in [p.loc for p in exc.value.problems], exc.value.problems


def test_every_problem_is_named_at_once() -> None:
    bad = {"kind": "nope", "risk": "extreme", "options": [{"id": 1}], "extra": True}
    with pytest.raises(PayloadRejected) as exc:
        validation.check(bad, ALLOW)
    locs = {p.loc for p in exc.value.problems}
    assert {
        "title",
        "kind",
        "risk",
        "options[0].id",
        "options[0].label",
        "options[0].outcome",
        "extra",
    } <= locs


@pytest.mark.parametrize(
    ("data", "loc", "message"),
    [
        ({"title": 3}, "title", "must be a string"),
        ({"title": "x", "summary": 5}, "summary", "must be a string or null"),
        ({"title": "x", "decision": 5}, "decision", "must be an object or null"),
        ({"title": "x", "decision": {"option": "a"}}, "decision.content_hash", "is required"),
        (
            {"title": "x", "previews": [{"type": "email", "email": {"to": "x"}}]},
            "previews[0].email.to",
            "must be an array",
        ),
        ([], "(body)", "must be an object"),
    ],
)
def test_schema_problems_say_what_is_wrong(data: Any, loc: str, message: str) -> None:
    problems = validation.schema_problems(data)
    assert (loc, message) in [(p.loc, p.message) for p in problems], problems


# --- the allowlist -----------------------------------------------------------------------------


# The timeout grammar (humantime) is tested in test_handup_duration.py.


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://handup.example.org/hooks", True),
        ("https://handup.example.org/hooks/decided?x=1", True),
        ("https://HANDUP.example.org:443/hooks/a", True),
        ("https://handup.example.org/hooksx", False),
        ("https://handup.example.org/", False),
        ("http://handup.example.org/hooks", False),
        ("https://handup.example.org:8443/hooks", False),
        ("https://handup.example.org.evil.example/hooks", False),
        ("https://handup.example.org@evil.example/hooks", False),
        ("https://user@handup.example.org/hooks", False),
        ("ftp://handup.example.org/hooks", False),
        ("not a url", False),
        ("https://[::1/hooks", False),
    ],
)
def test_callback_allowlist_matches_origin_and_whole_path_segments(url: str, allowed: bool) -> None:
    assert validation.callback_allowed(url, ALLOW) is allowed


def test_an_allowlist_entry_of_a_bare_origin_allows_every_path() -> None:
    assert validation.callback_allowed("https://h.example/a/b", ["https://h.example/"])
    assert validation.callback_allowed("https://h.example/a/b", ["https://h.example"])
    assert not validation.callback_allowed("https://h.example/a", [])


# --- mapping -----------------------------------------------------------------------------------


def test_a_minimal_request_gets_the_schema_defaults() -> None:
    e = elicitation("minimal", "hr_1")
    stored = e.extra["request"]
    assert (stored["id"], stored["status"], stored["kind"], stored["risk"]) == (
        "hr_1",
        "pending",
        "custom",
        "low",
    )
    assert stored["created_at"] == NOW_MS
    assert stored["expires_at"] is None
    assert stored["content_hash"].startswith("sha256:")
    assert [(o.id, o.meaning, o.outcome, o.style) for o in e.options] == [
        ("approve", Meaning.APPROVE, "approve", "primary"),
        ("deny", Meaning.REJECT, "deny", "danger"),
    ]
    assert (e.source, e.source_id, e.key, e.kind) == (
        "handup",
        "hr_1",
        "handup:hr_1",
        Kind.APPROVAL,
    )
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert e.asker == "handup:agent"
    assert e.deadlines.expires_at is None


def test_a_command_request_maps_kind_risk_source_summary_options_and_timeout() -> None:
    e = elicitation("command")
    assert e.source_id == "req_cmd_0001"
    assert e.title == "Run the database migration"
    assert e.question == "Applies **0042_add_index** to the production database."
    assert e.asker == "agt_9e8d7c6b5a493827"
    assert e.context.conversation_id == "ses_42"
    assert e.deadlines.expires_at == NOW + timedelta(minutes=15)
    assert e.deadlines.on_timeout == "deny"
    run, skip = e.options
    assert (run.meaning, run.style, run.requires_text) == (Meaning.APPROVE, "primary", False)
    assert (skip.meaning, skip.style, skip.requires_text) == (Meaning.REJECT, "danger", True)
    assert e.subject is not None
    assert (e.subject.id, e.subject.revision, e.subject.preview_complete) == (
        "req_cmd_0001",
        0,
        True,
    )
    assert e.subject.digest == e.extra["request"]["content_hash"]
    fields = {i.label: i.value for i in e.subject.preview if i.type == "field"}
    assert fields == {
        "Risk": "high",
        "Tool": "Bash",
        "Agent": "agt_9e8d7c6b5a493827",
        "Session": "Index rollout",
        "Host": "build-7",
        "Repository": "acme/app",
        "Branch": "main",
        "Working directory": "/srv/app",
        "Runs in": "/srv/app",
        "Environment": "DATABASE_URL",
    }
    [command] = [i for i in e.subject.preview if i.type == "command"]
    assert (command.label, command.text) == ("Migration", "alembic upgrade head")
    [code] = [i for i in e.subject.preview if i.type == "code"]
    assert code.language == "python"
    stored = e.extra["request"]
    assert stored["expires_at"] == NOW_MS + 15 * 60_000
    assert stored["source"]["integration"] is None, "a caller cannot claim an integration"


def test_without_timeout_the_given_expires_at_is_kept_and_none_disables() -> None:
    given = NOW_MS + 3_600_000
    e = elicitation("minimal", expires_at=given)
    assert e.deadlines.expires_at == NOW + timedelta(hours=1)
    assert e.extra["request"]["expires_at"] == given
    e = elicitation("minimal", expires_at=given, timeout=None)
    assert e.deadlines.expires_at is None
    e = elicitation("minimal", expires_at=given, timeout="none")
    assert e.deadlines.expires_at is None


def test_an_absent_timeout_uses_the_configured_default() -> None:
    checked = validation.check(request("minimal"), ALLOW)
    e = to_elicitation(checked, request_id="r", now=NOW, default_timeout=timedelta(hours=2))
    assert e.deadlines.expires_at == NOW + timedelta(hours=2)
    assert e.extra["request"]["expires_at"] == NOW_MS + 7_200_000
    assert to_elicitation(checked, request_id="r", now=NOW).deadlines.expires_at is None
    disabled = validation.check(request("minimal", timeout="none"), ALLOW)
    e = to_elicitation(disabled, request_id="r", now=NOW, default_timeout=timedelta(hours=2))
    assert e.deadlines.expires_at is None


def test_on_timeout_is_kept_with_the_deadline() -> None:
    e = elicitation("minimal", timeout="90s", on_timeout="approve")
    assert e.deadlines.expires_at == NOW + timedelta(seconds=90)
    assert e.deadlines.on_timeout == "approve"


def test_the_content_hash_follows_the_content_not_the_bookkeeping() -> None:
    first = elicitation("command").extra["request"]["content_hash"]
    assert (
        elicitation("command", id="req_other", timeout="2h").extra["request"]["content_hash"]
        == first
    )
    assert (
        elicitation("command", title="Run another migration").extra["request"]["content_hash"]
        != first
    )
    assert (
        elicitation("command", content_hash="sha256:forged").extra["request"]["content_hash"]
        == first
    )


def test_every_preview_type_maps_to_something_every_surface_shows() -> None:
    e = elicitation("email_review")
    assert e.subject is not None
    items = {(i.label or i.type): i for i in e.subject.preview}
    email = items["Renewal"]
    assert email.type == "email"
    assert email.text is not None
    for part in (
        "From: agent@example.org",
        "To: buyer@acme.example",
        "Cc: sales@example.org",
        "Subject: Your renewal",
        "your plan renews on the 1st.",
        "Attachments: quote.pdf (application/pdf, 12,345 bytes)",
        "In reply to (buyer@acme.example, Mon, 9 Nov 2026):",
        "> When does it renew?",
    ):
        assert part in email.text
    assert "<p>" not in email.text, "body_html is never shown"
    html = items["Rendered"]
    assert (html.type, html.text) == ("text", "<b>Hello</b><script>alert(1)</script>")
    assert (items["Quote"].type, items["Quote"].url) == (
        "link",
        "https://files.example.org/quote.pdf",
    )
    assert items["Voicemail"].url == "https://files.example.org/vm.ogg"
    assert items["Demo"].type == "link"
    assert items["Demo"].url is None, "only http(s) becomes a link"
    image = items["chart.png"]
    assert (image.type, image.url) == ("link", None)
    assert image.text == "image, chart.png, image/png, 2,048 bytes, blob b3f1c2"
    assert items["report.csv"].text == "file, report.csv, text/csv, 99 bytes, blob a1b2c3"
    files = items["Files"]
    assert (
        files.text
        == "src/app.py (text/x-python, 2,100 bytes)\nREADME.md (text/markdown, 300 bytes)"
    )
    assert (items["Payload"].type, items["Payload"].language) == ("json", "json")
    assert items["Notes"].type == "markdown"
    assert items["Plain"].text == "just text"
    assert items["Risk"].value == "medium"
    assert e.deadlines.expires_at is None


def test_a_diff_of_blobs_names_them() -> None:
    e = elicitation("minimal", previews=[{"type": "diff", "before_blob": "aa", "after_blob": "bb"}])
    assert e.subject is not None
    assert e.subject.preview[0].text == "(diff of blob aa → blob bb)"


def test_one_question_becomes_options_with_descriptions_and_the_recommended_one() -> None:
    e = elicitation("question")
    assert e.kind is Kind.QUESTION
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert [(o.id, o.label, o.description, o.recommended) for o in e.options] == [
        ("PostgreSQL", "PostgreSQL", "Several replicas share it", True),
        ("SQLite", "SQLite", "One file, one process", False),
    ]
    assert (
        e.question
        == "The service needs a store.\n\n**Database** — Which database should the service use?"
    )
    assert e.extra["form"][0]["options"][1]["preview"].startswith("```toml")


@pytest.mark.parametrize(
    ("changes", "mode"),
    [
        ({"multi": True}, AnswerMode.MULTI_CHOICE),
        ({"allow_free_text": True}, AnswerMode.CHOICE_OR_TEXT),
        ({"options": [], "recommended": None}, AnswerMode.FREE_TEXT),
    ],
)
def test_one_questions_answer_mode(changes: dict[str, Any], mode: AnswerMode) -> None:
    data = request("question")
    data["input"]["questions"][0].update(changes)
    e = to_elicitation(validation.check(data, ALLOW), request_id="r", now=NOW)
    assert e.answer_mode is mode


def test_several_questions_become_a_form_shown_in_the_text() -> None:
    e = elicitation("form", "hr_form")
    assert e.answer_mode is AnswerMode.FREE_TEXT
    assert e.options == ()
    assert [q["id"] for q in e.extra["form"]] == ["channel", "targets", "notes"]
    assert e.extra["form"][1]["multi"] is True
    assert e.question == (
        "1. **Channel** — Which channel?\n   - stable\n   - beta (recommended)\n\n"
        "2. Which targets?\n   - linux\n   - macos\n   - windows\n   (choose one or more)\n\n"
        "3. Release notes?\n   (a written answer works)"
    )
    assert e.deadlines.on_timeout == "expire"


def test_questions_on_other_kinds_pass_through_unused() -> None:
    data = request(
        "minimal", input={"questions": [{"id": "q", "question": "?"}], "tool_args": {"a": 1}}
    )
    e = to_elicitation(validation.check(data, ALLOW), request_id="r", now=NOW)
    assert "form" not in e.extra
    assert e.extra["request"]["input"]["tool_args"] == {"a": 1}


# --- the decision ------------------------------------------------------------------------------


def test_pending_has_no_decision() -> None:
    document = request_document(view(elicitation("command"), Status.PENDING))
    assert (document["status"], document["decision"]) == ("pending", None)
    assert validation.schema_problems(document) == []


def test_an_approval_decision_carries_option_outcome_hash_who_and_when() -> None:
    e = elicitation("command")
    answer = person("run", subject_digest=e.subject.digest if e.subject else None)
    document = request_document(view(e, Status.ANSWERED, answer))
    assert document["status"] == "approved"
    assert document["decision"] == {
        "content_hash": e.extra["request"]["content_hash"],
        "decided_at": NOW_MS + 300_000,
        "decided_by": "usr_alice",
        "feedback": None,
        "fields": None,
        "option": "run",
        "outcome": "approve",
        "rule_id": None,
        "scope": None,
    }
    assert document["id"] == "req_cmd_0001"
    assert validation.schema_problems(document) == []


def test_a_deny_carries_the_feedback_and_the_identity_when_no_principal() -> None:
    e = elicitation("command")
    answer = Answer(
        option_ids=("skip",),
        text="Not during business hours",
        respondent="matrix:@bob:x",
        via="matrix:!r",
        at=NOW,
    )
    document = request_document(view(e, Status.ANSWERED, answer))
    assert document["status"] == "denied"
    assert document["decision"]["feedback"] == "Not during business hours"
    assert document["decision"]["decided_by"] == "matrix:@bob:x"
    assert document["decision"]["outcome"] == "deny"


def test_one_question_answer_is_in_fields_answers_by_question_id() -> None:
    e = elicitation("question")
    document = request_document(view(e, Status.ANSWERED, person("SQLite", text="small")))
    assert document["status"] == "answered"
    decision = document["decision"]
    assert decision["fields"] == {"answers": {"db": {"selected": ["SQLite"], "text": None}}}
    assert decision["feedback"] == "small", "no free text on this question: the text is feedback"
    assert (decision["option"], decision["outcome"]) == ("approve", "approve")
    assert validation.schema_problems(document) == []


def test_a_free_text_question_answer_is_its_text() -> None:
    data = request("question")
    data["input"]["questions"][0]["allow_free_text"] = True
    e = to_elicitation(validation.check(data, ALLOW), request_id="r", now=NOW)
    document = request_document(view(e, Status.ANSWERED, person(text="MariaDB")))
    assert document["decision"]["fields"] == {
        "answers": {"db": {"selected": [], "text": "MariaDB"}}
    }
    assert document["decision"]["feedback"] is None


def test_a_forms_own_answers_are_passed_on() -> None:
    e = elicitation("form", "hr_form")
    answers = {
        "channel": {"selected": ["beta"]},
        "targets": {"selected": ["linux", "macos"]},
        "notes": {"selected": [], "text": "First beta."},
    }
    answer = person(fields={"answers": answers})
    document = request_document(view(e, Status.ANSWERED, answer))
    assert document["decision"]["fields"] == {"answers": answers}
    assert validation.schema_problems(document) == []
    written = request_document(view(e, Status.ANSWERED, person(text="beta, all")))
    assert written["decision"]["fields"] == {"answers": {}}
    assert written["decision"]["feedback"] == "beta, all"


@pytest.mark.parametrize(
    ("on_timeout", "status", "option"),
    [("deny", "denied", "deny"), ("approve", "approved", "approve"), ("expire", "expired", None)],
)
def test_expiry_decides_by_on_timeout(on_timeout: str, status: str, option: str | None) -> None:
    e = elicitation("minimal", timeout="15m", on_timeout=on_timeout)
    document = request_document(view(e, Status.EXPIRED))
    assert document["status"] == status
    if option is None:
        assert document["decision"] is None
    else:
        assert document["decision"]["option"] == option
        assert document["decision"]["decided_by"] == "timeout"
        assert document["decision"]["decided_at"] == NOW_MS + 15 * 60_000
        assert document["decision"]["content_hash"] == document["content_hash"]
    assert validation.schema_problems(document) == []


def test_a_system_decision_recorded_at_expiry_names_its_option() -> None:
    e = elicitation("command")
    system = Answer(option_ids=("skip",), respondent="system", via="system", at=NOW)
    document = request_document(view(e, Status.EXPIRED, system))
    assert (document["status"], document["decision"]["option"]) == ("denied", "skip")
    assert document["decision"]["decided_by"] == "timeout"


def test_cancelled_has_no_decision() -> None:
    document = request_document(view(elicitation("command"), Status.CANCELLED))
    assert (document["status"], document["decision"]) == ("cancelled", None)


# --- the sink ----------------------------------------------------------------------------------


class Receiver:
    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        return httpx.Response(status, json={"ok": status < 300}, headers={"Retry-After": "7"})


async def deliver(receiver: Receiver, v: PromptView, allow: list[str] = ALLOW) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(receiver)) as client:
        await HandupSink(client, allow).deliver(v, idempotency_key="elicitbot:handup:x:closed")


async def test_the_sink_posts_the_terminal_request_to_the_callback() -> None:
    receiver = Receiver(200)
    e = elicitation("command")
    await deliver(receiver, view(e, Status.ANSWERED, person("run")))
    [sent] = receiver.requests
    assert (sent.method, str(sent.url)) == ("POST", "https://handup.example.org/hooks/decided")
    assert sent.headers["Idempotency-Key"] == "elicitbot:handup:x:closed"
    assert sent.headers["Content-Type"] == "application/json"
    body = json.loads(sent.content)
    assert (body["id"], body["status"], body["decision"]["option"]) == (
        "req_cmd_0001",
        "approved",
        "run",
    )


@pytest.mark.parametrize("status", [409, 200, 201, 204])
async def test_2xx_and_409_are_done(status: int) -> None:
    receiver = Receiver(status)
    await deliver(receiver, view(elicitation("command"), Status.ANSWERED, person("run")))
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_5xx_and_429_are_transient(status: int) -> None:
    with pytest.raises(TransientDeliveryError) as exc:
        await deliver(
            Receiver(status), view(elicitation("command"), Status.ANSWERED, person("run"))
        )
    assert exc.value.retry_after == 7.0


async def test_a_connection_error_is_transient() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(TransientDeliveryError, match="unreachable"):
            await HandupSink(client, ALLOW).deliver(
                view(elicitation("command"), Status.ANSWERED, person("run")), idempotency_key="k"
            )


async def test_another_4xx_fails_for_good() -> None:
    with pytest.raises(PermanentDeliveryError, match="HTTP 400"):
        await deliver(Receiver(400), view(elicitation("command"), Status.ANSWERED, person("run")))


async def test_a_callback_taken_off_the_allowlist_is_not_called() -> None:
    receiver = Receiver()
    with pytest.raises(PermanentDeliveryError, match="allowlist"):
        await deliver(receiver, view(elicitation("command"), Status.CANCELLED), allow=[])
    assert receiver.requests == []


async def test_no_callback_url_or_still_pending_sends_nothing() -> None:
    receiver = Receiver()
    await deliver(receiver, view(elicitation("minimal"), Status.ANSWERED, person("approve")))
    await deliver(receiver, view(elicitation("command"), Status.PENDING))
    assert receiver.requests == []
