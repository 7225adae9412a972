"""The built-in web inbox: the channel that works with no chat account, and the admin's view."""
