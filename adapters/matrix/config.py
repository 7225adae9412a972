"""``[matrix]``: the homeserver, the bot's account and device, end-to-end encryption."""

from __future__ import annotations

from pydantic import AnyHttpUrl, Field

from adapters.shared.config import EnvName, Section


class MatrixConfig(Section):
    homeserver: AnyHttpUrl
    user_id: str = Field(pattern=r"^@[^:]+:.+$")
    access_token_env: EnvName = "MATRIX_ACCESS_TOKEN"  # noqa: S105
    device_id: str = Field(min_length=1)
    pickle_key_env: EnvName | None = None
    """Set: end-to-end encryption (encrypted rooms, encrypted direct messages); the variable
    holds the key that encrypts the device's stored crypto state (16+ characters). ``serve``
    refuses to start naming ``matrix.pickle_key_env`` when it is unset or too short."""
