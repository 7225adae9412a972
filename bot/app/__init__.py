"""The composition root: configuration, the HTTP app, the command line, logs and metrics, and the
wiring that builds every part with what it needs. The only package that imports ``adapters`` and
``store``."""
