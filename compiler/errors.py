"""The one exception type that reaches users.

Every stage raises ``TfaotError`` with a message that names the culprit
(file, layer, node or op) and, where possible, what to do. The CLI prints it
as a single ``error: ...`` line and exits non-zero; nothing else should
escape as a traceback.
"""


class TfaotError(Exception):
    """A user-facing error: the message is complete and printed as is."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (or its type name), for
    wrapping third-party errors into a one-line ``TfaotError``."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
