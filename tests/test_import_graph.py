"""The package's import graph has no circle: no module imports one that (through others) imports it back.

Every import counts, those inside functions and under TYPE_CHECKING too: a circle drawn lazily is still
two modules that cannot be understood, tested or moved one without the other. Types that several layers
share go in a module below all of them (`steps.py`, `profiling/grid.py`). The one exception is a
package's registry of its own implementations (see `_registry_import`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bsp_planner"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def _nodes(tree: ast.AST, in_function: bool = False):
    """Every node with whether it lies inside a function body (an import made when the function runs)."""
    for child in ast.iter_child_nodes(tree):
        yield child, in_function
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from _nodes(child, inner)


def _registry_import(me: str, is_package: bool, target: str, lazy: bool) -> bool:
    """A lazy import between a package's __init__ and its own submodules: the registry a package keeps of
    its implementations (`make_backend` naming `local` and `kubernetes`, a planner's factory reading the
    planners' table). It runs after both are loaded, and the two are one part, not two."""
    if not lazy:
        return False
    own_submodule = is_package and target.rpartition(".")[0] == me
    own_package = not is_package and me.rpartition(".")[0] == target
    return own_submodule or own_package


def imports(path: Path) -> set[str]:
    """The package's modules that `path` imports (a name imported from a package counts as its module
    when it is one: `from . import zk` is bsp_planner.zk)."""
    me = module_name(path)
    is_package = path.name == "__init__.py"
    package = me if is_package else me.rpartition(".")[0]
    found: set[str] = set()
    for node, lazy in _nodes(ast.parse(path.read_text())):
        new: set[str] = set()
        if isinstance(node, ast.Import):
            new.update(a.name for a in node.names if a.name.startswith("bsp_planner"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("bsp_planner"):
                continue
            subs = [f"{target}.{a.name}" for a in node.names if is_module(f"{target}.{a.name}")]
            new.update(subs if len(subs) == len(node.names) else [target, *subs])
        found.update(t for t in new if not _registry_import(me, is_package, t, lazy))
    found.discard(me)
    return {m for m in found if is_module(m)}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def test_the_package_has_no_import_circle():
    assert cycles(graph()) == []


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
