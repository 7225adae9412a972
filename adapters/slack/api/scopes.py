"""The Slack app's bot scopes, as the installed token holds them (any Web API answer's
``x-oauth-scopes`` header) and as an app manifest asks for them (``oauth_config.scopes.bot``):
``check-config`` names a scope the manifest lacks, ``serve`` logs one the token lacks."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

USERGROUPS_READ = "usergroups:read"
"""What ``usergroups.users.list`` needs: ``slack:S…`` approvers are read with it."""

MANIFEST = Path("slack-app-manifest.yaml")
"""The manifest the app is created from (the repository's), read from the working directory
unless ``[slack] manifest`` names another."""


def oauth_scopes(headers: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The token's scopes from a Web API answer's headers (None: the header is not there)."""
    for name, value in (headers or {}).items():
        if str(name).lower() == "x-oauth-scopes":
            return frozenset(s.strip() for s in str(value).split(",") if s.strip())
    return None


def manifest_scopes(path: Path) -> frozenset[str]:
    """The bot scopes the manifest at ``path`` asks for; ValueError saying why it cannot be read."""
    try:
        manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except yaml.YAMLError:
        raise ValueError(f"{path}: not valid YAML") from None
    scopes: Any = manifest
    for key in ("oauth_config", "scopes", "bot"):
        scopes = scopes.get(key) if isinstance(scopes, dict) else None
    if not isinstance(scopes, list):
        msg = f"{path}: no oauth_config.scopes.bot list: not a Slack app manifest"
        raise ValueError(msg)  # noqa: TRY004 - the caller reports a ValueError by its key
    return frozenset(s for s in scopes if isinstance(s, str))
