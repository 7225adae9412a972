"""How Slack interactions arrive (Socket Mode, HTTP) and are recorded, handled and answered."""
