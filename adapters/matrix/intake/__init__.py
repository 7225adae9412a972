"""A classified room event handled: its prompt, reactions, selections, commands, notices."""
