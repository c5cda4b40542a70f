"""envkit's import graph, read from the source with ``ast``: no cycle, and one direction.

Every ``import``/``from ... import`` of an envkit module counts: at the top of a module, inside a function, under
``if TYPE_CHECKING:`` or in a ``try:``. A deferred import still ties two modules together; it only hides the tie
from a reader (and from Python until the line runs), so it is no way around a cycle.

The stages are layered (``LAYERS``, lowest first): a module may import modules of its own layer or of a lower one,
never of a higher one. The order is the pipeline's (``docs/architecture.md``, "Stage order"):

    support < the documents (spec, lock, frameworks) < index, engine < catalog < resolve < payload < render
            < build < trust < certify < registry < store < ops < app < cli

A package's ``__init__.py`` holds no code (a docstring), so that importing one module of a package never runs its
siblings; ``envkit/__init__.py`` (the version) and ``envkit/cli/__init__.py`` (the ``envkit`` command, the entry
point ``envkit.cli:main``) are the two exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "envkit"

# Lowest first. A module belongs to the layer of the longest prefix naming it.
LAYERS: list[tuple[str, ...]] = [
    ("envkit", "envkit.errors"),  # the version; the error types and their exit codes
    ("envkit.support",),  # atomic writes, scratch directories, child processes, strict YAML, labels, ...
    ("envkit.spec", "envkit.spec_dispatch", "envkit.lock", "envkit.frameworks", "envkit.devel"),  # team.yaml (and
    # its dispatch:), team.lock, what differs per framework, what a locked devel image holds
    ("envkit.index",),  # the package index (client, logins, wheel facts, uv's closure)
    ("envkit.engine",),  # the container engine (the only home of docker-py)
    ("envkit.catalog",),  # the compatibility catalog (and its refresh from the index)
    ("envkit.resolve",),  # spec + catalog + index -> lock
    ("envkit.payload",),  # the in-image check: its files, its expectations, running it
    ("envkit.render",),  # lock -> build contexts
    ("envkit.images",),  # contexts -> images (bases, builders, offline bundles)
    ("envkit.trust",),  # keys, cosign signatures, in-toto attestations in DSSE envelopes, their verification
    ("envkit.certify",),  # the host's verdict, certificates, reports, the run gate
    ("envkit.dispatch",),  # fleet jobs through the team's scheduler (Slurm): jobs, states, runner, fleet verdict
    ("envkit.registry",),  # publish to and read from the team registry, retention
    ("envkit.store",),  # the history store
    ("envkit.ops",),  # gc and doctor
    ("envkit.app",),  # the use cases the CLI calls (resolve, build, certify, nightly, ls/show/run, catalog)
    ("envkit.cli",),  # parse, call, format
]
INIT_WITH_CODE = {"envkit", "envkit.cli"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of envkit: dotted name -> (file, is a package)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


MODULES = _modules()


def _target(name: str) -> str | None:
    """The envkit module ``name`` is, or is in (an attribute of it), else None."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def imports(module: str) -> dict[str, int]:
    """The envkit modules ``module`` imports, anywhere in its source, each with the first line that does."""
    path, package = MODULES[module]
    here = module.split(".") if package else module.split(".")[:-1]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            # `from package import module` imports the module; `from module import name`, the module
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            target = _target(name) if name.split(".")[0] == "envkit" else None
            if target is not None and target != module:
                out.setdefault(target, node.lineno)
    return out


GRAPH = {m: imports(m) for m in MODULES}


def layer_of(module: str) -> int:
    best, index = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    if index is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS (and docs/architecture.md)")
    return index


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks(tmp_path, monkeypatch):
    """The reader itself: a deferred import and a TYPE_CHECKING one are edges like any other."""
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .lock import Lock\n"
           "def f():\n    from .support import atomic\n    import envkit.errors\n")
    (tmp_path / "probe.py").write_text(src)
    monkeypatch.setitem(MODULES, "envkit.probe", (tmp_path / "probe.py", False))
    assert set(imports("envkit.probe")) == {"envkit.lock", "envkit.support.atomic", "envkit.errors"}


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_cycle():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles (move the fact both need below both, do not hide the import):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_no_module_imports_a_later_stage():
    wrong = [f"{MODULES[m][0].relative_to(ROOT)}:{line}: {m} ({LAYERS[layer_of(m)][0]}) imports {t} "
             f"({LAYERS[layer_of(t)][0]})"
             for m, targets in sorted(GRAPH.items()) for t, line in sorted(targets.items())
             if layer_of(t) > layer_of(m)]
    assert not wrong, "imports against the stage order (lower layers may not import higher ones):\n" + "\n".join(wrong)


@pytest.mark.parametrize("module", sorted(m for m, (_, package) in MODULES.items() if package))
def test_a_package_init_holds_no_code(module):
    if module in INIT_WITH_CODE:
        return
    path = MODULES[module][0]
    body = ast.parse(path.read_text()).body
    code = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert not code, f"{path.relative_to(ROOT)} holds code (line {code[0].lineno}): put it in a module of the package"


def _reached(module: str) -> set[str]:
    """Every envkit module ``module`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in GRAPH[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("stage", ["envkit.render", "envkit.images"])
def test_render_and_build_read_the_lock_not_the_resolver(stage):
    """A lock carries every fact its build needs (issue 33): render and the builders import nothing of
    ``envkit.resolve``, not even through another module."""
    wrong = sorted(f"{m} reaches {t}" for m in MODULES if m == stage or m.startswith(stage + ".")
                   for t in _reached(m) if t == "envkit.resolve" or t.startswith("envkit.resolve."))
    assert not wrong, "render and build must read facts from the lock, not from resolve/:\n" + "\n".join(wrong)
