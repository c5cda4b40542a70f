"""tests/stacks/<name>/stack.yaml, the test stacks as data (issue 33, item 6), held to what they name without an
engine: the spec and its committed lock, the image, the framework, the payload's checks in its own registry's order,
the locked fields and packages the facts are compared with. And ``stacks.check_verified`` (what the integration tests
run on a real build) passes a build that shows what the stack says and fails one that does not (fakes: pure logic)."""

from __future__ import annotations

import copy
import string
from types import SimpleNamespace

import pytest

from envkit import frameworks
from envkit.engine.protocol import ImageInfo
from envkit.lock import load_lock
from tests.integration.stacks import (
    DEVEL_KEYS,
    KEYS,
    PROBES,
    check_compiler,
    check_verified,
    devel_probes,
    load_stack,
    stack_names,
)
from tests.unit.payload_modules import payload_module

NAMES = stack_names()


DEVEL = stack_names("devel")


def test_the_stacks_are_found():
    assert NAMES == ["jax", "tf"] and DEVEL == ["jax-devel", "torch-devel", "torch25-devel"]


@pytest.mark.parametrize("name", NAMES)
def test_a_stack_names_what_is_there(name):
    stack = load_stack(name)
    assert set(stack.doc) == KEYS
    locked = load_lock(stack.lock).image(stack["image"])  # the spec's committed lock holds the image
    assert stack.spec.is_file() and locked.framework == stack["framework"]
    registry = payload_module("envkit_check_main").framework_module(stack["framework"]).REGISTRY
    assert tuple(stack["checks"]) == tuple(n for n, _, gpu_only in registry if not gpu_only)
    assert "cpu_train_step" in stack["checks"] and len(stack["train_device"]) == 1
    for field in stack["facts_from_lock"].values():
        assert hasattr(locked, field), field
    assert set(stack["facts_from_packages"].values()) <= {p.name for p in locked.packages}
    for form in stack["labels_from_lock"].values():
        assert all(hasattr(locked, f) for _, f, _, _ in string.Formatter().parse(form) if f), form


class Engine:
    """The image as the stack says it is: its labels, and a closure without the absent modules."""

    def __init__(self, labels: dict[str, str], env: dict[str, str], modules: int):
        self.labels, self.env, self.modules = labels, env, modules

    def inspect(self, ref):
        return ImageInfo("sha256:x", (ref,), 1, self.labels, self.env, "1000:1000")

    def run(self, ref, command, options):
        return SimpleNamespace(exit_code=0, stdout=" ".join(["None"] * self.modules) + "\n", stderr="")


def _build_as_said(name: str):
    """An `envkit build --json` image entry, and an engine, that show exactly what the stack says."""
    stack = load_stack(name)
    locked = load_lock(stack.lock).image(stack["image"])
    gpu = frameworks.framework(stack["framework"]).gpu_checks
    device = stack["train_device"].get("exact") or stack["train_device"]["prefix"] + ":0"
    checks = [{"name": n, "status": "skipped" if n == "requested_imports" and not locked.requested else "passed",
               "message": "", "value": {"device": device, "first_loss": 2.0, "last_loss": 0.5}
               if n == "cpu_train_step" else None} for n in stack["checks"]]
    checks += [{"name": n, "status": "skipped", "message": "no CUDA device visible"} for n in gpu]
    packages = {p.name: p.version for p in locked.packages}
    facts = {**stack["facts"], **{k: getattr(locked, f) for k, f in stack["facts_from_lock"].items()},
             **{k: packages[p] for k, p in stack["facts_from_packages"].items()}, "python": locked.python + ".7"}
    image = {"name": stack["image"], "tag": "multi/x:1", "action": "built", "status": "verified",
             "verification": {"checks": checks, "facts": facts}}
    labels = {label: form.format(**{f: getattr(locked, f) for _, f, _, _ in string.Formatter().parse(form) if f})
              for label, form in stack["labels_from_lock"].items()}
    engine = Engine(labels, {"NVIDIA_REQUIRE_CUDA": locked.require_cuda}, len(stack["absent_modules"]))
    return stack, image, locked, engine


@pytest.mark.parametrize("name", NAMES)
def test_check_verified_passes_a_build_as_the_stack_says_and_fails_any_difference(name):
    stack, image, locked, engine = _build_as_said(name)
    check_verified(stack, image, locked, engine)
    wrong_fact = copy.deepcopy(image)
    wrong_fact["verification"]["facts"]["cudnn"] = "0.0"
    wrong_check = copy.deepcopy(image)
    wrong_check["verification"]["checks"][0]["status"] = "failed"
    gpu_ran = copy.deepcopy(image)
    gpu_ran["verification"]["checks"][-1]["status"] = "passed"
    for bad in (wrong_fact, wrong_check, gpu_ran):
        with pytest.raises(AssertionError):
            check_verified(stack, bad, locked, engine)
    first_label = next(iter(stack["labels_from_lock"]))
    with pytest.raises(AssertionError):
        check_verified(stack, image, locked, Engine({**engine.labels, first_label: "other"}, engine.env,
                                                    engine.modules))
    with pytest.raises(AssertionError):  # a module the closure must not hold is there
        check_verified(stack, image, locked, Engine(engine.labels, engine.env, engine.modules - 1))


@pytest.mark.network  # (the devel group is locked as the resolver locks it: uv asks the package index)
@pytest.mark.parametrize("name", DEVEL)
def test_a_devel_stack_names_what_is_there(name):
    """Its spec's lock holds the image, its devel flavour locks exactly the compiler it lists (``check_compiler``,
    on the flavour as the resolver locks it), its ``after`` is a fixture, and its probes name files that exist."""
    from envkit.lock import sealed
    from envkit.resolve import devel
    from tests.integration import conftest

    stack = load_stack(name)
    assert set(stack.doc) == DEVEL_KEYS and stack["verify"] in (True, False)
    image = sealed(devel.as_devel(load_lock(stack.lock).image(stack["image"])))
    check_compiler(stack, image)
    assert stack["after"] is None or hasattr(conftest, stack["after"])
    for probe in stack["probes"]:
        assert {"name", "run"} <= set(probe) and (probe.get("stdout") or probe.get("output")), probe
        for word in probe["run"].split():
            if word.startswith("/src/"):
                assert (PROBES / word.removeprefix("/src/")).is_file(), word


@pytest.mark.network
def test_check_compiler_fails_a_lock_that_differs():
    from envkit.lock import sealed
    from envkit.resolve import devel

    stack = load_stack("torch-devel")
    image = sealed(devel.as_devel(load_lock(stack.lock).image(stack["image"])))
    moved = copy.deepcopy(stack.doc)
    moved["compiler"]["nvidia-nvvm"]["group"] = "framework"
    off_release = copy.deepcopy(stack.doc)
    off_release["compiler"]["nvidia-nvvm"]["on_release"] = False
    missing = copy.deepcopy(stack.doc)
    del missing["compiler"]["nvidia-nvvm"]
    for doc in (moved, off_release, missing):
        with pytest.raises(AssertionError):
            check_compiler(type(stack)(stack.name, doc), image)


def test_every_probe_has_an_id():
    assert len(devel_probes()) == len(set(devel_probes())) >= len(DEVEL)
