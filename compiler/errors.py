"""The one exception type that reaches users.

Every stage raises ``TfaotError`` with a message that names the culprit
(file, layer, node or op) and, where possible, what to do. The CLI prints it
as a single ``error: ...`` line and exits non-zero; nothing else should
escape as a traceback.
"""


class TfaotError(Exception):
    """A user-facing error: the message is complete and printed as is."""


#: The longest cause line kept after a first line that ends with ":" (Keras
#: puts whole weight arrays in some).
CAUSE_CHARS = 240


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (or its type name), for
    wrapping third-party errors into a one-line ``TfaotError``.

    A first line that only announces the cause ("... Example error message
    for object <Dense name=dense>:", as Keras writes) is kept with the
    next non-empty line, the cause itself (shortened to ``CAUSE_CHARS``).
    """
    lines = [line.strip() for line in (str(e).strip() or type(e).__name__).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) < 2 or not lines[0].endswith(":"):
        return lines[0]
    cause = lines[1]
    if len(cause) > CAUSE_CHARS:
        cause = cause[:CAUSE_CHARS].rstrip() + " ..."
    return f"{lines[0]} {cause}"
