"""Which prompt a room event is under, and what that copy shows (answer rule 2): the listener's
lookups.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from adapters.matrix.markup.html import remember
from adapters.matrix.render import MARKER, shown
from bot.domain.model import Disclosure, ElicitationKey
from bot.domain.ports import Elicitations, PromptView
from bot.domain.records import DeliveryState
from bot.domain.refs import MatrixRef

if TYPE_CHECKING:
    from adapters.matrix.chat import MatrixChat

_IN_FLIGHT = frozenset({DeliveryState.PLANNED, DeliveryState.POSTING})


class Prompts:
    """The prompt lookups of one bot account."""

    def __init__(self, chat: MatrixChat, elicitations: Elicitations) -> None:
        self.chat = chat
        self.elicitations = elicitations
        self.user_id = chat.user_id
        self._not_ours: OrderedDict[str, None] = OrderedDict()

    async def shown_on(self, view: PromptView, prompt: str) -> Disclosure:
        """What copy ``prompt`` shows of ``view`` now: the whole request in its thread only when
        its stored ref (or this process, having just posted it) says so; never from an event."""
        disclosure = shown(view)
        if disclosure.whole:
            return disclosure
        complete = self.chat.full_in_thread(prompt) or any(
            isinstance(d.ref, MatrixRef) and d.ref.event_id == prompt and d.ref.full_in_thread
            for d in await self.elicitations.deliveries(view.elicitation.key)
        )
        return shown(view, full_in_thread=True) if complete else disclosure

    async def key_for(self, room_id: str, event_id: str) -> ElicitationKey | None:
        """The elicitation a message belongs to: the store's refs, a prompt this process just
        posted, or our own prompt whose post is in flight elsewhere (by its content marker)."""
        key = self.chat.posted_key(event_id) or await self.elicitations.key_for_message(event_id)
        if key is not None or event_id in self._not_ours:
            return key
        event = await self.chat.get_event(room_id, event_id)
        content = (event or {}).get("content")
        marker = content.get(MARKER) if isinstance(content, Mapping) else None
        claimed = marker.get("key") if isinstance(marker, Mapping) else None
        if (
            event is not None
            and event.get("sender") == self.user_id
            and isinstance(claimed, str)
            and await self._in_flight(ElicitationKey(claimed), room_id)
        ):
            return ElicitationKey(claimed)
        remember(self._not_ours, event_id, None)
        return None

    async def _in_flight(self, key: ElicitationKey, room_id: str) -> bool:
        """A post of ``key`` to this room is under way (no ref stored). An old prompt naming the
        same key (left from an earlier database) does not pass: its delivery has another ref."""
        person = self.chat.direct.person_of(room_id)
        here = {f"matrix:{room_id}", *((f"matrix:{person}",) if person else ())}
        return any(
            d.destination in here and d.state in _IN_FLIGHT
            for d in await self.elicitations.deliveries(key)
        )
