"""Matrix: prompts posted and edited in rooms, answers from reactions and thread replies (nio)."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.matrix.api.connection import lease_fence, matrix_chat
    from adapters.matrix.chat import MatrixChat, make_client
    from adapters.matrix.listener import MatrixListener

__all__, __getattr__ = lazy_exports(__name__, __file__)
