"""No import circles in compiler/ (the package ``tfaot``): every import of a
tfaot module counts, at module level, inside a function or under
``TYPE_CHECKING``, so that the stages stay layered (a rule table that needs
the emitter gets it as an argument; a registry two rule modules share lives
in a module of its own)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "compiler"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["tfaot", *parts])] = path
    return out


def _parse(path: Path):
    """``ast.parse`` of the file, again where CPython 3.11 raised its spurious
    "AST constructor recursion depth mismatch" SystemError (its AST state
    is shared by the interpreter's threads, CPython gh-106905): a full
    suite's worker met it once, after other tests had left threads behind."""
    for attempt in range(3):
        try:
            return ast.parse(path.read_text())
        except SystemError:
            if attempt == 2:
                raise


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The tfaot modules ``name`` imports (``from .x import y`` counts as
    ``x.y`` when that is a module, else as ``x``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("tfaot"):
                base = node.module
            else:
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in modules else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
    found.discard(name)
    return {m for m in found if m in modules}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and graph["tfaot.pipeline"], "the import graph was not read"
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
