"""The shape of envkit's source, read with ``ast``: small modules, docker-py behind the engine, one owner per fact.

The import graph's own rules (no cycle, the stage order, empty package ``__init__`` files) are
``test_import_graph.py``; ``docs/architecture.md`` ("Layout") says where each kind of code goes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "envkit"
MAX_LINES = 400
# The in-image payload is not envkit's code but a program run inside images (stdlib and the framework only, its
# modules named envkit_check_* on its own sys.path; docs/payload.md): its files are sized by their own checks, and
# its bytes are part of every build context's hash, so they are not cut to envkit's measure.
PAYLOAD = PACKAGE / "payload" / "envkit_check"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if PAYLOAD not in p.parents)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in SOURCES}


TREES = _trees()


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_no_module_is_over_the_limit(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (f"{_rel(path)} has {lines} lines (at most {MAX_LINES}): split it by responsibility "
                                "(docs/architecture.md, Layout)")


def test_the_limit_is_measured_on_every_module_but_the_payloads():
    assert len(SOURCES) > 80 and all(PAYLOAD not in p.parents for p in SOURCES)
    assert (PAYLOAD / "__main__.py").is_file()  # the payload is where this test says it is


def _imports(tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module, node.lineno))
    return found


def test_docker_py_is_imported_only_under_engine():
    """Every docker-py call is the engine adapter's: the rest of envkit sees engine/protocol.py's Engine."""
    engine = PACKAGE / "engine"
    outside = [f"{_rel(path)}:{line}: import {name}" for path, tree in TREES.items() if engine not in path.parents
               for name, line in _imports(tree) if name == "docker" or name.startswith("docker.")]
    assert not outside, "docker-py imported outside envkit/engine/:\n" + "\n".join(outside)


# --- one owner per fact -----------------------------------------------------------------------------------

def _owners(predicate) -> set[str]:
    """The modules (relative paths) with a node ``predicate`` holds for."""
    return {_rel(path) for path, tree in TREES.items() for node in ast.walk(tree) if predicate(node)}


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_nvidia_distribution_names_have_one_owner():
    """The patterns of the CUDA runtime's, cuDNN's and NCCL's wheels (index/wheel_facts.py)."""
    def pattern(node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args
                and any("nvidia-" in s for s in _strings(node.args[0])))
    assert _owners(pattern) == {"envkit/index/wheel_facts.py"}


def test_the_framework_list_has_one_owner():
    """The frameworks envkit knows are frameworks.FRAMEWORKS's entries (with their catalog file and extras); every
    list of them derives from it (``NAMES``, ``ARCH_LISTED``). A table with a row per framework is no list."""
    names = {"torch", "jax", "tensorflow"}

    def listed(node):
        return (isinstance(node, (ast.Tuple, ast.List, ast.Set))
                and names <= {i.value for i in node.elts if isinstance(i, ast.Constant)})
    assert not _owners(listed), "a literal list of the frameworks: derive it from envkit.frameworks.FRAMEWORKS"
    from envkit.frameworks import FRAMEWORKS
    assert set(FRAMEWORKS) == names


def test_the_certified_tag_has_one_owner():
    def assigned(node):
        return (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CERTIFIED_TAG"
                                                     for t in node.targets))

    def spelled(node):
        return isinstance(node, ast.Constant) and node.value == ":certified"
    assert _owners(assigned) == {"envkit/registry/remote_parse.py"} and not _owners(spelled)


def test_the_progress_type_has_one_owner():
    def defined(node):
        return (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "Progress" for t in node.targets))
    assert _owners(defined) == {"envkit/support/progress.py"}


def test_the_strict_pydantic_configuration_has_one_owner():
    """``extra="forbid"`` is support/models.py's Frozen and Strict, which every envkit document derives from."""
    def forbids(node):
        return (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ConfigDict"
                and any(k.arg == "extra" and getattr(k.value, "value", None) == "forbid" for k in node.keywords))
    assert _owners(forbids) == {"envkit/support/models.py"}
