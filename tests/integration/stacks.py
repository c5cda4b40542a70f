"""The test stacks (``tests/stacks/<name>/stack.yaml``: a spec's image and what its verification must show) and the
check of a build against one: what test_jax.py and test_tensorflow.py each wrote out as literals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envkit.engine.protocol import RunOptions
from envkit.frameworks import framework
from envkit.lock import LockedImage

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "tests" / "stacks"
KEYS = {"spec", "image", "framework", "checks", "train_device", "facts", "facts_from_lock", "facts_from_packages",
        "python_from_lock", "labels_from_lock", "labels_absent", "absent_modules"}
REQUESTED = "requested_imports"  # passes when the spec asks for pip: packages, else skipped


@dataclass(frozen=True)
class Stack:
    name: str
    doc: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.doc[key]

    @property
    def spec(self) -> Path:
        return ROOT / self.doc["spec"]

    @property
    def lock(self) -> Path:
        return self.spec.with_suffix(".lock")


def load_stack(name: str) -> Stack:
    doc = yaml.safe_load((STACKS / name / "stack.yaml").read_text())
    unknown = set(doc) - KEYS
    if unknown:
        raise ValueError(f"tests/stacks/{name}/stack.yaml: unknown keys {sorted(unknown)} (known: {sorted(KEYS)})")
    doc.setdefault("python_from_lock", False)
    return Stack(name, doc)


def stack_names() -> list[str]:
    return sorted(p.parent.name for p in STACKS.glob("*/stack.yaml"))


def check_verified(stack: Stack, image: dict, locked: LockedImage, engine: Any) -> None:
    """``image`` (one entry of `envkit build --json`'s images) built and verified as ``stack`` says, with every GPU-only
    check skipped (no GPU here); its labels, user and environment on ``engine``; nothing but the lock's closure."""
    gpu_checks = framework(stack["framework"]).gpu_checks
    assert image["name"] == stack["image"] and image["action"] in ("built", "skipped")
    assert image["status"] == "verified"
    verification = image["verification"]
    checks = {c["name"]: c for c in verification["checks"]}
    assert [c["name"] for c in verification["checks"]] == list(stack["checks"]) + list(gpu_checks)
    for name in stack["checks"]:
        want = ("passed" if locked.requested else "skipped") if name == REQUESTED else "passed"
        assert checks[name]["status"] == want, checks[name]
    train = checks["cpu_train_step"]["value"]
    device = stack["train_device"]
    assert train["device"] == device["exact"] if "exact" in device else train["device"].startswith(device["prefix"])
    assert train["last_loss"] <= 0.5 * train["first_loss"]
    for name in gpu_checks:  # no GPU here: skipped, never passed
        assert (checks[name]["status"], checks[name]["message"]) == ("skipped", "no CUDA device visible"), name
    facts = verification["facts"]
    for key, value in stack["facts"].items():
        assert facts[key] == value, (key, facts.get(key))
    for key, field in stack["facts_from_lock"].items():
        assert facts[key] == getattr(locked, field), (key, facts.get(key))
    packages = {p.name: p.version for p in locked.packages}
    for key, package in stack["facts_from_packages"].items():
        assert facts[key] == packages[package], (key, facts.get(key))
    if stack["python_from_lock"]:
        assert facts["python"].rsplit(".", 1)[0] == locked.python

    info = engine.inspect(image["tag"])
    for label, form in stack["labels_from_lock"].items():
        assert info.labels[label] == form.format(**{k: getattr(locked, k) for k in _fields(form)}), label
    for label in stack["labels_absent"]:
        assert label not in info.labels, label
    assert info.env["NVIDIA_REQUIRE_CUDA"] == locked.require_cuda
    assert info.user.startswith("1000")
    modules = stack["absent_modules"]
    found = engine.run(image["tag"], ["python3", "-c", "import importlib.util as u; print("
                                      + ", ".join(f"u.find_spec({m!r})" for m in modules) + ")"],
                       RunOptions(timeout=60))
    assert found.stdout.strip() == " ".join(["None"] * len(modules))


def _fields(form: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(form) if name]
