"""The requests every surface is tested on for "what you see is what you approve" (issue 12).

``deploy_request``: the handup command request of the issue (a text preview, the data-fix SQL, a
diff, ``./deploy.sh --env prod-eu`` in ``/srv/app``, risk, tool and the source's fields), from
``tests/fixtures/sources/handup.json``. ``long_request``: the long case, a 40 KB diff among 30
previews, which no chat message can hold whole. Both go through the real handup parse.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.sources import engine, superpipeline, toolshed
from adapters.sources.handup import validation
from adapters.sources.handup.elicitation import to_elicitation
from adapters.sources.pinework import parse as pinework
from bot.domain import disclosure
from bot.domain.model import Elicitation
from tests.unit.sources import superpipeline_fixtures

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sources"
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ALLOW = ("https://handup.example.org/",)

DEPLOY_DECISIVE = (
    "./deploy.sh --env prod-eu",
    "/srv/app",
    "UPDATE orders SET status = 'refund_pending'",
    "AND charge_count > 1;",
    "+    if not order.charged:",
    "-    gateway.charge(order.total)",
)
"""Strings a person must see before approving the deploy: the command, where it runs, the SQL and
the diff's added and removed lines."""

LONG_DIFF_BYTES = 40_000
LONG_PREVIEWS = 30


def handup_case(name: str) -> dict[str, Any]:
    cases = json.loads((FIXTURES / "handup.json").read_text("utf-8"))["valid"]
    return dict(cases[name])


def deploy_request() -> dict[str, Any]:
    return handup_case("deploy_prod")


def long_diff(size: int = LONG_DIFF_BYTES) -> str:
    """A unified diff of about ``size`` bytes, each line numbered so a cut shows."""
    lines = ["--- a/catalog/prices.csv", "+++ b/catalog/prices.csv", "@@ -1,999 +1,999 @@"]
    n = 0
    while sum(len(line) + 1 for line in lines) < size:
        n += 1
        lines.append(f"-sku-{n:05d},old price {n * 3 % 997}.00,EUR")
        lines.append(f"+sku-{n:05d},new price {n * 7 % 991}.50,EUR")
    return "\n".join(lines) + "\n"


def long_question(size: int, tag: str = "q") -> str:
    """``size`` characters of question, each line numbered so a cut shows where."""
    line = f"{tag}: every character of this question must reach the person who answers it."
    lines = [f"{i:06d} {line}" for i in range(size // (len(line) + 8) + 1)]
    return "\n".join(lines)[:size]


def long_request() -> dict[str, Any]:
    """The deploy with a 40 KB diff and 30 previews in all."""
    request = deploy_request()
    request["id"] = "req_long_prices"
    request["title"] = "Reprice the catalogue"
    previews = list(request["previews"])
    previews.insert(
        2, {"type": "diff", "title": "catalog/prices.csv", "lang": "diff", "inline": long_diff()}
    )
    n = 0
    while len(previews) < LONG_PREVIEWS:
        n += 1
        previews.insert(
            -1,
            {"type": "text", "title": f"Check {n}", "inline": f"Check {n} of the rollout passed."},
        )
    request["previews"] = previews
    return request


def elicitation_of(request: dict[str, Any], *, now: datetime = NOW) -> Elicitation:
    checked = validation.check(request, ALLOW)
    return to_elicitation(checked, request_id=checked.id or "req_showcase", now=now)


def deploy_elicitation(*, now: datetime = NOW) -> Elicitation:
    return elicitation_of(deploy_request(), now=now)


def long_elicitation(*, now: datetime = NOW) -> Elicitation:
    return elicitation_of(long_request(), now=now)


_WORD = re.compile(r"[^\W_]+", re.UNICODE)
"""Letters and digits: Markdown's ``_`` and ``*`` markers are not words."""


def missing_words(shown: str, e: Elicitation) -> list[str]:
    """The words of ``e``'s decisive content (``bot.domain.disclosure.decisive``) that ``shown``
    (a surface's visible text, as a person reads it: entities already decoded) lacks, counted:
    a piece cut short, dropped or hidden leaves words out. Markup (Markdown markers, fences)
    does not count; an empty list means every word of every piece is there as often as the
    content has it."""
    have = Counter(w.casefold() for w in _WORD.findall(shown))
    need: Counter[str] = Counter()
    for piece in disclosure.decisive(e):
        for text in piece.texts:
            need.update(w.casefold() for w in _WORD.findall(text))
    return sorted((need - have).elements())


PREVIEWS: dict[str, dict[str, Any]] = {
    "text": {"type": "text", "title": "Plan", "inline": "Drain node 3, then node 4."},
    "markdown": {
        "type": "markdown",
        "title": "Notes",
        "inline": "**Careful**: this _drops_ the `orders_tmp` table.\n\n- step one\n- step two",
    },
    "code": {
        "type": "code",
        "title": "Query",
        "lang": "sql",
        "inline": "DELETE FROM sessions WHERE last_seen < now() - interval '90 days';",
    },
    "diff": {
        "type": "diff",
        "title": "config.toml",
        "inline": "--- a/config.toml\n+++ b/config.toml\n-replicas = 2\n+replicas = 5\n```\n",
    },
    "files": {
        "type": "files",
        "title": "Touched files",
        "files": [
            {"path": "src/app.py", "mime": "text/x-python", "size": 2100, "blob": "b1"},
            {
                "path": "migrations/0042_index.py",
                "mime": "text/x-python",
                "size": 640,
                "blob": "b2",
            },
        ],
    },
    "command": {
        "type": "command",
        "title": "Restart",
        "command": {
            "argv": ["systemctl", "restart", "shop-api"],
            "cwd": "/srv/shop",
            "env_keys": ["SHOP_ENV"],
            "shell": None,
        },
    },
    "json": {"type": "json", "title": "Payload", "inline": '{"refund": 1299, "currency": "EUR"}'},
    "html": {"type": "html", "title": "Banner", "inline": "<b>Sale</b> <script>x()</script>"},
    "image": {
        "type": "image",
        "name": "chart.png",
        "mime": "image/png",
        "size": 2048,
        "inline": "https://files.example.org/chart.png",
    },
    "video": {"type": "video", "name": "demo.mp4", "mime": "video/mp4", "size": 9_000_000},
    "audio": {"type": "audio", "name": "call.ogg", "mime": "audio/ogg", "size": 120_000},
    "file": {
        "type": "file",
        "name": "report.csv",
        "mime": "text/csv",
        "size": 99,
        "inline": "https://files.example.org/report.csv",
    },
    "pdf": {"type": "pdf", "name": "contract.pdf", "mime": "application/pdf", "size": 51_200},
    "email": {
        "type": "email",
        "title": "Renewal",
        "email": {
            "from": "billing@acme.example",
            "to": ["ceo@client.example"],
            "cc": ["legal@acme.example"],
            "subject": "Your renewal: new price from January",
            "body": "Dear Ms Ortiz,\n\nfrom **1 January** the price is EUR 1,400 a month.",
        },
    },
}
"""One handup Request preview of each of the fourteen types."""


def corpus(*, now: datetime = NOW) -> dict[str, Elicitation]:
    """Every valid fixture of every source, as its elicitation: the SuperPipeline
    corpus (``tests/fixtures/superpipeline``), handup, Toolshed, engine and Pinework
    (``tests/fixtures/sources``),
    named ``<source>: <case>``."""
    out: dict[str, Elicitation] = {}
    for name, data in superpipeline_fixtures.VALID.items():
        out[f"superpipeline: {name}"] = superpipeline.parse_body(
            copy.deepcopy(data), workspace="acme"
        )
    for name in json.loads((FIXTURES / "handup.json").read_text("utf-8"))["valid"]:
        out[f"handup: {name}"] = elicitation_of(handup_case(name), now=now)
    for kind, preview in PREVIEWS.items():
        request = {"id": f"req_preview_{kind}", "title": f"A {kind} preview", "previews": [preview]}
        out[f"handup preview: {kind}"] = elicitation_of(request, now=now)
    fixtures = {
        source: json.loads((FIXTURES / f"{source}.json").read_text("utf-8"))["valid"]
        for source in ("toolshed", "engine", "pinework")
    }
    for name, data in fixtures["toolshed"].items():
        parsed = toolshed.parse_request(copy.deepcopy(data))
        out[f"toolshed: {name}"] = toolshed.to_elicitation(parsed, now=now)
    for name, data in fixtures["engine"].items():
        out[f"engine: {name}"] = engine.parse_delivery(copy.deepcopy(data), now=now).elicitation
    for name, data in fixtures["pinework"].items():
        question = pinework.parse_question(copy.deepcopy(data))
        out[f"pinework: {name}"] = pinework.to_elicitation(
            question, base_url="https://pinework.example.org/", workspace="ws_main", now=now
        )
    return out
