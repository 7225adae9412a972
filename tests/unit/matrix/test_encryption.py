"""The Matrix adapter's encryption seams without a homeserver: destinations naming a person, the
send path that never falls back to plaintext in an encrypted room, the undecryptable answer
(its key asked for, retried, reported in its thread once), and what the thread hears of it.
End to end on Synapse: tests/integration/matrix_e2ee/test_adapter_e2ee.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from nio import RoomGetStateEventResponse

from adapters.matrix import lease_fence
from adapters.matrix.api.direct import is_person
from adapters.matrix.chat import MatrixChat, target_of
from adapters.matrix.e2ee.crypto import MatrixCrypto
from adapters.matrix.e2ee.undecryptable import Undecryptable, report
from adapters.matrix.intake.notices import UNREADABLE
from bot.app.config import parse_config
from bot.app.wiring import Elicitbot
from bot.domain.actions import Outcome, OutcomeKind
from bot.domain.errors import ConfigError, PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Destination, IdentityKey, Status
from bot.domain.ports import Notice
from bot.domain.records import NoticeKind
from bot.domain.refs import MatrixRef
from bot.domain.store import Store
from tests.conftest import FakeClock
from tests.unit.matrix.test_handlers import ALICE, PROMPT, ROOM, Chat, Core, fixture, rig, settled

TTL = timedelta(seconds=10)


def test_a_destination_names_a_room_or_a_person() -> None:
    assert target_of(Destination("matrix:!room:example.org")) == "!room:example.org"
    assert target_of(Destination("matrix:@alice:example.org")) == "@alice:example.org"
    assert is_person("@alice:example.org")
    assert not is_person("!room:example.org")
    for bad in ("matrix:#alias:example.org", "matrix:alice", "slack:C0", "matrix:@alice"):
        with pytest.raises(PermanentDeliveryError):
            target_of(Destination(bad))


@dataclass
class Client:
    """The nio calls the send path makes, recorded; the room's encryption state scripted."""

    encrypted: bool
    user_id: str = "@elicitbot:localhost"
    device_id: str = "ELICITBOT"
    access_token: str = "token"
    rooms: dict[str, Any] = field(default_factory=dict)
    olm: Any = None
    store: Any = None
    sent: list[str] = field(default_factory=list)

    async def room_get_state_event(self, room_id: str, event_type: str, key: str = "") -> Any:
        content = {"algorithm": "m.megolm.v1.aes-sha2"} if self.encrypted else {}
        return RoomGetStateEventResponse(content, event_type, key, room_id)

    async def _send(self, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(str(args[2]))  # the path
        raise AssertionError("nothing may be sent here")


def chat_on(client: Client, store: Store) -> MatrixChat:
    crypto = MatrixCrypto(cast(Any, client), store, pickle_key="k" * 32, clock=FakeClock())
    return MatrixChat(cast(Any, client), crypto=crypto, max_retries=0)


async def test_without_the_crypto_state_nothing_goes_to_an_encrypted_room(
    sqlite_store: Store,
) -> None:
    client = Client(encrypted=True)
    chat = chat_on(client, sqlite_store)
    with pytest.raises(TransientDeliveryError) as raised:
        await chat.send(ROOM, "m.room.message", {"body": "secret"}, "txn", "post")
    assert "does not hold the bot's crypto state" in str(raised.value)
    assert raised.value.retry_after is not None
    assert client.sent == [], "never in plaintext"
    # A plaintext room is asked each time: it may be encrypted by now.
    assert await chat.encrypted(ROOM)
    client.encrypted = False
    chat._encrypted.clear()
    assert not await chat.encrypted(ROOM)
    client.encrypted = True
    assert await chat.encrypted(ROOM), "an old 'not encrypted' is not trusted"


@dataclass
class Crypto:
    """What Undecryptable asks of MatrixCrypto: key requests recorded, decryption scripted."""

    readable: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def decrypt(self, room_id: str, event: Any) -> Any:
        if event.event_id not in self.readable:
            return None  # MatrixCrypto.decrypt: its key is missing
        return SimpleNamespace(event_id=event.event_id, decrypted=True)

    async def request_key(self, event: Any) -> None:
        self.asked.append(event.event_id)


def megolm(event_id: str, relates: dict[str, Any]) -> Any:
    return SimpleNamespace(
        event_id=event_id,
        sender=ALICE,
        device_id="ALICEPHONE",
        session_id="s1",
        source={"content": {"m.relates_to": relates}},
    )


async def test_an_undecryptable_event_is_asked_for_retried_and_reported_once() -> None:
    crypto = Crypto()
    reported: list[str] = []

    async def report(room_id: str, event: Any) -> None:
        reported.append(event.event_id)

    waits = Undecryptable(cast(MatrixCrypto, crypto), report, key_wait=0.05)
    thread = {"rel_type": "m.thread", "event_id": PROMPT}
    waits.saw(ROOM, megolm("$late", thread))
    waits.saw(ROOM, megolm("$lost", thread))
    waits.saw(ROOM, megolm("$lost", thread))  # the same event again: one wait
    await asyncio.sleep(0)
    assert sorted(crypto.asked) == ["$late", "$lost"]

    crypto.readable.add("$late")  # its key came in the last batch
    [(room_id, event)] = waits.retry()
    assert (room_id, event.event_id, event.decrypted) == (ROOM, "$late", True)
    await asyncio.sleep(0.1)
    assert reported == ["$lost"]
    assert waits.retry() == []
    assert (waits.seen, waits.recovered) == (2, 1)

    # Stopping: what still waits is reported at once (a restart resumes past it).
    waits.key_wait = 60.0
    waits.saw(ROOM, megolm("$stop", thread))
    await waits.flush()
    assert reported == ["$lost", "$stop"]
    await waits.aclose()


@pytest.mark.parametrize(
    ("relates", "reply_to"),
    [
        ({"rel_type": "m.thread", "event_id": PROMPT, "m.in_reply_to": {"event_id": PROMPT}}, "$x"),
        ({"m.in_reply_to": {"event_id": PROMPT}}, "$x"),
        ({"rel_type": "m.annotation", "event_id": PROMPT, "key": "1️⃣"}, PROMPT),
    ],
)
async def test_the_thread_hears_that_an_answer_could_not_be_read(
    relates: dict[str, Any], reply_to: str
) -> None:
    core = Core(fixture("free-text"), Outcome(OutcomeKind.IGNORED))
    events, chat = rig(core)
    await report(events, ROOM, megolm("$x", relates))
    await settled(events)
    [(destination, notice, key)] = chat.notices
    assert destination == f"matrix:{ROOM}"
    assert notice == Notice(
        user=IdentityKey(f"matrix:{ALICE}"),
        text=UNREADABLE,
        thread=MatrixRef(ROOM, PROMPT),
        kind=NoticeKind.REFUSAL,
        mention=True,
        reply_to=reply_to,
    )
    assert key.startswith("elicitbot-notice-")
    assert core.acted == [], "not an answer"
    assert core.status is Status.PENDING


async def test_an_unreadable_edit_is_reported_under_its_replys_prompt_and_others_are_not() -> None:
    reply = {
        "event_id": "$reply",
        "sender": ALICE,
        "content": {"m.relates_to": {"rel_type": "m.thread", "event_id": PROMPT}},
    }
    core = Core(fixture("free-text"), Outcome(OutcomeKind.IGNORED))
    events, chat = rig(core, Chat(events={"$reply": reply}))
    await report(events, ROOM, megolm("$edit", {"rel_type": "m.replace", "event_id": "$reply"}))
    await report(events, ROOM, megolm("$chat", {}))  # not about anything: logged only
    await report(events, ROOM, megolm("$else", {"rel_type": "m.thread", "event_id": "$other"}))
    await settled(events)
    [(_, notice, _)] = chat.notices
    assert (notice.thread, notice.reply_to) == (MatrixRef(ROOM, PROMPT), "$edit")


async def test_snapshots_are_fenced_on_the_matrix_lease(sqlite_store: Store) -> None:
    store, clock = sqlite_store, FakeClock()
    fence = lease_fence(store, "matrix:@elicitbot:localhost", "me", clock)
    assert not await fence()
    assert await store.acquire_lease("matrix:@elicitbot:localhost", "me", clock.now(), TTL)
    assert await fence()
    clock.advance(TTL.total_seconds() + 1)  # ran out: another replica may hold it now
    assert not await fence()
    assert await store.acquire_lease("matrix:@elicitbot:localhost", "other", clock.now(), TTL)
    assert not await fence()


async def test_serve_refuses_an_unusable_pickle_key_naming_it(tmp_path: Path) -> None:
    config = parse_config(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'e.db'}"},
            "matrix": {
                "homeserver": "http://127.0.0.1:9",
                "user_id": "@elicitbot:localhost",
                "device_id": "ELICITBOT",
                "pickle_key_env": "PICKLE",
            },
        }
    )
    # Unset: refused at once, with the other secrets the config names.
    with pytest.raises(ConfigError, match=r"^matrix\.pickle_key_env: .*PICKLE"):
        Elicitbot(config, environ={"MATRIX_ACCESS_TOKEN": "syt_x"})
    for environ in ({"PICKLE": "too-short"},):
        bot = Elicitbot(config, environ={"MATRIX_ACCESS_TOKEN": "syt_x", **environ})
        try:
            with pytest.raises(ConfigError, match=r"^matrix\.pickle_key_env: .*PICKLE"):
                await bot.prepare()
        finally:
            assert bot.matrix_chat is not None
            await bot.matrix_chat.client.close()
            await bot.http_client.aclose()
            await bot.store.close()
