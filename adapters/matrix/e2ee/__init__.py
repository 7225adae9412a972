"""The bot device's end-to-end encryption (docs/matrix-e2ee.md)."""
