"""``[slack]``: the bot token, Socket Mode or HTTP, the Web API's address, the app manifest."""

from __future__ import annotations

from pathlib import Path

from pydantic import AnyHttpUrl, model_validator

from adapters.shared.config import EnvName, Section


class SlackConfig(Section):
    bot_token_env: EnvName = "SLACK_BOT_TOKEN"  # noqa: S105 - a variable name
    app_token_env: EnvName | None = None
    signing_secret_env: EnvName | None = "SLACK_SIGNING_SECRET"  # noqa: S105
    api_url: AnyHttpUrl = AnyHttpUrl("https://slack.com/api/")
    manifest: Path | None = None
    """The app manifest the Slack app was made from, checked for the scopes the config needs
    (``usergroups:read`` with a ``slack:S…`` approver); None: ``slack-app-manifest.yaml`` in the
    working directory, when there is one."""

    @model_validator(mode="after")
    def _http_mode_needs_a_signing_secret(self) -> SlackConfig:
        if self.app_token_env is None and self.signing_secret_env is None:
            msg = (
                "signing_secret_env is required in HTTP mode (app_token_env unset): "
                "without it every request from Slack would be refused"
            )
            raise ValueError(msg)
        return self
