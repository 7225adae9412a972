"""Lanes: effects are dispatched per lane, so a backlog in one never delays another.

- ``chat:<destination>``: the posts, updates, seeded reactions and notices of one channel or
  room. Messages first: while a lane has a post it could make now, nothing else of that lane is
  claimed (a burst of 50 questions shows all 50 before the first one's reactions, edits and
  notices). A post the platform paces (Slack: one a second per channel) is claimed as soon as the
  post before it is done, ahead of its lane's pace, and waits for its slot in the adapter: the
  claim, its reads and the shared slot's reservation overlap the platform's interval, so the
  only wait between two posts of a busy channel is that interval. Until the pace comes it is not
  "a post it could make now", so the channel's updates and notices go out between its posts.
- ``sink:<source>``: the write-backs to one upstream system; each is independent of the others,
  so several go at once.

Within a chat lane at most one post and one update are in flight, so a rewrite waiting on the
platform's update budget never holds back the channel's reminders. A lane of a platform that
sets no pace (Matrix, the web inbox: ``chained``) has its due posts claimed as one chain of up to
``POST_CHAIN``, sent together by one task: a burst is posted as fast as the homeserver takes
events.

After a failure the lane is probed, not flooded: a chat lane's later posts wait behind the post
that failed (questions appear in the order they came, outage or not), and a sink whose
write-back failed is ``down`` (:func:`down_key`): one write-back at a time is tried, at most
``PROBE_CEILING`` apart, until one goes through; then every waiting one is due at once.

Every replica claims from the same table: a lane's bound counts every live claim on it, whoever
holds it, so a channel has at most ``CHAT_LANE_SLOTS`` effects in flight in the whole deployment.
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
"""Posts of one unpaced lane (Matrix, the web inbox) claimed at once and sent together, started
in the order they came. A homeserver persists a room's events in batches: 50 sends at once take
Synapse 0.25 s here, one after the other 0.54 to 0.72 s. A burst of 50 questions (the benchmark's)
goes out as one chain, not as chains of 16 one after the other (1.75 → 1.66 s plaintext, 1.77 →
1.47 s encrypted until all 50 were visible; bench/README.md). Questions sent together may land in
any order among themselves; questions taken in apart stay in the order they came."""
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
