"""elicitbot: the chat front-end for human-in-the-loop agents."""

__version__ = "0.1.0"
