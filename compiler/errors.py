"""The one exception type that reaches users.

Every stage raises ``TfaotError`` with a message that names the culprit
(file, layer, node or op) and, where possible, what to do. The CLI prints it
as a single ``error: ...`` line and exits non-zero; nothing else should
escape as a traceback.
"""


class TfaotError(Exception):
    """A user-facing error: the message is complete and printed as is."""


class NeedsFixedLength(TfaotError):
    """A Keras model that cannot stream over its open time axis (a layer
    needs the whole sequence, or --whole-window was asked): a subclassed
    model traced with an open axis is traced again at the length it was
    built with (pipeline._streamify_keras). ``why``: that cause, in a few words."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


class DroppedConstant(TfaotError):
    """iree-compile's inline execution model lost a constant the program
    needs (a dispatch binding or a copy's source is a null buffer): a bug
    of the pinned compiler that the build can sometimes route around.
    ``where``: the binding or copy that lost it."""

    def __init__(self, message: str, where: str = ""):
        super().__init__(message)
        self.where = where


#: The longest cause line kept after a first line that ends with ":" (Keras
#: puts whole weight arrays in some).
CAUSE_CHARS = 240
#: The longest first line kept (Keras puts a whole model config in some).
LINE_CHARS = 600


def _shortened(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[:limit].rstrip() + " ..."


def printable(text: str) -> str:
    """``text`` with control characters and line separators escaped (\\x0c):
    a name out of a corrupt file must not break an error's one line."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (or its type name), for
    wrapping third-party errors into a one-line ``TfaotError``.

    A first line that only announces the cause ("... Example error message
    for object <Dense name=dense>:", as Keras writes) is kept with the
    next non-empty line, the cause itself (shortened to ``CAUSE_CHARS``);
    Keras's "Exception encountered when calling X.call()." gives way to its
    cause (tfaot's own message names the layer), and TensorFlow's
    ``{{function_node ...}}`` markers go.
    """
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # Keras's terminal bold
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"(\[Op:\w+\]) name:[ \t]*$", r"\1", text, flags=re.M)  # (no name given)
    lines = [line.strip() for line in (text.strip() or type(e).__name__).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > 1 and lines[0].startswith("Exception encountered when calling"):
        lines = lines[1:]
    if len(lines) < 2 or not lines[0].endswith(":"):
        return _shortened(lines[0], LINE_CHARS)
    return f"{lines[0]} {_shortened(lines[1], CAUSE_CHARS)}"
