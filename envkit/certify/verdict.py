"""The host's verdict on a payload document: ``decide`` re-derives the outcome from the payload's facts and checks
against the lock's expectations, by the rules of the lock's framework (``envkit/frameworks.py``: which versions
and how, GPU coverage by arch list or minimum compute capability, the GPU-only checks that must have passed), never
taking the payload's own status or its word on the framework; the requested packages are judged per package, and
the catalog's performance floors per GPU model. Outcomes: see ``certificate``."""

from __future__ import annotations

import re
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from ..catalog.files import load_catalog
from ..catalog.models import vtuple
from ..catalog.perf import floors_for
from ..errors import EnvkitError
from ..frameworks import REQUESTED, REQUESTED_CHECK, TORCH, Framework, Pin, of_expect
from ..payload.contents import SCHEMA
from ..payload.harness import RESERVE_S as HARNESS_RESERVE_S
from ..resolve.rules import covers

PAYLOAD_SCHEMA = SCHEMA  # what a payload document says it is ("envkit.payload/1")
Status = Literal["certified", "verified", "failed"]
CheckStatus = Literal["passed", "failed", "skipped"]


# Per framework (``envkit/frameworks.py``): the payload's GPU-only checks in run order, those that
# must have passed for ``certified`` (they prove the GPU really ran the stack), and those that can
# honestly pass with no device usable by the framework (the driver probe, NVML sampling). The
# framework is the lock's (the expect document), never the payload's word. PyTorch's, by name:
GPU_CHECKS = TORCH.gpu_checks
REQUIRED_GPU_CHECKS = TORCH.required_gpu_checks
DEVICELESS_GPU_CHECKS = TORCH.deviceless_gpu_checks
GPU_LIBRARIES = ("cuda", "cudnn", "nccl")  # a lock giving none of these means a CPU-only build
NO_GPU_REQUESTED = "certification asked for a GPU but none is visible in the container"
_ARCH = re.compile(r"^(sm|compute)_\d{2,3}[af]?$")


# ----------------------------------------------------------------------- the verdict
def _n(text: Any, parts: int) -> tuple[int, ...]:
    """The first ``parts`` integer components of a version, missing ones as 0."""
    nums = [int(x) for x in re.findall(r"\d+", str(text))]
    return tuple((nums + [0] * parts)[:parts])


def _public(version: Any) -> str:
    return str(version).partition("+")[0].strip()


def _same(have: Any, want: Any, pin: Pin) -> bool:
    if pin.public:
        try:
            return Version(_public(have)).public == Version(_public(want)).public
        except InvalidVersion:
            return _public(have) == _public(want)
    parts = pin.parts or max(len(re.findall(r"\d+", str(want))), len(re.findall(r"\d+", str(have))))
    return _n(want, parts) == _n(have, parts)


def _pin_reason(pin: Pin, want: Any, have: Any) -> str | None:
    """Why the image's ``have`` does not match the lock's ``want`` for one pin; None when it does."""
    if pin.public:  # a project's own version (torch, jax): compared when the lock gives one
        if want is not None and (have is None or not _same(have, want, pin)):
            return f"{pin.label}: the lock expects {want} but the image has {have or 'none'}"
        return None
    if want is None and (have is None or pin.key not in GPU_LIBRARIES):
        return None  # none expected and none found; or no Python pin given (an image without its label)
    if want is None:
        return f"{pin.label}: the lock expects none (CPU-only build) but the image has {have}"
    if have is None:
        return f"{pin.label}: the lock expects {want} but the image has none"
    if not _same(have, want, pin):
        how = f"the first {pin.parts} components" if pin.parts else "every component"
        return f"{pin.label}: the lock expects {want} but the image has {have} (compared on {how})"
    return None


def _compare_versions(facts: dict, expect: dict, fw: Framework) -> list[str]:
    reasons = []
    for pin in fw.pins:
        if pin.key not in expect:
            continue  # the lock says nothing: nothing to compare
        reason = _pin_reason(pin, expect[pin.key], facts.get(pin.key))
        if reason is not None:
            reasons.append(reason)
    if fw.coverage == "arch_list" and "arch_list" in expect:
        want = set(expect.get("arch_list") or [])
        have = set(facts.get("arch_list") or [])
        if want != have:
            reasons.append(f"arch list: the lock expects {' '.join(sorted(want)) or '(none)'} but {fw.name} was built "
                           f"for {' '.join(sorted(have)) or '(none)'}")
    return reasons


def _cc_of(gpu: dict) -> str | None:
    cc = str(gpu.get("cc") or "")
    if re.fullmatch(r"\d+\.\d+", cc):
        return cc

    try:
        arch = load_catalog().gpu(str(gpu.get("name") or ""))
    except Exception:
        return None
    return arch.cc if arch else None


def _coverage(facts: dict, expect: dict, fw: Framework) -> list[str]:
    """Every visible GPU must be covered: by the compiled arch list (torch: the lock's; tensorflow,
    whose lock carries none: the one the image reports from its build info), or by the framework
    build's minimum compute capability (jax: the catalog's min_cc, carried by the lock)."""
    if fw.coverage == "min_cc":
        floor = expect.get("min_cc")
        arches, shown = (), ""
    else:
        floor = None
        arch_list = expect["arch_list"] if "arch_list" in expect else facts.get("arch_list")
        arches = tuple(a for a in (arch_list or []) if _ARCH.match(str(a)))
        shown = " ".join(arch_list or []) or "(none)"
    reasons = []
    for gpu in facts.get("gpus") or []:
        name = gpu.get("name") or f"GPU {gpu.get('index', '?')}"
        cc = _cc_of(gpu)
        if cc is None:
            reasons.append(f"cannot tell the compute capability of {name} (reported cc {gpu.get('cc')!r})")
        elif fw.coverage == "min_cc":
            if floor is None:
                reasons.append(f"the lock gives no minimum compute capability for this {fw.title} build; "
                               f"cannot tell whether it runs on {name} (cc {cc})")
            elif vtuple(cc) < vtuple(str(floor)):
                reasons.append(f"{fw.title} build needs compute capability >= {floor}; {name} is cc {cc}")
        elif not covers(arches, cc, ptx_ok=True):
            reasons.append(f"arch list {shown} has no kernels for {name} (cc {cc})")
    return reasons


def _driver(facts: dict, expect: dict, gpus: list) -> list[str]:
    floor, driver = expect.get("driver_floor"), facts.get("driver")
    if not floor:
        return []
    if not driver:
        return [f"GPUs are visible but the driver version is unknown; cannot check the floor {floor}"] if gpus else []
    try:
        have, want = vtuple(str(driver)), vtuple(str(floor))
    except ValueError:
        return [f"driver version {driver!r} is not a dotted version; cannot compare it with the floor {floor}"]
    width = max(len(have), len(want))
    if have + (0,) * (width - len(have)) < want + (0,) * (width - len(want)):
        return [f"driver {driver} is below the lock's driver floor {floor}"]
    return []


def _catalog_floors(by_name: dict, expect: dict, gpus: list) -> list[str]:
    """The catalog's performance floors for GPU 0's model (``catalog/data/perf.yaml``; the probes measure on GPU 0)
    against what the payload measured; a key the lock sets in its own ``perf_floors`` is left to the payload,
    which judged it already. A value the payload did not report is not compared."""
    if not gpus:
        return []
    first = next((g for g in gpus if g.get("index") == 0), gpus[0])
    name = str(first.get("name") or "")
    floors, sources = floors_for(name)
    own = as_dict(expect.get("perf_floors"))
    measured = {k: v for c in by_name.values() if isinstance(c.get("value"), dict) for k, v in c["value"].items()}
    out = []
    for key, floor in floors.items():
        value = as_number(measured.get(key))
        if key not in own and value is not None and value < floor:
            out.append(f"{key} {value:g} on {name} is below the catalog's floor {floor:g} for that model "
                       f"(perf.yaml, from {', '.join(sources)}): the GPU runs slower than one of its kind should "
                       "(throttling, power or clock limits, another job on it)")
    return out


REQUESTED_STATUSES = ("ok", "failed", "no_modules")  # per package, in requested_imports' value


def _same_release(have: Any, want: Any) -> bool:
    """The same version, local tag included (the image installs exactly the lock's pin)."""
    try:
        return Version(str(have)) == Version(str(want))
    except InvalidVersion:
        return str(have).strip().lower() == str(want).strip().lower()


def _requested(by_name: dict, expect: dict) -> list[str]:
    """The lock's requested packages against the payload's per-package report (``requested_imports``): reported,
    not failed (the reason names the package and the error), at the lock's version. A failed check whose value
    names no failed package still fails, by its message."""
    check = by_name.get(REQUESTED_CHECK)
    generic = ([f"check {REQUESTED_CHECK} failed: {check.get('message') or '(no message)'}"]
               if check and check.get("status") == "failed" else [])
    wanted = expect.get(REQUESTED)
    if not wanted:
        return generic
    if not isinstance(wanted, dict):
        return [f"the lock's requested packages are not a mapping of names to versions: {str(wanted)[:80]}"]
    if check is None:
        return [f"the payload did not check the requested packages ({', '.join(wanted)}): no {REQUESTED_CHECK} check"]
    value = check.get("value") if isinstance(check.get("value"), list) else []
    reported = {e.get("name"): e for e in value if isinstance(e, dict)}
    reasons = []
    for name, want in wanted.items():
        entry = reported.get(name)
        if entry is None:
            reasons.append(f"requested package {name}: the payload reported nothing for it "
                           f"({REQUESTED_CHECK} {check.get('status')}: {check.get('message') or 'no message'})")
            continue
        status, have = entry.get("status"), entry.get("version")
        shown = f"{name} {have}" if have else name
        if status == "failed":
            reasons.append(f"requested package {shown} failed: {entry.get('error') or '(no error given)'}")
        elif status not in REQUESTED_STATUSES:
            reasons.append(f"requested package {shown} has unknown status {status!r}")
        elif want is not None and (have is None or not _same_release(have, want)):
            reasons.append(f"requested package {name}: the lock expects {want} but the image has {have or 'none'}")
    return reasons or generic


def _check_statuses(checks: list[dict]) -> list[str]:
    """Each failed check (the requested packages' apart: judged per package by ``_requested``) and unknown status."""
    reasons = []
    for c in checks:
        if c.get("name") == REQUESTED_CHECK and c.get("status") == "failed":
            continue  # judged per package (_requested)
        if c.get("status") == "failed":
            reasons.append(f"check {c.get('name')} failed: {c.get('message') or '(no message)'}")
        elif c.get("status") not in ("passed", "skipped"):
            reasons.append(f"check {c.get('name')} has unknown status {c.get('status')!r}")
    return reasons


def _timed_out(by_name: dict) -> str | None:
    """The reason when the payload stopped at its time limit, else None."""
    late = by_name.get("timeout", {})
    if late.get("status") != "failed":
        return None
    value = as_dict(late.get("value"))
    return (f"the payload stopped at its time limit while running {value.get('running') or 'setup'}, "
            "so the checks after it never ran; certify again with a longer --timeout "
            f"(the payload stops {HARNESS_RESERVE_S} s before it, to report)")


def _gpu_checks_missing(by_name: dict, fw: Framework, visible: int, *, gpu_requested: bool) -> list[str]:
    """With GPUs visible and asked for: each required GPU check that neither passed nor failed."""
    reasons = []
    for name in fw.required_gpu_checks:
        status = by_name.get(name, {}).get("status")
        if status != "passed" and gpu_requested and status != "failed":  # a failure is already a reason
            reasons.append(f"GPU check {name} did not pass ({status or 'not reported'}) although "
                           f"{visible} GPU(s) are visible")
    return reasons


def _gpu_claims_without_gpu(checks: list[dict], fw: Framework, *, verify: bool, gpu_requested: bool) -> list[str]:
    """With no GPU visible: GPUs asked for, and each GPU check that claims to have passed anyway."""
    reasons = [NO_GPU_REQUESTED] if gpu_requested else []
    for c in checks:
        name = c.get("name")
        if name in fw.gpu_checks and c.get("status") == "passed" and (verify or name not in fw.deviceless_gpu_checks):
            reasons.append(f"claims GPU check {name} passed with no GPU visible")
    return reasons


def decide(doc: dict, expect: dict, *, gpu_requested: bool) -> tuple[Status, tuple[str, ...]]:
    """The host's outcome for a payload document ``doc`` against the lock's ``expect``."""
    if not isinstance(doc, dict):
        return "failed", ("the payload's report is not a JSON object",)
    reasons: list[str] = []
    if doc.get("schema") != PAYLOAD_SCHEMA:
        reasons.append(f"the payload's report has schema {doc.get('schema')!r}, not {PAYLOAD_SCHEMA!r}")
    facts = as_dict(doc.get("facts"))
    checks = [c for c in doc.get("checks") or [] if isinstance(c, dict)]
    if not checks:
        reasons.append("the payload reported no checks")
    by_name = {c.get("name"): c for c in checks}
    gpus = [g for g in facts.get("gpus") or [] if isinstance(g, dict)]
    try:
        fw = of_expect(expect)
    except EnvkitError as exc:
        return "failed", (f"{exc.message}; the lock's expectations cannot be judged",)
    if not fw.builds:
        return "failed", (f"envkit does not verify {fw.title} images yet",)

    reasons += _check_statuses(checks)
    late = _timed_out(by_name)
    if late is not None:  # facts gathered after the stop are missing, not mismatched: say only why
        return "failed", tuple(dict.fromkeys([*reasons, late]))
    reasons += _requested(by_name, expect)
    reasons += _compare_versions(facts, expect, fw)
    reasons += fw.facts_rules(facts, expect)
    reasons += _coverage(facts, expect, fw)
    reasons += _driver(facts, expect, gpus)
    reasons += _catalog_floors(by_name, expect, gpus)
    if gpus:
        reasons += _gpu_checks_missing(by_name, fw, len(gpus), gpu_requested=gpu_requested)
    else:
        reasons += _gpu_claims_without_gpu(checks, fw, verify=doc.get("mode") != "certify",
                                           gpu_requested=gpu_requested)

    if not reasons and doc.get("status") == "failed":
        reasons.append("the payload reported failed although every check it listed held")
    if reasons:
        return "failed", tuple(dict.fromkeys(reasons))
    certified = bool(gpus) and all(by_name.get(n, {}).get("status") == "passed" for n in fw.required_gpu_checks)
    return ("certified" if certified else "verified"), ()


# ------------------------------------------------------------------------- building
def as_dict(x: Any) -> dict:
    """``x`` when the payload's document has an object there, else {} (a malformed value judged as missing)."""
    return x if isinstance(x, dict) else {}


def as_number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
