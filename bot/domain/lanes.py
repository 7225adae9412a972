"""Lanes: effects are dispatched per lane, so a backlog in one never delays another.

- ``chat:<destination>``: one channel's or room's posts, updates, seeds and notices, posts first
  (a burst of 50 shows all 50 before any reaction or edit). A paced post (Slack: one a second per
  channel) is claimed once the post before it is done and waits for its slot in the adapter, so
  the only wait between two posts is the platform's interval. An unpaced lane (``chained``:
  Matrix, the web inbox) claims its due posts as one chain of up to ``POST_CHAIN``.
- ``sink:<source>``: write-backs to one upstream; independent, so several go at once.

After a failure a lane is probed, not flooded: a chat lane's later posts wait behind the failed
one (questions keep their order), and a failed sink is ``down`` (:func:`down_key`): one write-back
at a time, at most ``PROBE_CEILING`` apart. A lane's bound counts every replica's live claims.
"""

from __future__ import annotations

from datetime import timedelta

from bot.domain.records import EffectKind

CHAT = "chat:"
SINK = "sink:"
CHAT_LANE_SLOTS = 3
"""Effects of one channel in flight at once: a post, an update and a notice, say."""
SINK_LANE_SLOTS = 8
"""Write-backs to one upstream system in flight at once."""
POSTS_IN_FLIGHT = 1
"""Posts of one channel in flight at once: questions appear in the order they came."""
POST_CHAIN = 50
"""Posts of one unpaced lane (Matrix, the web inbox) claimed at once and sent together: a
homeserver persists a room's events in batches (50 sends at once take Synapse 0.25 s, one after
the other 0.54 to 0.72 s). Questions sent together may land in any order among themselves."""
UPDATES_IN_FLIGHT = 1
"""Rewrites of one channel's messages in flight at once: an update waiting for the platform's
budget (Slack: chat.update per workspace) never holds the slots its channel's notices need."""
CLAIM_LEASE = timedelta(seconds=10)
"""How long a claim holds without its owner's heartbeat: a killed owner's rows are taken again
within this long, on every database."""
PROBE_CEILING_SECONDS = 3.0
"""The longest wait between two tries of a failing lane (without the peer's ``Retry-After``):
what was waiting goes within this long of the peer's recovery."""
GIVE_UP_AFTER = timedelta(hours=1)
"""An effect failing this long (and at least ``MAX_ATTEMPTS`` times) is given up."""
HEARTBEAT = timedelta(seconds=3)
"""How often a live owner renews the claims it holds (well inside ``CLAIM_LEASE``)."""


def lane_of(elicitation_key: str, kind: EffectKind, target: str) -> str:
    """The lane of an outbox row: its sink for a write-back, else its destination."""
    if kind is EffectKind.WRITEBACK:
        return SINK + elicitation_key.split(":", 1)[0]
    return CHAT + target


def slots_of(lane: str) -> int:
    return SINK_LANE_SLOTS if lane.startswith(SINK) else CHAT_LANE_SLOTS


def lane_slots(lane: str, *, chained: bool = False) -> int:
    """Effects of a lane in flight at once; ``chained``: for a chained lane's posts, room for
    their chain (its other effects keep the usual slots)."""
    return max(slots_of(lane), POST_CHAIN) if chained else slots_of(lane)


def chained_prefix(platform: str) -> str:
    """The lanes of a platform whose posts are chained (``claim_outbox(chained=...)``)."""
    return f"{CHAT}{platform}:"


def waits_for_posts(kind: EffectKind) -> bool:
    """Whether a row of this kind waits while its chat lane has a post it could make now: every
    chat effect but the post itself (a write-back's lane holds write-backs only)."""
    return kind not in (EffectKind.POST, EffectKind.WRITEBACK)


def down_key(lane: str) -> str:
    """A sink lane whose last write-back failed: one at a time is tried, none before the key's
    time; a write-back that goes through (or is refused: the peer answered) removes it."""
    return "down:" + lane


def pace_key(lane: str) -> str:
    """The shared pace of a lane's posts: until then its next post is not one it could make now
    (every replica's claim reads it for messages first)."""
    return "post:" + lane
