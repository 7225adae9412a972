"""The command's former home: a console script installed before the root moved to ``bot.app``
still names ``bot.cli:main`` until the package is installed again."""

from bot.app.cli import main

__all__ = ["main"]
