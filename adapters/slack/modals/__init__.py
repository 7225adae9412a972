"""The Reply… modal and a form's inputs in it. Pure."""
