"""What you see is what you approve, on a real Synapse (issue 12; the rig:
tests/integration/matrix/rig.py).

The long request (a 40 KB diff among 30 previews) cannot be one event: its copy is posted with no
approving option and no approving reaction, the whole request follows in its thread, and only
then is the copy edited to offer Approve. A crafted approving reaction or reply on a copy whose
thread is not known to be complete is refused with the reason, in the thread. A post cut off
between the thread and the edit is retried without posting anything twice. The deploy request
fits one message: it shows the SQL, the diff and the command, offers Approve, and a reaction on
it answers.
"""

from __future__ import annotations

import asyncio
import html
from typing import Any

from adapters.matrix import MatrixChat
from adapters.matrix.markup.thread import PART_MARKER
from adapters.matrix.render import IN_THREAD, MARKER
from bot.domain.errors import TransientDeliveryError
from bot.domain.model import RefusalCode, Status
from bot.domain.refs import MatrixRef
from tests.integration.matrix.rig import ONE, TWO, Rig, flag, name_of, refusal_of, until
from tests.showcase import (
    DEPLOY_DECISIVE,
    deploy_elicitation,
    long_diff,
    long_elicitation,
    long_question,
)

NOT_SHOWN_REFUSAL = (
    "You cannot choose “Approve” here: this message does not show everything you would approve."
)


class GatedChat(MatrixChat):
    """MatrixChat that waits before the first part of a thread until ``gate`` is set: the
    moment between posting a long copy and its thread being complete."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    async def send(
        self, room_id: str, event_type: str, content: dict[str, Any], txn: str, what: str
    ) -> str:
        if what == "thread part" and not self.gate.is_set():
            self.reached.set()
            await self.gate.wait()
        return await super().send(room_id, event_type, content, txn, what)


class CutOffChat(MatrixChat):
    """MatrixChat whose connection drops on its first edit (after a long copy's thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped = False
        self.sends: list[str] = []

    async def send(
        self, room_id: str, event_type: str, content: dict[str, Any], txn: str, what: str
    ) -> str:
        self.sends.append(what)
        if what == "edit" and not self.dropped:
            self.dropped = True
            raise TransientDeliveryError("matrix edit: connection reset")
        return await super().send(room_id, event_type, content, txn, what)


def is_part(event: dict[str, Any], root: str) -> bool:
    content = event["content"]
    return PART_MARKER in content and content["m.relates_to"]["event_id"] == root


async def refusals(rig: Rig, root: str, n: int) -> list[dict[str, Any]]:
    """The bot's notices in ``root``'s thread that are not parts of the request."""
    await rig.bot.listener.drain()

    async def check() -> list[dict[str, Any]] | None:
        found = [e for e in await rig.notices(root) if PART_MARKER not in e["content"]]
        return found if len(found) >= n else None

    found: list[dict[str, Any]] = await until(check, f"{n} refusals under {root}")
    return found


async def test_a_long_copy_offers_approve_only_once_its_thread_holds_everything(
    rig: Rig,
) -> None:
    await rig.bot.close()
    rig.bots.pop()
    chat = GatedChat(rig.bot_client())
    bot = await rig.start_bot(chat=chat)
    e = long_elicitation()
    key = await rig.intake_elicitation(e)

    posting = asyncio.create_task(bot.dispatcher.run_once())
    await until(flag(chat.reached.is_set), "the copy posted, its thread not yet")
    [prompt] = await rig.prompts(key)
    root = prompt["event_id"]
    assert "1️⃣ Approve (not offered here)\n2️⃣ Deny" in prompt["content"]["body"]
    assert "the whole request goes into this message's thread" in prompt["content"]["body"]
    assert await rig.seeded(root) == [], "nothing seeded, least of all Approve"

    # Crafted approvals on the copy before its thread holds everything.
    await rig.hs.react(rig.cast.alice, rig.room, root, ONE)
    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, root, "approve")
    told = await refusals(rig, root, 2)
    by = {n["content"]["m.mentions"]["user_ids"][0]: n for n in told}
    for user in (rig.cast.alice, rig.cast.bob):
        assert refusal_of(by[user.user_id], user).startswith(NOT_SHOWN_REFUSAL)
    assert await rig.status(key) is Status.PENDING
    codes = [a.code for a in await rig.store.audit(key)]
    assert codes.count(RefusalCode.NOT_SHOWN) == 2, codes

    chat.gate.set()
    assert await posting == 1
    [delivery] = await rig.store.deliveries(key)
    assert delivery.ref == MatrixRef(rig.room, root, full_in_thread=True)
    assert await bot.dispatcher.run_once() == 1  # its seed: the reactions come after the post

    timeline = await rig.timeline()
    ids = [event["event_id"] for event in timeline]
    parts = [event for event in timeline if is_part(event, root)]
    [edit] = await rig.edits(root)
    seeds = [
        event["event_id"]
        for event in timeline
        if event["type"] == "m.reaction" and event["sender"] == rig.cast.bot.user_id
    ]
    numbers = [p["content"][PART_MARKER]["part"] for p in parts]
    assert numbers == list(range(1, len(parts) + 1)), "every part once, in order"
    assert ids.index(root) < ids.index(parts[-1]["event_id"]) < ids.index(edit["event_id"])
    assert all(ids.index(edit["event_id"]) < ids.index(s) for s in seeds), "approve offered last"
    bodies = "\n".join(p["content"]["body"] for p in parts)
    assert all(line in bodies for line in long_diff().splitlines()), "the whole diff"
    new = edit["content"]["m.new_content"]
    assert f"🧵 {IN_THREAD}" in new["body"]
    assert "1️⃣ Approve\n2️⃣ Deny" in new["body"]
    assert sorted(await rig.seeded(root)) == sorted([ONE, TWO])

    # Now the copy shows everything (through its thread): a reaction answers.
    await rig.hs.react(rig.cast.bob, rig.room, root, ONE)
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("approve",), rig.cast.bob.key)
    assert answer.display_name == name_of(rig.cast.bob)


async def test_a_post_cut_off_after_its_thread_repeats_nothing_and_the_deploy_answers(
    rig: Rig,
) -> None:
    await rig.bot.close()
    rig.bots.pop()
    chat = CutOffChat(rig.bot_client())
    bot = await rig.start_bot(chat=chat)
    key = await rig.intake_elicitation(long_elicitation())

    assert await bot.dispatcher.run_once() == 1  # the edit fails: retried later
    [delivery] = await rig.store.deliveries(key)
    assert delivery.ref is None
    [prompt] = await rig.prompts(key)
    root = prompt["event_id"]
    posted = [event for event in await rig.timeline() if is_part(event, root)]
    assert posted, "the thread holds everything"
    assert await rig.edits(root) == []
    assert await rig.seeded(root) == []
    # Its thread is complete, but nothing says so: a crafted approval is still refused.
    await rig.hs.react(rig.cast.alice, rig.room, root, ONE)
    [told] = await refusals(rig, root, 1)
    assert refusal_of(told, rig.cast.alice).startswith(NOT_SHOWN_REFUSAL)

    rig.clock.advance(10)  # past the retry's backoff
    assert await bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(key)
    assert delivery.ref == MatrixRef(rig.room, root, full_in_thread=True)
    assert len(await rig.prompts(key)) == 1
    again = [event for event in await rig.timeline() if is_part(event, root)]
    assert [p["event_id"] for p in again] == [p["event_id"] for p in posted], "no part twice"
    assert len(await rig.edits(root)) == 1
    assert chat.sends.count("thread part") == 2 * len(posted), "resent, deduped by txn id"

    # The deploy request fits one message: everything in it, Approve offered, a tap answers.
    deploy = await rig.intake_elicitation(deploy_elicitation())
    assert await bot.dispatcher.run_once() == 1
    [copy] = await rig.prompts(deploy)
    content = copy["content"]
    shown_text = html.unescape(content["formatted_body"])
    for decisive in DEPLOY_DECISIVE:
        assert decisive in content["body"]
        assert decisive in shown_text
    assert content[MARKER] == {"key": deploy, "version": 1}
    assert not [e for e in await rig.timeline() if is_part(e, copy["event_id"])], "no thread"
    [delivery] = await rig.store.deliveries(deploy)
    assert delivery.ref == MatrixRef(rig.room, copy["event_id"])
    assert delivery.ref.to_json() == {
        "room_id": rig.room,
        "event_id": copy["event_id"],
        "key": copy["event_id"],
    }, "an ordinary ref is stored as before"
    assert await bot.dispatcher.run_once() == 2, "both prompts' reactions, once no post is left"
    assert sorted(await rig.seeded(copy["event_id"])) == sorted([ONE, TWO])
    await rig.hs.react(rig.cast.alice, rig.room, copy["event_id"], ONE)
    answer = await rig.answered(deploy)
    assert (answer.option_ids, answer.display_name) == (("approve",), name_of(rig.cast.alice))


async def test_a_100kb_question_goes_whole_into_the_copys_thread(rig: Rig) -> None:
    """No spec bounds a question: the copy cuts it, and its thread holds every line of it."""
    question = long_question(100_000)
    key = await rig.intake("options", question=question)
    assert await rig.bot.dispatcher.run_once() == 1
    [prompt] = await rig.prompts(key)
    root = prompt["event_id"]
    assert "the whole request goes into this message's thread" in prompt["content"]["body"]
    parts = [event for event in await rig.timeline() if is_part(event, root)]
    assert len(parts) > 1
    print(parts[0]["content"]["formatted_body"][:2000])
    bodies = "\n".join(p["content"]["body"] for p in parts)
    missing = [line for line in question.splitlines() if line not in bodies]
    assert missing == [], f"{len(missing)} lines of the question are not in the thread"
    [delivery] = await rig.store.deliveries(key)
    assert delivery.ref == MatrixRef(rig.room, root, full_in_thread=True)
