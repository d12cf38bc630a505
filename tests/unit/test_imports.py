"""The project's import graph: no circles (type-only imports included), ``sim`` never imports
``reports`` or ``kernels``, and ``sim`` imports inside functions only optional extras.

Imports are read from the source (``ast``), every one of them: module level, under
``if TYPE_CHECKING:`` and inside functions. A module's edge goes to the project module it
names (``from a.b import c`` names ``a/b/c.py`` when that file exists, else ``a.b``).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("allocator", "sim", "traces", "reports", "kernels")
OPTIONAL = {"ray", "torch", "triton", "cbor2", "xxhash", "tokenizers"}
"""Third-party extras a function may import lazily (everything else at module level)."""
def module_files() -> dict[str, Path]:
    """Every project module by dotted name (packages by their ``__init__``)."""
    files = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    files["simulate"] = ROOT / "simulate.py"
    return files


def _imports(tree: ast.Module) -> list[tuple[ast.stmt, list[str], bool]]:
    """(statement, names it imports, whether it sits inside a function) for every import."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.append((child, [a.name for a in child.names], in_function))
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                names = [f"{child.module}.{a.name}" for a in child.names]
                found.append((child, [child.module, *names], in_function))
            visit(child, inner)
    visit(tree, False)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    files = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = set()
        for stmt, names, _ in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(stmt, ast.ImportFrom):
                submodules = [n for n in names[1:] if n in files]
                edges.update(submodules if len(submodules) == len(names) - 1
                             else [*submodules, names[0]])
            else:
                edges.update(n for n in names if n in files)
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_checker_finds_a_circle() -> None:
    """A two-module loop and a longer one are found; a tree is not."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circles() -> None:
    """No module reaches itself through imports, type-only and function-level ones included."""
    assert cycles(import_graph()) == []


def test_sim_imports_only_allocator_and_traces() -> None:
    """sim imports allocator and traces, never reports or kernels (simulate.py does)."""
    graph = import_graph()
    outside = {(name, dep) for name, deps in graph.items() if name == "sim" or name.startswith("sim.")
               for dep in deps if dep.split(".")[0] not in ("sim", "allocator", "traces")}
    assert outside == set()
    assert {"reports", "kernels.validate"} <= {d for d in graph["simulate"]}


def test_sim_imports_in_functions_only_optional_extras() -> None:
    """A function in sim/ imports only an optional extra (Ray) lazily."""
    lazy = []
    for name, path in module_files().items():
        if not (name == "sim" or name.startswith("sim.")):
            continue
        for stmt, names, in_function in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if in_function and names[0].split(".")[0] not in OPTIONAL:
                lazy.append(f"{name}:{stmt.lineno} {names[0]}")
    assert lazy == []
