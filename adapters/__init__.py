"""Edges of elicitbot: chat surfaces and upstream sources."""
