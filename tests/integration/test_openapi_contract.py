"""The OpenAPI document is the contract: schemathesis generates requests from it (valid ones and
broken ones) against the whole app, as ``serve`` builds it with the intake token set, on SQLite
and PostgreSQL, and every check it has must pass: no 5xx, only documented status codes, content
types and headers, bodies that match their schemas, schema-valid requests accepted, invalid ones
refused, and the bearer token enforced where the document says so.

Bounded: a few examples per operation and a deadline per example, so the whole file stays well
under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks
from schemathesis.core.parameters import ParameterLocation
from schemathesis.python import asgi as schemathesis_asgi

from bot.app.config import AppConfig, ServerConfig, StoreConfig
from bot.app.wiring import Elicitbot

pytestmark = pytest.mark.slow  # generated requests / whole processes: the second tier

TOKEN = "contract-intake-token-5f2c"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_EXAMPLES = 6


@pytest.fixture
def api_schema(db_url: str) -> Iterator[Any]:
    config = AppConfig(
        store=StoreConfig(url=db_url),
        server=ServerConfig(intake_token_env="ELICITBOT_INTAKE_TOKEN"),
    )
    bot = Elicitbot(config, environ={"ELICITBOT_INTAKE_TOKEN": TOKEN})
    schema = schemathesis.openapi.from_asgi("/openapi.json", bot.asgi())
    try:
        yield schema
    finally:
        schemathesis_asgi.shutdown_lifespans()  # stops the bot: its outbox, its store


def in_this_deployment(case: Any) -> None:
    """What a schema cannot know, made true of a schema-valid engine ask before it is sent:

    - ``expires_at`` must lie within 90 days of now (or be the "no deadline" value), a bound
      relative to the clock, which JSON Schema cannot write: a generated date is moved into it;
    - a ``slack:`` or ``matrix:`` destination is a 422 here, where neither platform runs (the
      deployment's answer, tested in test_engine_deliveries): such a destination becomes
      ``web``.

    So that the rest of the body is what the positive check judges."""
    if not isinstance(case.body, dict):
        return
    ask = case.body.get("ask")
    if isinstance(ask, dict) and "expires_at" in ask:
        ask["expires_at"] = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    destinations = case.body.get("destinations")
    if isinstance(destinations, list) and destinations:
        case.body["destinations"] = ["web"]


def unsayable(value: Any) -> Any:
    """A generated schema-valid body without what JSON Schema cannot forbid here, so that the
    positive check judges the rest:

    - NUL in any string or key at any depth of an open object (``ask.mentions[i]``, ``action``,
      CloudEvents ``data``): the intake refuses it everywhere, and a schema could say so at
      every depth only with a recursive ``$ref``, which the inlined bodies do not carry;
    - ``1.0`` for an integer: JSON Schema counts it as one, the strict parsers do not;
    - repeated option ids: distinct *by a property* is no JSON Schema keyword (``uniqueItems``
      compares whole items)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        items = [unsayable(item) for item in value]
        ids = [item.get("id") for item in items if isinstance(item, dict)]
        if ids and len(ids) == len(items) and len(set(map(repr, ids))) < len(ids):
            for index, item in enumerate(items):
                if isinstance(item.get("id"), str):
                    item["id"] = f"{item['id']}{index}"
        return items
    if isinstance(value, dict):
        return {unsayable(k): unsayable(v) for k, v in value.items()}
    return value


def excluded_for(case: Any, mode: GenerationMode) -> list[Any]:
    """The checks left out of one case, each for a reason written here."""
    if mode is not GenerationMode.POSITIVE:
        headers = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
        if (
            headers is not None
            and headers.mode.is_negative
            and "Authorization" in (case.headers or {})
        ):
            # The test's own doing, not the service's: every request carries the real bearer
            # token (``AUTH`` replaces the generated header, or nothing would get past the 401),
            # so a case made invalid in its Authorization header is sent valid there. Which
            # cases those are depends on the generator's order (hash seeds), so they are left
            # out of this one check whatever else they mutate; every other check runs on them.
            return [checks.negative_data_rejection]
        return []
    if case.operation.path == "/v1/events" and case.media_type == "application/json":
        # The tool's limit: in binary mode the body is the event's data and the ce-* headers
        # carry the envelope. OpenAPI can require a header of an operation, not of one of its
        # media types (the structured and batch modes carry no ce-* headers), so the document
        # marks them optional, and a binary request generated without them is rightly a 400.
        return [checks.positive_data_acceptance]
    if case.operation.path in ("/v1/events", "/v1/handup/requests"):
        # Not the tool's mistake, and left open (see the issue note): these bodies have rules
        # between fields that JSON Schema cannot state and the documents leave to prose, so a
        # generated schema-valid body is often refused with a 400 naming the rule. SuperPipeline:
        # `approvalRequestId` must equal `elicitationId`, and a broker approval request leaves
        # `cardId`, `runId` and `stageKey` empty. handup: option and question ids distinct by
        # value, `recommended` indexing its question's options, the one-year `timeout` bound, the
        # kind choosing options or questions, a deployment's callback allowlist (where there is
        # none, the document takes null only). Every other check, the negative ones included,
        # runs on them.
        return [checks.positive_data_acceptance]
    return []


def check(operation: Any, mode: GenerationMode) -> None:
    """One operation in one generation mode: a Hypothesis test over its strategy, every check."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,  # each call waits for the outbox at most a few seconds
        suppress_health_check=list(HealthCheck),
        database=None,
        # The same examples on every run: a finding fails the suite reproducibly, never by the
        # luck of one run (change the code or the document and the examples change with it).
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and case.body is not None:
            case.body = unsayable(case.body)
        if case.operation.path == "/v1/deliveries" and mode is GenerationMode.POSITIVE:
            in_this_deployment(case)
        case.call_and_validate(headers=AUTH, excluded_checks=excluded_for(case, mode))

    try:
        run()
    except Unsatisfiable:
        # Nothing to break: an operation with no parameter and no body has no invalid request.
        if mode is not GenerationMode.NEGATIVE:
            raise


def no_percent_in_the_path(_: Any, path_parameters: dict[str, Any] | None) -> bool:
    """The tool's mistake, kept out: schemathesis *unquotes* a path parameter before quoting it
    (``transport/serialization.py``, "to keep quoting idempotent"), so a generated ``"%0B"``
    reaches the app as the control character U+000B, not as the three characters the schema
    allowed, and the 400 that rightly follows would read as a refused valid request."""
    return not any("%" in str(value) for value in (path_parameters or {}).values())


def test_every_operation_keeps_its_documented_contract(api_schema: Any) -> None:
    # Each operation is run by hand rather than through ``schema.parametrize()``: the lazy
    # (fixture-built) schema's pytest integration reads ``request.node._nodeid``, which pytest 9
    # no longer has. What runs per operation is the same, in both generation modes.
    api_schema.hook("filter_path_parameters")(no_percent_in_the_path)
    findings: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 10
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                check(operation, mode)
            except (Exception, BaseExceptionGroup) as exc:  # every operation's findings, together
                findings.append(f"{operation.label} ({mode.value}): {exc}")
    assert not findings, "\n\n".join(findings)
