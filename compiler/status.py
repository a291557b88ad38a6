"""The status codes of a generated library: one table, from which the shim's
enum (``tfrt_status.h``, written at package time), the ``NAME_OK`` /
``NAME_ERR_*`` defines of ``NAME.h`` and the texts of ``NAME_status_string``
are generated.

``text`` is what ``NAME_status_string`` returns, ``doc`` the comment next to
the define in the header; both may use ``{name}`` (the model name), ``{P}``
(its upper-case prefix) and ``{align}`` (the context alignment).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Status:
    name: str     # INVALID_ARGUMENT -> TFRT_STATUS_INVALID_ARGUMENT, NAME_ERR_INVALID_ARGUMENT
    value: int
    text: str
    doc: str

    @property
    def shim_name(self) -> str:
        return "TFRT_OK" if self.value == 0 else f"TFRT_STATUS_{self.name}"

    def api_name(self, prefix: str) -> str:
        return f"{prefix}_OK" if self.value == 0 else f"{prefix}_ERR_{self.name}"


STATUSES: tuple[Status, ...] = (
    Status("OK", 0, "ok", "success"),
    Status("INVALID_ARGUMENT", 1, "invalid argument (NULL pointer, shape or type mismatch)",
           "NULL pointer, wrong shape or element type"),
    Status("NOT_INITIALIZED", 2, "context not initialized (call init first)",
           "context used before {name}_init / after _deinit"),
    Status("OUT_OF_MEMORY", 3, "static arena or object pool exhausted",
           "static arena exhausted (a tfaot bug: please report)"),
    Status("ABI_MISMATCH", 4, "kernel object does not implement executable-library ABI v6",
           "kernel object is not executable-library ABI v6"),
    Status("KERNEL_FAILED", 5, "a kernel dispatch reported failure",
           "a kernel dispatch reported failure"),
    Status("PROGRAM_FAILED", 6, "the host program failed (vm.fail)",
           "the host program failed (vm.fail)"),
    Status("UNIMPLEMENTED", 7, "feature not supported by the tfaot runtime shim",
           "a feature the runtime shim does not support"),
    Status("OUT_OF_RANGE", 8, "buffer access out of range", "buffer access out of range"),
    Status("NULL_REF", 9, "null buffer, view or executable used",
           "a null buffer reached a kernel (compiler bug)"),
    Status("NOT_FOUND", 10, "kernel library or dispatch function not found",
           "kernel library or dispatch not linked in"),
    Status("IO", 11, "an I/O hook (read_input or write_output) reported an error",
           "an I/O hook reported an error ({name}_run)"),
    Status("MOVED", 12, "context was moved or copied after init; call {name}_init on it again",
           "context was moved or copied after {name}_init (re-initialise it)"),
    Status("ALIGNMENT", 13, "context not aligned to {P}_CTX_ALIGN ({align}) bytes",
           "context memory not aligned to {P}_CTX_ALIGN"),
    Status("DEVICE", 14, "GPU driver or device missing, unsuitable or failed (GPU targets)",
           "GPU targets: no driver or suitable device, or the device failed"),
    Status("WEIGHTS", 15, "weights missing or not this library's (size or hash differ); "
           "pass {name}.weights to {name}_init_with_weights",
           "--weights=file builds: weights missing, or not the ones built with"),
    Status("INPUT_RANGE", 16, "an integer input (token id) is outside its table; nothing was run",
           "an integer input indexes a table and is out of range (see {P}_INPUTi_MIN, _END); state unchanged"),
    Status("BUSY", 17, "context already in use by another call (one thread per context)",
           "the context is in use by another call: one thread per context at a time"),
    Status("NO_HOOK", 18, "the program's input hook was not linked: {name}_run found the "
           "library's default {name}_read_input (hooks in a static library are not pulled "
           "in over it: link them as an object file; a program that dlopen()s the .so: link it "
           "with -rdynamic)",
           "{name}_run: the program's {name}_read_input was not linked, the default ran"),
)


def _check_table() -> None:
    values = [s.value for s in STATUSES]
    assert values == list(range(len(STATUSES))), "status values must be 0, 1, 2, ... in order"
    assert len({s.name for s in STATUSES}) == len(STATUSES)
    for s in STATUSES:  # texts go into C string literals and comments as they are
        assert not any(c in s.text + s.doc for c in '"\\\n') and "*/" not in s.doc, s.name


_check_table()


def render(statuses=STATUSES, **names) -> list[dict]:
    """The table with its texts formatted for one model (``name``, ``P``, ``align``)."""
    return [{"name": s.name, "value": s.value, "shim_name": s.shim_name,
             "api_name": s.api_name(names["P"]), "text": s.text.format(**names),
             "doc": s.doc.format(**names)} for s in statuses]


def shim_header() -> str:
    """Text of ``tfrt_status.h``: the shim's status enum."""
    width = max(len(s.shim_name) for s in STATUSES)
    lines = [
        "/* tfrt_status.h - status codes of the tfaot runtime shim.",
        " * Generated from compiler/status.py at package time: do not edit. */",
        "#ifndef TFRT_STATUS_H_",
        "#define TFRT_STATUS_H_",
        "",
        "/* 0 is success; the model header re-exports these as NAME_OK / NAME_ERR_*",
        " * and documents them. */",
        "enum {",
    ]
    for s in STATUSES:
        lines.append(f"  {(s.shim_name + ' = ' + str(s.value) + ',').ljust(width + 6)}"
                     f"/* {s.doc.replace('{name}', 'NAME').replace('{P}', 'NAME')} */")
    lines += ["  TFRT_STATUS_COUNT_", "};", "", "#endif /* TFRT_STATUS_H_ */", ""]
    return "\n".join(lines)
