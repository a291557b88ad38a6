"""sizeof/alignof of C structs for a target, computed in Python from the C text.

The context of a generated model (``struct NAME_ctx`` in NAME.c) must have a
size known at build time (``NAME_CTX_SIZE``), also when the target's C
compiler is not installed. The size is a function of the target's data model
(pointer, ``size_t``, ``long`` and 64-bit scalar sizes and alignments) and of
the struct definitions, which are kept in a simple form on purpose (see
runtime_shim/tfrt.h): every field is ``[_Alignas(N)] [const] type [*...] name
[[N]...];`` or a nested ``struct``/``union`` without a tag (named or an
anonymous member); no bit-fields.

``struct_size(texts, "struct NAME_ctx", data_model(triple))`` parses the
headers and the generated source (in include order), evaluates the array
sizes from their ``#define``s and lays the struct out as the C ABI does:
each field at the next multiple of its alignment, the struct's alignment the
largest of its fields', its size rounded up to that alignment. Anything the
parser does not understand is an error, never a guess.
"""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

from ..errors import TfaotError


@dataclass(frozen=True)
class DataModel:
    """Sizes and alignments (in bytes) of the scalar types a target's ABI fixes."""

    name: str
    pointer: int        # also size_t, ptrdiff_t, uintptr_t
    long: int
    int64_align: int    # alignment of int64_t/uint64_t/long long inside a struct
    double_align: int


LP64 = DataModel("LP64", pointer=8, long=8, int64_align=8, double_align=8)
LLP64 = DataModel("LLP64", pointer=8, long=4, int64_align=8, double_align=8)
ILP32 = DataModel("ILP32", pointer=4, long=4, int64_align=8, double_align=8)
#: i386 System V: 64-bit scalars are 4-byte aligned inside structs.
ILP32_I386 = DataModel("ILP32 (i386)", pointer=4, long=4, int64_align=4, double_align=4)

_ARCH_64 = ("x86_64", "amd64", "aarch64", "arm64", "riscv64", "powerpc64", "ppc64", "s390x",
            "mips64", "loongarch64", "sparcv9", "wasm64")
_ARCH_32 = ("thumb", "arm", "riscv32", "wasm32", "mips", "powerpc", "ppc", "xtensa", "sparc",
            "hexagon")
_ARCH_I386 = ("i386", "i486", "i586", "i686", "x86")


def data_model(triple: str) -> DataModel:
    """The data model of an LLVM target triple (``aarch64-linux-gnu``, ...)."""
    parts = triple.lower().split("-")
    arch, rest = parts[0], parts[1:]
    windows = any(p.startswith(("windows", "win32", "mingw")) for p in rest)
    if arch in ("x86_64", "amd64") and any(p.endswith("x32") for p in rest):
        return ILP32
    if arch.startswith(_ARCH_64):
        return LLP64 if windows else LP64
    if arch in _ARCH_I386:
        return ILP32 if windows else ILP32_I386
    if arch.startswith(_ARCH_32):
        return ILP32
    raise TfaotError(f"package: the data model (pointer size, alignment of 64-bit types) of "
                     f"target {triple} is not known to tfaot, so the context size cannot be "
                     "computed; install the target's C compiler (its measurement is used) or "
                     "add the architecture to compiler/package/c_layout.py")


def scalar_layout(model: DataModel) -> dict[str, tuple[int, int]]:
    """C scalar type name -> (size, align) under ``model``."""
    p, lng = model.pointer, model.long
    i64, f64 = (8, model.int64_align), (8, model.double_align)
    table = {
        "char": (1, 1), "signed char": (1, 1), "unsigned char": (1, 1), "_Bool": (1, 1),
        "int8_t": (1, 1), "uint8_t": (1, 1),
        "short": (2, 2), "unsigned short": (2, 2), "int16_t": (2, 2), "uint16_t": (2, 2),
        "int": (4, 4), "unsigned": (4, 4), "unsigned int": (4, 4), "int32_t": (4, 4),
        "uint32_t": (4, 4), "float": (4, 4),
        "long": (lng, lng), "unsigned long": (lng, lng),
        "long long": i64, "unsigned long long": i64, "int64_t": i64, "uint64_t": i64,
        "double": f64,
        "size_t": (p, p), "ptrdiff_t": (p, p), "intptr_t": (p, p), "uintptr_t": (p, p),
        "*": (p, p),
    }
    return table


# ---- parsing ------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:([A-Za-z_]\w*)|(0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(.))", re.S)
_QUALIFIERS = {"const", "volatile", "static", "extern", "register", "restrict"}
_MULTIWORD = {"signed", "unsigned", "short", "long", "char", "int"}


_LEXEMES = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)


def _blank(m: re.Match) -> str:
    text = m.group(0)
    if text[0] == '"':
        return '""'
    if text[0] == "'":
        return "0"
    return "\n" * text.count("\n") or " "


def _strip(text: str) -> tuple[str, dict[str, str]]:
    """Removes comments, strings and preprocessor lines (and C++-only blocks);
    returns the rest and the object-like #defines (the last one of a name wins)."""
    text = _LEXEMES.sub(_blank, text.replace("\\\n", " "))
    defines: dict[str, str] = {}
    body = []
    skip = []  # one entry per open #if: True inside an `#ifdef __cplusplus` branch
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            directive = stripped[1:].strip()
            if directive.startswith("if"):
                skip.append("__cplusplus" in directive and "!" not in directive
                            and not directive.startswith("ifndef"))
            elif directive.startswith(("else", "elif")) and skip:
                skip[-1] = False
            elif directive.startswith("endif") and skip:
                skip.pop()
            elif not any(skip):
                m = re.match(r"define\s+([A-Za-z_]\w*)\b(?!\()\s*(.*)$", directive)
                if m:
                    defines[m.group(1)] = m.group(2).strip()
            continue
        if not any(skip):
            body.append(line)
    return "\n".join(body), defines


def _tokens(text: str) -> list[str]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        tok = m.group(1) or m.group(2) or m.group(3)
        if tok and not tok.isspace():
            out.append(tok)
    return out


@dataclass
class _Field:
    type: object           # str (scalar/typedef/"struct X") or _Aggregate
    pointer: bool
    dims: list[list[str]]  # token lists of array sizes
    alignas: list[str] | None
    name: str


@dataclass
class _Aggregate:
    kind: str              # "struct" or "union"
    fields: list[_Field]
    tag: str | None = None


class _Parser:
    def __init__(self, what: str):
        self.what = what
        self.aggregates: dict[str, _Aggregate] = {}  # "struct X" -> definition
        self.typedefs: dict[str, object] = {}        # name -> "struct X" | scalar | "*" | _Aggregate
        self.defines: dict[str, str] = {}
        self.broken: dict[str, str] = {}             # "struct X" -> why it was not parsed

    def fail(self, msg: str):
        raise TfaotError(f"package: computing the layout of {self.what}: {msg}")

    def feed(self, text: str) -> None:
        body, defines = _strip(text)
        self.defines.update(defines)
        toks = _tokens(body)
        i, depth = 0, 0
        while i < len(toks):
            t = toks[i]
            if depth == 0 and t == "typedef":
                i = self._tolerant(toks, i, lambda: self._typedef(toks, i + 1))
                continue
            if depth == 0 and t in ("struct", "union") and i + 2 < len(toks) and \
                    toks[i + 2] == "{":
                i = self._tolerant(toks, i, lambda: self._define(toks, i))
                continue
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            i += 1

    def _define(self, toks: list[str], i: int) -> int:
        agg, j = self._aggregate(toks, i)
        self.aggregates[f"{toks[i]} {toks[i + 1]}"] = agg
        return j

    def _tolerant(self, toks: list[str], i: int, parse) -> int:
        """Runs ``parse``; a definition it cannot read is remembered as broken
        (an error only if the layout needs it) and skipped."""
        try:
            return parse()
        except (TfaotError, IndexError) as e:
            why = str(e).split(": ", 2)[-1] if isinstance(e, TfaotError) else "unexpected end"
            j, depth = i, 0
            while j < len(toks) and not (toks[j] == ";" and depth == 0):
                depth += toks[j] == "{"
                depth -= toks[j] == "}"
                j += 1
            if toks[i] == "typedef":
                self.broken[f"{toks[i + 1]} {toks[i + 2]}"] = self.broken[toks[j - 1]] = why
            else:
                self.broken[f"{toks[i]} {toks[i + 1]}"] = why
            return j + 1

    def _typedef(self, toks: list[str], i: int) -> int:
        end, depth = i, 0
        while end < len(toks) and not (toks[end] == ";" and depth == 0):
            depth += toks[end] == "{"
            depth -= toks[end] == "}"
            end += 1
        decl = toks[i:end]
        if decl and decl[0] in ("struct", "union") and "{" in decl:
            agg, j = self._aggregate(toks, i)
            tag = toks[i + 1] if toks[i + 1] != "{" else None
            if tag:
                self.aggregates[f"{decl[0]} {tag}"] = agg
            target: object = f"{decl[0]} {tag}" if tag else agg
            for name in (t for t in toks[j:end] if re.match(r"[A-Za-z_]\w*$", t)):
                self.typedefs[name] = target
        elif decl and decl[0] == "enum":
            self.typedefs[decl[-1]] = "int"
        elif "(" in decl:  # function pointer: typedef int (*name)(...)
            k = decl.index("(")
            if decl[k + 1] == "*":
                self.typedefs[decl[k + 2]] = "*"
        elif decl:
            name, spec = decl[-1], [t for t in decl[:-1] if t not in _QUALIFIERS]
            if "*" in spec:
                self.typedefs[name] = "*"
            elif spec and spec[0] in ("struct", "union"):
                self.typedefs[name] = f"{spec[0]} {spec[1]}"
            else:
                self.typedefs[name] = " ".join(spec)
        return end + 1

    def _aggregate(self, toks: list[str], i: int) -> tuple[_Aggregate, int]:
        """Parses ``struct [tag] { fields }`` at toks[i]; returns it and the index after '}'."""
        kind = toks[i]
        i += 1
        tag = None
        if toks[i] != "{":
            tag = toks[i]
            i += 1
        i += 1  # '{'
        fields = []
        while toks[i] != "}":
            f, i = self._field(toks, i)
            fields.extend(f)
        return _Aggregate(kind, fields, tag), i + 1

    def _field(self, toks: list[str], i: int) -> tuple[list[_Field], int]:
        alignas = None
        if toks[i] == "_Alignas":
            j = _match_paren(toks, i + 1)
            alignas = toks[i + 2:j]
            i = j + 1
        while toks[i] in _QUALIFIERS:
            i += 1
        if toks[i] in ("struct", "union") and toks[i + 1] == "{":
            agg, i = self._aggregate(toks, i)
            base: object = agg
            if toks[i] == ";":  # an anonymous member (C11): its fields are the outer's
                return [_Field(agg, False, [], alignas, "")], i + 1
        elif toks[i] in ("struct", "union"):
            base = f"{toks[i]} {toks[i + 1]}"
            i += 2
        elif toks[i] in _MULTIWORD:
            words = []
            while toks[i] in _MULTIWORD:
                words.append(toks[i])
                i += 1
            base = " ".join(w for w in words if w != "signed" or len(words) == 1) or "int"
        elif re.match(r"[A-Za-z_]\w*$", toks[i]):
            base = toks[i]
            i += 1
        else:
            self.fail(f"unexpected '{toks[i]}' in a field declaration")
        fields = []
        while True:
            pointer = False
            while toks[i] in ("*", "const", "volatile", "restrict"):
                pointer |= toks[i] == "*"
                i += 1
            if toks[i] == "(":
                self.fail(f"field of type {base} uses a form the layout parser does not "
                          "support (a function pointer field); use a typedef")
            name = toks[i]
            i += 1
            if toks[i] == ":":
                self.fail(f"field '{name}' is a bit-field, which the layout parser does not "
                          "support")
            dims = []
            while toks[i] == "[":
                j = i + 1
                depth = 1
                while depth:
                    depth += toks[j] == "["
                    depth -= toks[j] == "]"
                    j += 1
                dims.append(toks[i + 1:j - 1])
                i = j
            fields.append(_Field(base, pointer, dims, alignas, name))
            if toks[i] == ",":
                i += 1
                continue
            if toks[i] != ";":
                self.fail(f"expected ';' after field '{name}', found '{toks[i]}'")
            return fields, i + 1

    # ---- evaluation ----------------------------------------------------------

    def eval(self, expr: list[str], depth: int = 0) -> int:
        if depth > 32:
            self.fail(f"macro expansion too deep in '{' '.join(expr)}'")
        out = []
        for t in expr:
            if t in self.defines:
                out.append(f"({self.eval(_tokens(_strip(self.defines[t])[0]), depth + 1)})")
            elif re.match(r"[A-Za-z_]\w*$", t):
                self.fail(f"array size '{' '.join(expr)}' uses '{t}', which is not a #define "
                          "of the parsed files")
            else:
                out.append(str(int(t, 0)) if re.match(r"\d|0x", t) else t)
        return _safe_eval(" ".join(out), self.fail)


def _match_paren(toks: list[str], i: int) -> int:
    depth = 0
    for j in range(i, len(toks)):
        depth += toks[j] == "("
        depth -= toks[j] == ")"
        if depth == 0:
            return j
    raise TfaotError("package: unbalanced parentheses in a struct field")


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _safe_eval(text: str, fail) -> int:
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        fail(f"cannot evaluate the constant expression '{text}'")
    try:
        return ev(ast.parse(text, mode="eval"))
    except SyntaxError:
        fail(f"cannot evaluate the constant expression '{text}'")


# ---- layout -------------------------------------------------------------------

def _round(n: int, align: int) -> int:
    return -(-n // align) * align


class _Layout:
    def __init__(self, parser: _Parser, model: DataModel):
        self.p = parser
        self.scalars = scalar_layout(model)

    def of(self, t: object, seen: tuple = ()) -> tuple[int, int]:
        if isinstance(t, _Aggregate):
            return self.aggregate(t, seen)
        assert isinstance(t, str)
        if t in self.scalars:
            return self.scalars[t]
        if t in self.p.typedefs:
            return self.of(self.p.typedefs[t], seen + (t,))
        if t in self.p.aggregates:
            if t in seen:
                self.p.fail(f"{t} contains itself")
            return self.aggregate(self.p.aggregates[t], seen + (t,))
        if t in self.p.broken:
            self.p.fail(f"{t} could not be parsed: {self.p.broken[t]}")
        self.p.fail(f"type '{t}' is not defined in the parsed files (or is incomplete there)")

    def aggregate(self, agg: _Aggregate, seen: tuple = ()) -> tuple[int, int]:
        size = 0
        align = 1
        for f in agg.fields:
            fsize, falign = self.scalars["*"] if f.pointer else self.of(f.type, seen)
            for d in f.dims:
                n = self.p.eval(d)
                if n <= 0:
                    self.p.fail(f"field '{f.name}' has array size {n}")
                fsize *= n
            if f.alignas is not None:
                requested = self.p.eval(f.alignas)
                falign = max(falign, requested)
            align = max(align, falign)
            if agg.kind == "union":
                size = max(size, fsize)
            else:
                size = _round(size, falign) + fsize
        return _round(max(size, 0), align) if size else 0, align


def struct_layout(texts: list[str], type_name: str, model: DataModel) -> tuple[int, int]:
    """(sizeof, alignof) of ``type_name`` ("struct X" or a typedef name), defined
    somewhere in ``texts`` (C sources in include order), under ``model``."""
    parser = _Parser(type_name)
    for text in texts:
        parser.feed(text)
    return _Layout(parser, model).of(type_name)
