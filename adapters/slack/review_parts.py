"""What the review flow needs from the message renderer, in one place.

:func:`shown` (does the message hold the whole decisive content?), :data:`REVIEW_ACTION` (the
message's *Review…* button) and :func:`result_text` come from :mod:`adapters.slack.render`;
:func:`review_blocks` (the whole content as pages of blocks, nothing cut), :func:`review_fits`
(do those pages fit a modal?) and :func:`full_text` (the whole request as text, for the file)
from :mod:`adapters.slack.review`.
"""

from __future__ import annotations

from adapters.slack.render import REVIEW_ACTION, result_text, shown
from adapters.slack.review import full_text, review_blocks, review_fits

__all__ = ["REVIEW_ACTION", "full_text", "result_text", "review_blocks", "review_fits", "shown"]
