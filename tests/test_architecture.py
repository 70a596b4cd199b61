"""The package's layering, read from its source with ``ast`` (nothing is imported):

- each part of the package (a subpackage, or ``memory`` and ``errors`` at the top) imports
  only the parts below it (:data:`ALLOWED`);
- no import cycle between the package's modules, counting every import: at module level,
  inside functions (lazy) and under ``TYPE_CHECKING``;
- no module (the benchmarks included: they measure what a user can call) touches a private
  member (``obj._name``) that another module of the package defines: modules talk through public operations (memory's
  namespaces through forest.py's :class:`Forest`, the insert graph through its
  ``InsertHost``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "langchain_membrain"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
#: namedtuple's public API is spelled with an underscore.
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(ROOT.rglob("*.py"))}


def packages() -> set[str]:
    return {module_name(p) for p in ROOT.rglob("__init__.py")}


def imported(name: str, tree: ast.Module, known: set[str], *, is_package: bool = False) -> set[str]:
    """The package modules ``name`` imports anywhere in its source. ``from .x import y``
    names the submodule ``x.y`` when there is one, else ``x`` itself."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{alias.name}" for alias in node.names} & known
            out |= subs or ({target} & known)
    out.discard(name)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def private_names_defined(tree: ast.Module) -> set[str]:
    """Private names a module gives its classes and objects: ``self._x = ...``, class
    attributes and methods named ``_x``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("_"):
            out.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def foreign_private_uses(name: str, tree: ast.Module, others: dict[str, set[str]]) -> list[str]:
    """``obj._x`` in module ``name`` where ``obj`` is not ``self``/``cls`` and ``_x`` is a
    private name of another module of the package, not of this one."""
    own = private_names_defined(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if node.attr in own or node.attr in NAMEDTUPLE_API:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        owners = sorted(m for m, names in others.items() if m != name and node.attr in names)
        if owners:
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)} (defined in {', '.join(owners)})")
    return found


def test_the_package_imports_no_module_in_a_cycle():
    trees, inits = modules(), packages()
    graph = {name: imported(name, tree, set(trees), is_package=name in inits) for name, tree in trees.items()}
    assert graph[f"{PACKAGE}.memory.parts"] >= {f"{PACKAGE}.storage.forest", f"{PACKAGE}.insert.graph"}  # the reader works
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


#: The layers: each part of the package and the parts it may import (README, Code layout).
#: A part is a subpackage or a top-level module; the root ``__init__`` may import them all.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "tree": {"errors"},
    "index": {"errors"},
    "teachers": {"errors", "tree"},
    "storage": {"errors", "tree", "index"},
    "students": {"errors", "tree", "index", "teachers"},
    "retrieval": {"errors", "tree", "index", "storage", "teachers"},
    "insert": {"errors", "tree", "index", "storage", "teachers", "students"},
    "memory": {"errors", "tree", "index", "storage", "teachers", "students", "retrieval", "insert"},
    "integrations": {"errors", "tree", "index", "storage", "teachers", "students", "retrieval", "insert", "memory"},
    "bench": {"errors", "tree", "index", "storage", "teachers", "students", "retrieval", "insert", "memory",
              "integrations"},
    "cli": {"errors", "tree", "index", "storage", "teachers", "students", "retrieval", "insert", "memory",
            "integrations", "bench"},
}


def part(module: str) -> str:
    """The layer a module belongs to: its subpackage, or itself at the top level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_across_layers(graph: dict[str, set[str]]) -> list[str]:
    """Every import from one part to another that ALLOWED does not name."""
    found = []
    for name, targets in sorted(graph.items()):
        here = part(name)
        for target in sorted(targets):
            there = part(target)
            if here != "__init__" and there != here and there not in ALLOWED.get(here, set()):
                found.append(f"{name} -> {target}")
    return found


def test_every_part_of_the_package_has_its_allowed_imports():
    top = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"} | {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert top == set(ALLOWED), "a new part: say what it may import"


def test_imports_go_only_down_the_layers():
    trees, inits = modules(), packages()
    graph = {name: imported(name, tree, set(trees), is_package=name in inits) for name, tree in trees.items()}
    assert imports_across_layers(graph) == []


def test_the_layer_check_sees_an_import_upward():
    graph = {"langchain_membrain.tree.nodes": {"langchain_membrain.insert.config"},
             "langchain_membrain.insert.config": {"langchain_membrain.tree.nodes"}}
    assert imports_across_layers(graph) == ["langchain_membrain.tree.nodes -> langchain_membrain.insert.config"]


def test_the_cycle_finder_sees_a_lazy_and_a_type_checking_import():
    source = {"p.a": "def f():\n    from . import b\n",
              "p.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n",
              "p.c": "from .a import f\n"}
    graph = {n: imported(n, ast.parse(s), set(source)) for n, s in source.items()}
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
    assert find_cycle(graph) == ["p.a", "p.b", "p.a"]
    assert find_cycle({"p.a": {"p.b"}, "p.b": set(), "p.c": {"p.a"}}) is None


@pytest.mark.parametrize("module", sorted(name.removeprefix(PACKAGE + ".") for name in modules() if name != PACKAGE))
def test_modules_use_no_private_member_of_another_module(module):
    trees = modules()
    others = {name: private_names_defined(tree) for name, tree in trees.items()}
    name = f"{PACKAGE}.{module}"
    assert foreign_private_uses(name, trees[name], others) == []


def test_the_private_access_check_sees_a_reach_into_another_module():
    graph_src = ast.parse("def node(mem):\n    return mem._mutate(1)\n")
    memory_src = ast.parse("class M:\n    def _mutate(self, x):\n        return x\n")
    others = {"p.graph": private_names_defined(graph_src), "p.memory": private_names_defined(memory_src)}
    assert foreign_private_uses("p.graph", graph_src, others) == ["p.graph:2: mem._mutate (defined in p.memory)"]


# ------------------------------------------------------------------ size limits
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
#: Functions allowed over MAX_FUNCTION_LINES, each with the reason it reads best as one piece.
LONG_FUNCTIONS: dict[str, str] = {}


def long_functions(tree: ast.Module, limit: int) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function in ``tree`` longer than ``limit`` lines,
    a function's lines running from its ``def`` to its last statement."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = (child.end_lineno or child.lineno) - child.lineno + 1
                    if lines > limit:
                        out.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def test_no_module_is_longer_than_the_limit():
    too_long = {p.relative_to(ROOT.parent).as_posix(): n for p in sorted(ROOT.rglob("*.py"))
                if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert too_long == {}


def test_no_function_is_longer_than_the_limit_unless_named():
    found = {f"{name}.{fn}": n for name, tree in modules().items() for fn, n in long_functions(tree, MAX_FUNCTION_LINES)}
    assert {k: v for k, v in found.items() if k not in LONG_FUNCTIONS} == {}
    assert set(LONG_FUNCTIONS) <= set(found), "an exception that is no longer needed"


def test_the_length_check_sees_a_long_method():
    source = "class A:\n    def f(self):\n" + "        x = 1\n" * 5 + "def g():\n    pass\n"
    assert long_functions(ast.parse(source), 4) == [("A.f", 6)]


# ------------------------------------------------------------------ class sizes
MAX_METHODS = 30
MAX_MUTABLE_FIELDS = 12
#: Classes allowed over MAX_METHODS, each with its reason (none today).
LARGE_CLASSES: dict[str, str] = {}
#: Mutable dataclasses allowed over MAX_MUTABLE_FIELDS, each with its reason (none today).
LARGE_RECORDS: dict[str, str] = {}


def class_sizes(trees: dict[str, ast.Module]) -> tuple[dict[str, int], dict[str, int]]:
    """(methods defined in each class's own body, fields of each mutable dataclass), keyed
    by ``module.Class`` without the package prefix."""
    methods, fields = {}, {}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            key = f"{name.removeprefix(PACKAGE + '.')}.{node.name}"
            methods[key] = sum(isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef)) for x in node.body)
            for d in node.decorator_list:
                call = d if isinstance(d, ast.Call) else None
                target = call.func if call else d
                if isinstance(target, ast.Name) and target.id == "dataclass":
                    frozen = call is not None and any(k.arg == "frozen" and getattr(k.value, "value", False)
                                                      for k in call.keywords)
                    if not frozen:
                        fields[key] = sum(isinstance(x, ast.AnnAssign) for x in node.body)
    return methods, fields


def test_no_class_has_more_methods_than_the_limit_unless_named():
    methods, _ = class_sizes(modules())
    large = {k for k, n in methods.items() if n > MAX_METHODS}
    assert large - set(LARGE_CLASSES) == set()
    assert set(LARGE_CLASSES) <= large, "an exception that is no longer needed"


def test_no_mutable_dataclass_has_more_fields_than_the_limit_unless_named():
    _, fields = class_sizes(modules())
    large = {k for k, n in fields.items() if n > MAX_MUTABLE_FIELDS}
    assert large - set(LARGE_RECORDS) == set()
    assert set(LARGE_RECORDS) <= large, "an exception that is no longer needed"


def test_the_size_check_counts_methods_and_mutable_fields():
    source = "@dataclass\nclass A:\n    x: int\n    y: int\n    def f(self):\n        pass\n" \
             "@dataclass(frozen=True)\nclass B:\n    x: int\n"
    assert class_sizes({"p.m": ast.parse(source)}) == ({"p.m.A": 1, "p.m.B": 0}, {"p.m.A": 2})


# ---------------------------------------------------------------- nothing behind the user's back
#: The two lazy loaders (PEP 562) that keep ``import langchain_membrain`` and the teachers'
#: light modules from loading langchain-core, langgraph and openai (about 1.5 s).
LAZY_LOADERS = {"langchain_membrain", "langchain_membrain.teachers"}


def test_importing_the_package_adds_no_import_hook():
    import subprocess
    import sys

    code = ("import sys; before = list(sys.meta_path); import langchain_membrain, langchain_membrain.memory; "
            "print(sys.meta_path == before)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_package_inits_define_no_module_getattr_but_the_lazy_loaders():
    found = {module_name(p) for p in ROOT.rglob("__init__.py")
             if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                    for n in ast.parse(p.read_text()).body)}
    assert found == LAZY_LOADERS


def test_no_thread_local_state_but_the_storage_connections_and_a_cache():
    allowed = {f"{PACKAGE}.storage.sqlite", f"{PACKAGE}.storage.postgres", f"{PACKAGE}.index.lexical"}
    users = {name for name, tree in modules().items()
             if any(isinstance(n, ast.Attribute) and n.attr == "local" and isinstance(n.value, ast.Name)
                    and n.value.id == "threading" for n in ast.walk(tree))}
    assert users <= allowed, users - allowed


def test_no_private_member_of_the_standard_library_is_used():
    private = [(name, n.attr) for name, tree in modules().items() for n in ast.walk(tree)
               if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
               and n.value.id in ("threading", "sys", "os", "importlib") and n.attr.startswith("_")
               and not n.attr.startswith("__")]
    assert private == []


def test_the_product_code_cites_no_measurement_document_or_issue():
    """Docstrings and comments say what a thing is and why; when and how it was measured
    lives in bench/RESULTS.md and the CHANGELOG."""
    import re

    cite = re.compile(r"RESULTS\.md|\bissues? \d+")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted(ROOT.rglob("*.py")) if "bench" not in p.parts
             for i, line in enumerate(p.read_text().splitlines(), 1) if cite.search(line)]
    assert found == []
