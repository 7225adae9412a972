"""Re-record the Matrix fixtures in ``tests/responses/matrix/`` from a real Synapse.

``python -m tests.responses.record_matrix`` starts the same homeserver the Matrix tests run
(:mod:`tests.synapse`), has people post a question, react to it, reply in its thread and send an
end-to-end encrypted message (an encrypting matrix-nio client, as elicitbot's own), then reads the
room back through ``/messages`` as the bot and writes each event's raw JSON, unchanged, to a file.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from adapters.matrix.e2ee.client import send_event, upload_keys
from tests.integration.matrix_e2ee.clients import e2ee_client, sync
from tests.synapse import Homeserver, Synapse

HERE = Path(__file__).parent / "matrix"
QUESTION = "Research this: May I run the migration?\n1️⃣ Allow once\n2️⃣ Always allow\n3️⃣ Deny"


def _write(name: str, event: dict[str, Any]) -> None:
    path = HERE / name
    path.write_text(json.dumps(event, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{path}: {event['type']}")


def _find(events: list[dict[str, Any]], event_id: str) -> dict[str, Any]:
    return next(e for e in events if e.get("event_id") == event_id)


async def record(workdir: Path) -> None:
    synapse = Synapse(workdir)
    synapse.start()
    try:
        bot, alice = synapse.register("elicitbot"), synapse.register("alice")
        print(f"bot {bot.user_id}, alice {alice.user_id}")
        async with httpx.AsyncClient() as http:
            hs = Homeserver(synapse, http)
            room = await hs.make_room(bot, [alice])
            question = await hs.say(bot, room, QUESTION)
            message = await hs.say(alice, room, "!elicitbot help")
            reaction = await hs.react(alice, room, question, "1\ufe0f\u20e3")
            reply = await hs.reply_in_thread(alice, room, question, "Deny: the canary is red")
            events = await hs.messages(bot, room)
            _write("message.json", _find(events, message))
            _write("reaction.json", _find(events, reaction))
            _write("thread_reply.json", _find(events, reply))

            secret_room = await hs.make_room(bot, [alice], encrypted=True)
            client = e2ee_client(synapse, alice, workdir / "alice-store")
            try:
                await upload_keys(client)
                await sync(client)
                sent = await send_event(
                    client,
                    secret_room,
                    "m.room.message",
                    {"msgtype": "m.text", "body": "approve"},
                    "record-encrypted-1",
                )
            finally:
                await client.close()
            events = await hs.messages(bot, secret_room)
            _write("encrypted.json", _find(events, sent.event_id))
    finally:
        synapse.stop()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(record(Path(tmp)))
