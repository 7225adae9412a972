"""Block Kit pieces under the renderer: escaping, mrkdwn, previews, layout. Pure."""
