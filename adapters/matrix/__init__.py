"""Matrix: prompts posted and edited in rooms, answers from reactions and thread replies (nio).

- :class:`~adapters.matrix.chat.MatrixChat`: the ChatAdapter (``chats["matrix"]``);
- :class:`~adapters.matrix.sync.MatrixListener`: the sync loop (``start()`` / ``stop()``);
- :func:`~adapters.matrix.chat.make_client`: the nio client both share, on the configured token
  and device, with nio's endless retries turned off.
"""

from adapters.matrix.chat import MatrixChat, make_client
from adapters.matrix.sync import MatrixListener

__all__ = ["MatrixChat", "MatrixListener", "make_client"]
