"""The package's shape, read from its source: import layers, no import cycle, function and module size.

Every ``import`` and ``from ... import`` in a module counts, at module level or deferred inside a
function, ``TYPE_CHECKING`` blocks included: a layer is a dependency of the design, not only of the
running program.  Imports outside the package (numpy, llama_index, ...) are not checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = "llama_index_carag"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

# The declared import layers, left to right (docs/GUIDE.md, "Code map"): a module may import its own layer
# and the layers to its left, never one to its right.  Keys are the package's first-level names.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("settings", "datasets", "models"),
    ("ranking", "stores"),
    ("retrieval",),
    ("verdicts", "extraction", "verifier"),
    ("visualize",),
    ("serve", "cli"),
)
# The package's own ``__init__`` re-exports the public names: it sits right of every layer, so no module
# inside a layer may import it.  What only produces docs/ tables (the papers' comparison and table, the verdict
# and claim-extraction benchmarks) lives in research/ beside the package, outside the wheel: the package never
# imports it (nor benchmarks/ or tests/).
OUTSIDE_THE_WHEEL = ("research", "benchmarks", "tests")

MAX_FUNCTION_LINES = 60  # docstring excluded
#: A module should hold one idea, whatever its length: past ADVISED_MODULE_LINES the test says so (a warning, advice
#: for the architecture review); past MAX_MODULE_LINES it fails (no single idea needs that much).
ADVISED_MODULE_LINES = 500
MAX_MODULE_LINES = 1000


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its ``__init__``)."""
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def layer_of(name: str) -> int:
    """The index of the layer ``name`` belongs to; the package's ``__init__`` is right of every layer."""
    parts = name.split(".")
    if len(parts) == 1:
        return len(LAYERS)
    for index, layer in enumerate(LAYERS):
        if parts[1] in layer:
            return index
    raise AssertionError(f"{name}: {parts[1]!r} is in no layer of LAYERS (tests/test_structure.py); add it there")


def _resolve(name: str, level: int, module: str, is_package: bool) -> str:
    """The absolute name of a (possibly relative) import found in ``module``."""
    if level == 0:
        return name
    base = module.split(".")
    base = base[: len(base) - level + (1 if is_package else 0)]
    return ".".join([*base, name] if name else base)


def imported_names(source: str, module: str, *, is_package: bool = False) -> Iterator[tuple[str, int]]:
    """``(absolute dotted name, line)`` of every name imported anywhere in ``source`` (the text of ``module``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, module, is_package)
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def _target(name: str) -> str:
    """The package module an imported dotted name loads: the longest prefix that is a module."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules():
        parts.pop()
    return ".".join(parts)


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """``(imported package module, line)`` for every import of a package module anywhere in ``module``."""
    path = modules()[module]
    for name, line in imported_names(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"):
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            yield _target(name), line


@cache
def import_graph() -> dict[str, frozenset[str]]:
    return {module: frozenset(t for t, _ in imports_of(module) if t != module) for module in modules()}


def strongly_connected(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _cycle_in(component: list[str], graph: dict[str, frozenset[str]]) -> list[str]:
    """One closed path through a strongly connected component, for the message."""
    members = set(component)
    path = [component[0]]
    seen = {component[0]: 0}
    while True:
        step = min(t for t in graph[path[-1]] if t in members)
        if step in seen:
            return [*path[seen[step] :], step]
        seen[step] = len(path)
        path.append(step)


def _short(name: str) -> str:
    return name.removeprefix(PACKAGE + ".")


def test_every_subpackage_is_in_a_layer() -> None:
    for name in modules():
        layer_of(name)


def test_deferred_and_relative_imports_are_read() -> None:
    """The checks below see an import inside a function, under ``TYPE_CHECKING`` and a relative one."""
    source = """
from typing import TYPE_CHECKING
from . import vectors
if TYPE_CHECKING:
    from llama_index_carag.settings import CaragSettings
def f():
    from ..ranking import stage
"""
    names = dict(imported_names(source, f"{PACKAGE}.core.example"))
    assert names == {
        "typing.TYPE_CHECKING": 2,
        f"{PACKAGE}.core.vectors": 3,
        f"{PACKAGE}.settings.CaragSettings": 5,
        f"{PACKAGE}.ranking.stage": 7,
    }
    assert _target(f"{PACKAGE}.settings.CaragSettings") == f"{PACKAGE}.settings"
    assert layer_of(f"{PACKAGE}.ranking.stage") > layer_of(f"{PACKAGE}.core.example")  # would be reported
    assert layer_of(PACKAGE) == len(LAYERS)  # the public re-exports: right of every layer


def test_no_import_against_the_layers() -> None:
    wrong = []
    for module in modules():
        own = layer_of(module)
        if own == len(LAYERS):
            continue  # the top level re-exports
        for target, line in imports_of(module):
            if layer_of(target) > own:
                wrong.append(f"{_short(module)}:{line} imports {_short(target)} (a layer to its right)")
    order = " -> ".join(", ".join(layer) for layer in LAYERS)
    assert not wrong, f"imports against the layer order {order}:\n" + "\n".join(sorted(set(wrong)))


def test_the_package_never_imports_what_is_outside_the_wheel() -> None:
    wrong = []
    for module, path in modules().items():
        for name, line in imported_names(
            path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"
        ):
            if name.split(".")[0] in OUTSIDE_THE_WHEEL:
                wrong.append(f"{_short(module)}:{line} imports {name}")
    assert not wrong, "the package imports code that is not in the wheel:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle() -> None:
    graph = import_graph()
    cycles = [" -> ".join(map(_short, _cycle_in(c, graph))) for c in strongly_connected(graph)]
    assert not cycles, "import cycles (deferred imports included):\n" + "\n".join(cycles)


#: What only training needs: the verifier's runtime (loading a folder, scoring, deciding) never reaches it.
TRAINING_MODULES = ("verifier.training", "verifier.pairs", "verifier.archive", "verifier.domain", "verifier.suggest")


def test_the_verifier_runtime_needs_no_training_module() -> None:
    graph = import_graph()
    seen, todo = set(), ["llama_index_carag.verifier.model"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    reached = sorted(_short(m) for m in seen if _short(m) in TRAINING_MODULES)
    assert not reached, f"loading a verifier imports training modules: {reached}"


def test_cycle_finder_sees_a_cycle() -> None:
    """The check above can fail: a made-up graph with one cycle and one chain."""
    graph = {
        "a": frozenset({"b"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a"}),
        "d": frozenset({"a"}),
        "e": frozenset(),
    }
    components = strongly_connected(graph)
    assert components == [["a", "b", "c"]]
    assert _cycle_in(components[0], graph) == ["a", "b", "c", "a"]


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    end = node.end_lineno or node.lineno
    lines = end - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def test_no_function_over_the_limit() -> None:
    long = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = _function_lines(node)
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{_short(module)}.{node.name} (line {node.lineno}): {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (docstring excluded):\n" + "\n".join(long)


def test_no_module_over_the_limit() -> None:
    import warnings

    long, advised = [], []
    for module, path in modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{_short(module)}: {lines} lines")
        elif lines > ADVISED_MODULE_LINES:
            advised.append(f"{_short(module)}: {lines} lines")
    if advised:
        warnings.warn(f"modules over {ADVISED_MODULE_LINES} lines (advice): " + ", ".join(advised), stacklevel=1)
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)
