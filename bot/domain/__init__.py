"""The pure domain core: models, answer rules, routing and deadline planning.

Nothing here imports a chat, SQL, scheduler or web library (an import-linter contract checks it).
"""
