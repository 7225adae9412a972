"""The Matrix connection assembled for the composition root: the chat adapter on its client, with
end-to-end encryption when a pickle key is configured (``matrix.pickle_key_env``)."""

from __future__ import annotations

from pathlib import Path

from adapters.matrix.api.client import make_client
from adapters.matrix.chat import MatrixChat
from adapters.matrix.e2ee.client import EncryptingClient
from adapters.matrix.e2ee.crypto import Fence, MatrixCrypto
from bot.domain.ports import Clock
from bot.domain.store import CryptoStates, Leases


def matrix_chat(
    homeserver: str,
    user_id: str,
    device_id: str,
    access_token: str,
    *,
    pickle_key: str | None,
    states: CryptoStates,
    clock: Clock,
    fence: Fence | None = None,
    lease: tuple[str, str] | None = None,
    scratch: Path | None = None,
) -> MatrixChat:
    """A :class:`MatrixChat`; with a ``pickle_key``, its crypto state kept in ``states``, each
    snapshot written only while ``lease`` (name, holder) is still ours, checked by the store in
    the same statement; ``fence()`` reads the lease for the hand-off."""
    client = make_client(homeserver, user_id, device_id, access_token, pickle_key=pickle_key)
    if pickle_key is None:
        return MatrixChat(client)
    assert isinstance(client, EncryptingClient)  # noqa: S101 - make_client's contract
    crypto = MatrixCrypto(
        client,
        states,
        pickle_key=pickle_key,
        clock=clock,
        fence=fence,
        lease=lease,
        scratch=scratch,
    )
    return MatrixChat(client, crypto=crypto)


def lease_fence(leases: Leases, name: str, holder: str, clock: Clock) -> Fence:
    """True while ``holder`` holds lease ``name`` and it has not run out (a read: the store's
    lease rows, no renewal)."""

    async def held() -> bool:
        now = clock.now()
        return any(
            lease.name == name and lease.holder == holder and lease.until > now
            for lease in await leases.leases()
        )

    return held
