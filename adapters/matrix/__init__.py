"""Matrix: prompts posted and edited in rooms, answers from reactions and thread replies (nio).

- :class:`~adapters.matrix.chat.MatrixChat`: the ChatAdapter (``chats["matrix"]``);
- :class:`~adapters.matrix.listener.MatrixListener`: the sync loop (``start()`` / ``stop()``);
- :func:`~adapters.matrix.chat.make_client`: the nio client both share, on the configured token
  and device, with nio's endless retries turned off;
- :func:`~adapters.matrix.api.connection.matrix_chat`: the chat on its client, with end-to-end
  encryption (:mod:`adapters.matrix.e2ee.crypto`) when a pickle key is configured, and
  :func:`~adapters.matrix.api.connection.lease_fence`, which keeps its snapshots under the lease.
"""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.matrix.api.connection import lease_fence, matrix_chat
    from adapters.matrix.chat import MatrixChat, make_client
    from adapters.matrix.listener import MatrixListener

__all__, __getattr__ = lazy_exports(__name__, __file__)
