"""The test stacks (``tests/stacks/<name>/stack.yaml``) and the checks of a build against one. Two kinds:
- a runtime stack: a spec's image and what its verification must show (``check_verified``: what test_jax.py and
  test_tensorflow.py each wrote out as literals);
- a devel stack (``flavour: devel``): a spec's image built as its devel flavour, the compiler wheels its lock must
  hold (``check_compiler``) and the probes that must compile and run in it with no network (``run_probe``, the files
  of tests/stacks/probes/ at /src): what test_devel_cuda13.py and test_devel_jax.py (gone) each wrote out as
  literals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envkit import devel as held  # what a locked devel image holds
from envkit.engine.protocol import Mount, RunOptions
from envkit.frameworks import framework
from envkit.lock import LockedImage

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "tests" / "stacks"
KEYS = {"spec", "image", "framework", "checks", "train_device", "facts", "facts_from_lock", "facts_from_packages",
        "python_from_lock", "labels_from_lock", "labels_absent", "absent_modules"}
DEVEL_KEYS = {"spec", "image", "flavour", "after", "verify", "compiler", "probes"}
PROBE_KEYS = {"name", "run", "env", "timeout", "stdout", "output"}
PROBES = STACKS / "probes"
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

    @property
    def flavour(self) -> str:
        return self.doc.get("flavour", "runtime")


def load_stack(name: str) -> Stack:
    doc = yaml.safe_load((STACKS / name / "stack.yaml").read_text())
    known = DEVEL_KEYS if doc.get("flavour") == "devel" else KEYS
    unknown = set(doc) - known | {k for p in doc.get("probes") or () for k in set(p) - PROBE_KEYS}
    if unknown:
        raise ValueError(f"tests/stacks/{name}/stack.yaml: unknown keys {sorted(unknown)} (known: {sorted(known)}; "
                         f"a probe's: {sorted(PROBE_KEYS)})")
    if known is KEYS:
        doc.setdefault("python_from_lock", False)
    else:
        doc.setdefault("after", None)
    return Stack(name, doc)


def stack_names(flavour: str = "runtime") -> list[str]:
    """The stacks of ``flavour`` (runtime | devel)."""
    return sorted(name for name in (p.parent.name for p in STACKS.glob("*/stack.yaml"))
                  if load_stack(name).flavour == flavour)


def devel_probes() -> list[tuple[str, str]]:
    """(stack, probe name) of every devel stack's probes."""
    return [(name, p["name"]) for name in stack_names("devel") for p in load_stack(name)["probes"]]


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


def check_compiler(stack: Stack, image: LockedImage) -> None:
    """The compiler's wheels ``image`` (a devel flavour) locks are the stack's, each in its group and, where it says
    so, of the image's CUDA release (major.minor)."""
    pins = {p.name: p for p in held.packages(image)}
    assert set(pins) == set(stack["compiler"]), sorted(pins)
    for name, want in stack["compiler"].items():
        assert pins[name].group == want["group"], (name, pins[name].group)
        assert pins[name].version.startswith(image.cuda_major_minor + ".") == want["on_release"], \
            (name, pins[name].version, image.cuda_major_minor)


def run_probe(stack: Stack, probe_name: str, image: LockedImage, tag: str, engine: Any, src: Path) -> None:
    """The stack's probe ``probe_name`` run in ``tag`` with no network, tests/stacks/probes/ (copied to ``src``,
    readable by the image's user) at /src: it exits 0 and says what the stack expects (``{cuda_major_minor}`` and
    ``{nvcc}``, the locked nvcc's version, filled in) on stdout, or on stdout and stderr together (``output``)."""
    import os
    import shutil

    [probe] = [p for p in stack["probes"] if p["name"] == probe_name]
    shutil.copytree(PROBES, src)
    os.chmod(src, 0o755)
    result = engine.run(tag, ["bash", "-c", probe["run"]],
                        RunOptions(timeout=probe.get("timeout", 300), network=False, env=probe.get("env") or {},
                                   mounts=(Mount(str(src), "/src", read_only=True),)))
    said = result.stdout + result.stderr
    assert result.exit_code == 0, said[-4000:]
    nvcc = next((p.version for p in held.packages(image) if p.name.startswith("nvidia-cuda-nvcc")), "")
    fields = {"cuda_major_minor": image.cuda_major_minor, "nvcc": nvcc}
    for text in probe.get("stdout") or ():
        assert text.format(**fields) in result.stdout, (text.format(**fields), said[-4000:])
    for text in probe.get("output") or ():
        assert text.format(**fields) in said, (text.format(**fields), said[-4000:])
