"""envkit payload, framework-neutral core: the check result and the run's context, version and
compute-capability rules, installed distributions, the rules the frameworks share (timed matmul,
timed all-reduce and its verdict, the CPU train step), the checks every framework shares (Python,
pip, the CUDA libraries as wheels), and the payload's identity (version and sha256).

Standard library only (Python 3.9+); imports no framework and no other payload module. Reference:
docs/payload.md.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import platform
import re
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

SCHEMA = "envkit.payload/1"
PAYLOAD_VERSION = "2"  # 2: the payload is a directory of modules; sha256 covers every one (payload_sha256)
NO_GPU = "no CUDA device visible"
VERIFY_FORCED = "verify mode requested (--mode verify); GPU checks not run"
DEVICE_CHECKS = ("cuda_available", "gpu_devices")  # passed: the framework really had a GPU (torch; jax, tensorflow)
CUDA_DISTRIBUTIONS = {"cuda": r"nvidia-cuda-runtime(-cu\d+)?", "cudnn": r"nvidia-cudnn-cu\d+",
                      "nccl": r"nvidia-nccl-cu\d+"}  # the CUDA libraries as wheels (JAX, TensorFlow)
FRAMEWORK_NAMES = ("torch", "jax", "tensorflow")  # what an expect file's "framework" may name


@dataclasses.dataclass
class Check:
    """One check's result; the runner fills in name and seconds."""

    status: str  # "passed" | "failed" | "skipped"
    value: Any = None
    expected: Any = None
    message: str = ""
    name: str = ""
    seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "status": self.status, "value": self.value,
                "expected": self.expected, "message": self.message, "seconds": self.seconds}


@dataclasses.dataclass
class Context:
    """What checks read (and the runner's progress); one per run."""

    expect: Dict[str, Any]
    mode: str
    t0: float
    steps: Optional[int] = None
    framework: str = "torch"  # "torch" | "jax" | "tensorflow": which registry runs
    torch: Any = None
    jax: Any = None
    tf: Any = None
    gpu_devices: List[Any] = dataclasses.field(default_factory=list)  # jax.devices("gpu"), tf's physical GPUs
    build_info: Dict[str, Any] = dataclasses.field(default_factory=dict)  # tf.sysconfig.get_build_info()
    jax_log: Any = None  # envkit_check_jax.JaxLog: what jax logged while it looked for its GPU backend
    cuda_ok: bool = False
    facts: Dict[str, Any] = dataclasses.field(default_factory=dict)
    sampler: Any = None  # envkit_check_nvml.Sampler, in certify mode when NVML loads
    deadline: Optional[float] = None  # time.monotonic() when the watchdog fires (--timeout): checks with their own
                                      # timeouts stay inside it, so a hang fails that check, not the whole run
    results: List[Check] = dataclasses.field(default_factory=list)
    expect_file: Optional[str] = None  # the expect file read (--expect, or expect.json beside the payload)
    current: str = ""
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    done: bool = False


CheckFn = Callable[[Context], Check]
Registry = List[Tuple[str, CheckFn, bool]]  # (name, function, gpu_only), in run order: each framework's REGISTRY


# ------------------------------------------------------------------ identity
def payload_files(directory: str) -> List[str]:
    """The payload's files: every ``*.py`` directly in its directory, by name (``__pycache__`` is not one)."""
    return sorted(n for n in os.listdir(directory) if n.endswith(".py") and os.path.isfile(os.path.join(directory, n)))


def payload_sha256(directory: Optional[str] = None) -> str:
    """The payload's identity: sha256 over its files in name order, each fed as its name, a NUL byte and
    the sha256 digest of its bytes. The host computes it over its own copy with this same function."""
    directory = directory or os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in payload_files(directory):
        with open(os.path.join(directory, name), "rb") as f:
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


# ------------------------------------------------------------- the expect file
# Its keys by what each must hold (docs/payload.md, "The expect file"). A key left out skips its
# comparison; null is accepted only where it says something: none of that library (a CPU-only
# build, or not installed) or no floor.
EXPECT_VERSIONS = ("python", "torch", "jax", "jaxlib", "cuda_plugin", "tensorflow")  # a version string
EXPECT_NULLABLE = {"cuda": "none (a CPU-only build)", "cudnn": "none (a CPU-only build)",
                   "nccl": "none (a CPU-only build)", "arch_list": "none (a CPU-only build)",
                   "driver_floor": "no floor", "min_cc": "no floor", "perf_floors": "no floors"}
EXPECT_KEYS = ("framework", "requested") + EXPECT_VERSIONS + tuple(EXPECT_NULLABLE)
VERSION_TEXT = re.compile(r"\d+(\.\d+)*[0-9A-Za-z.+!_-]*")  # 3.11, 525.60.13, 2.5.1, 2.6.0.dev20241112+cu124
DISTRIBUTION = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # a canonical (PEP 503) distribution name


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def expect_problems(expect: Dict[str, Any]) -> List[str]:
    """What is wrong in an expect document, one sentence per key that names the key and its value
    (empty: nothing). The payload refuses such a file (exit 2) rather than compare against it."""
    problems = []
    for key, value in expect.items():
        if key not in EXPECT_KEYS:
            problem: Optional[str] = f"{key!r} is not a key the payload knows (known: {', '.join(EXPECT_KEYS)})"
        elif key == "framework":
            problem = (None if value in FRAMEWORK_NAMES
                       else f"framework {_shown(value)}: this payload checks {', '.join(FRAMEWORK_NAMES)} images")
        elif value is None and key in EXPECT_NULLABLE:
            problem = None
        else:
            problem = _VALUE_PROBLEMS.get(key, _version_problem)(key, f"{key} {_shown(value)}", value)
        if problem:
            problems.append(problem)
    return problems


def _requested_problem(key: str, shown: str, value: Any) -> Optional[str]:
    """The spec's pip: packages, each with the locked version (null: any)."""
    if not isinstance(value, dict):
        return f'{shown}: must be an object of distributions and versions such as {{"torchaudio": "2.5.1"}}'
    bad = [k for k, v in value.items() if not DISTRIBUTION.fullmatch(k) or not (
        v is None or isinstance(v, str) and VERSION_TEXT.fullmatch(v))]
    return f"{shown}: {', '.join(map(repr, bad))} not a canonical name with a version or null" if bad else None


def _arch_list_problem(key: str, shown: str, value: Any) -> Optional[str]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        return f'{shown}: must be a list of archs such as ["sm_80", "sm_90"], or null for none (a CPU-only build)'
    bad = [a for a in value if parse_arch(a) is None]
    return f"{shown}: {', '.join(map(_shown, bad))} not an arch (sm_XY, compute_XY)" if bad else None


def _perf_floors_problem(key: str, shown: str, value: Any) -> Optional[str]:
    if not isinstance(value, dict):
        return f'{shown}: must be an object of floors such as {{"bf16_matmul_tflops": 600}}, or null for no floors'
    bad = [k for k, v in value.items() if isinstance(v, bool) or not isinstance(v, (int, float))
           or not math.isfinite(v)]
    return f"{shown}: {', '.join(map(repr, bad))} not a finite number" if bad else None


def _version_problem(key: str, shown: str, value: Any) -> Optional[str]:
    if isinstance(value, str) and VERSION_TEXT.fullmatch(value):
        return None
    example = {"python": "3.11", "driver_floor": "525.60.13", "min_cc": "7.5"}.get(key, "2.5.1")
    return (f'{shown}: must be a version string such as "{example}"'
            + (f", or null for {EXPECT_NULLABLE[key]}" if key in EXPECT_NULLABLE
               else f" (leave {key} out to skip its comparison)"))


_VALUE_PROBLEMS: Dict[str, Callable[[str, str, Any], Optional[str]]] = {
    "requested": _requested_problem, "arch_list": _arch_list_problem, "perf_floors": _perf_floors_problem}


# ----------------------------------------------------------------- pure helpers
def ints(text: Any) -> List[int]:
    """Integer components of a dotted version: "580.65.06" -> [580, 65, 6]."""
    return [int(x) for x in re.findall(r"\d+", str(text))]


def padded(text: Any, n: int) -> List[int]:
    return (ints(text) + [0] * n)[:n]


def same_version(actual: Any, expected: Any, parts: int) -> bool:
    """Equal on the first `parts` numeric components (missing ones count as 0)."""
    return padded(actual, parts) == padded(expected, parts)


def driver_meets(driver: str, floor: str) -> bool:
    """Dotted-integer comparison: driver >= floor ("580" counts as "580.0.0")."""
    n = max(len(ints(driver)), len(ints(floor)))
    return padded(driver, n) >= padded(floor, n)


def parse_arch(arch: str) -> Optional[Tuple[str, Tuple[int, int], str]]:
    """ "sm_86" -> ("sm", (8, 6), ""); "compute_90a" -> ("compute", (9, 0), "a"); else None."""
    m = re.match(r"^(sm|compute)_(\d)(\d+)?(\d)([a-z]?)$", arch.strip())
    if not m:
        return None
    return m.group(1), (int(m.group(2) + (m.group(3) or "")), int(m.group(4))), m.group(5)


def arch_covers(arch_list: List[str], cc: Tuple[int, int]) -> bool:
    """sm_XY runs on cc X.y with y >= Y; compute_XY (PTX) JIT-compiles for any cc >= X.Y."""
    cc = (int(cc[0]), int(cc[1]))
    for kind, target, suffix in filter(None, map(parse_arch, arch_list or [])):
        if suffix == "a":  # arch-specific features: that exact cc only
            ok = target == cc
        elif kind == "sm" or suffix == "f":  # cubin (or family PTX): same major only
            ok = target[0] == cc[0] and target[1] <= cc[1]
        else:
            ok = target <= cc
        if ok:
            return True
    return False


def cc_at_least(cc: Any, floor: Any) -> bool:
    return padded(cc, 2) >= padded(floor, 2)


def finite(x: Any, digits: int = 6) -> Optional[float]:
    """A JSON-safe float: None for NaN/inf."""
    x = float(x)
    return round(x, digits) if math.isfinite(x) else None


def matmul_rate(window: Callable[[], float], n: int, iters: int, windows: int, warmup_s: float) -> float:
    """TFLOP/s of `iters` dense n x n matmuls (2*n^3 flops each) per `window()` (which returns its seconds):
    windows run as warm-up until `warmup_s` of them have passed and at least 5 ran (clocks up from idle, and
    a slow first window, e.g. kernels loaded lazily, does not end it; at most 100), then the median of
    `windows` timed ones."""
    spent, rounds = 0.0, 0
    while (spent < warmup_s or rounds < 5) and rounds < 100:
        spent, rounds = spent + window(), rounds + 1
    times = sorted(window() for _ in range(windows))
    return 2 * n**3 * iters / times[len(times) // 2] / 1e12


def allreduce_plan(world: int) -> Tuple[int, int]:
    """(float32 elements per device, timed iterations): 256 MiB x 10 for bandwidth; one device, 4 MiB once."""
    return (64 * 2**20, 10) if world > 1 else (2**20, 1)


def allreduce_rates(size: int, world: int, iters: int, seconds: float) -> Dict[str, float]:
    """Algorithm and bus bandwidth of `iters` all-reduces of `size` bytes per rank (nccl-tests:
    busbw = algbw*2*(n-1)/n)."""
    algbw = size * iters / seconds / 1e9
    return {"algbw_gbps": round(algbw, 1), "nccl_busbw_gbps": round(algbw * 2 * (world - 1) / world, 1)}


def timed_rounds(step: Callable[[Any], Any], ready: Callable[[Any], Any], x: Any, warmups: int, rounds: int,
                 clock: Callable[[], float] = time.perf_counter) -> Tuple[Any, float]:
    """Chained collectives (x = step(x)): `warmups` untimed (NCCL sets up its communicators on the first),
    then `rounds` timed on the host from dispatch until `ready(x)` returns (the devices run asynchronously)."""
    for _ in range(warmups):
        x = step(x)
    ready(x)
    start = clock()
    for _ in range(rounds):
        x = step(x)
    ready(x)
    return x, clock() - start


def allreduce_verdict(ctx: Context, report: Dict[str, Any], value: Dict[str, Any], what: str,
                      single: Optional[str] = None) -> Check:
    """nccl_allreduce's rule for a report {world_size, correct, numel, iters, seconds, platform} of `what`
    (JAX, TensorFlow): a wrong sum fails; one device passes without bandwidth (`single` says what it
    showed); else algbw and busbw, against the lock's floor."""
    world, unit = report["world_size"], str(report["platform"]).upper()
    value = dict(value, world_size=world)
    if not report["correct"]:
        return Check("failed", value, None, f"{what} over {world} {unit}(s) returned a wrong sum")
    if world == 1:
        value["note"] = f"single {unit}: {single or what + ' over one device compiles, runs and sums'}; no bandwidth"
        return Check("passed", value, None, f"{what} over 1 {unit} returned the right sum (no bandwidth measured)")
    size = report["numel"] * 4
    value.update(size_mib=size // 2**20, iters=report["iters"],
                 **allreduce_rates(size, world, report["iters"], report["seconds"]))
    return floor_check(ctx, value, "all-reduce bus bandwidth", f"{world}-{unit} {what} of {value['size_mib']} MiB: "
                                                               f"bus bandwidth {value['nccl_busbw_gbps']} GB/s")


def floor_check(ctx: Context, values: Dict[str, Any], what: str, text: str) -> Check:
    """Pass with `text`, or fail where a value is under expect.perf_floors[same key]."""
    floors = ctx.expect.get("perf_floors") or {}
    used = {k: floors[k] for k in values if k in floors}
    bad = [f"{k} {values[k]} < floor {used[k]}" for k in used if values[k] is None or values[k] < used[k]]
    if bad:
        return Check("failed", values, used, f"{what} below the lock's floor: " + "; ".join(bad))
    return Check("passed", values, used or None, text + ("" if used else " (no floors in lock)"))


# ------------------------------------------------------------- shared checks
def compare_version(ctx: Context, key: str, label: str, actual: Optional[str], parts: int, both_none: str = "skipped",
                    absent: str = "library missing or failed to load") -> Check:
    """Compare a found version with expect[key]; null on both sides means a CPU-only build."""
    if key not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no {key}; found {label} {actual or 'none'}")
    want = ctx.expect[key]
    if want is None and actual is None:
        return Check(both_none, None, None, f"no {label} in this torch build (CPU-only), as the lock expects")
    if want is None:
        return Check("failed", actual, None, f"found {label} {actual} but the lock expects none (CPU-only build)")
    if actual is None:
        return Check("failed", None, want, f"{label} not available in this torch build ({absent}); expected {want}")
    if same_version(actual, want, parts):
        return Check("passed", actual, want, f"{label} {actual} matches the lock's {want}")
    return Check("failed", actual, want, f"{label} {actual} does not match expected {want} "
                                         f"(compared on {'.'.join(['M', 'm', 'p'][:parts])})")


def check_python(ctx: Context) -> Check:
    return compare_version(ctx, "python", "Python", platform.python_version(), 2)


def check_pip(ctx: Context) -> Check:
    absent = Check("skipped", None, None, "pip is not installed in this environment; dependency check not run")
    if importlib.util.find_spec("pip") is None:
        return absent
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120, env=env
        )
    except subprocess.TimeoutExpired:
        return Check("failed", None, None, "python -m pip check did not finish within 120 s")
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode == 0:
        return Check("passed", {"exit_code": 0}, None, out.splitlines()[0] if out else "pip check passed")
    if "No module named pip" in out:
        return absent
    return Check("failed", {"exit_code": proc.returncode, "output": out[-4000:]}, None,
                 f"pip check found broken requirements (exit {proc.returncode}): {out[-2000:]}")


def cpu_loss_check(value: Dict[str, Any], how: str) -> Check:
    """The CPU train step's rule: the loss fell by at least half (`value` holds first_loss and last_loss)."""
    first, last = value["first_loss"], value["last_loss"]
    text = f"{first} -> {last} in {value['steps']} {how}"
    if first is not None and last is not None and last <= 0.5 * first:
        return Check("passed", value, None, f"CPU loss fell {text}")
    return Check("failed", value, None, f"CPU loss did not fall by 50% ({text})")


def devices_found(ctx: Context, usable: bool, mode: str) -> None:
    """Setup's verdict on the framework's GPUs: whether the GPU checks can run, and under --mode auto
    the run's mode (certify only with a usable device)."""
    ctx.cuda_ok = usable
    if mode == "auto":
        ctx.mode = "certify" if ctx.cuda_ok else "verify"
    ctx.current = "gather facts"


def needs_cuda(fn: Callable[[Context], Check]) -> Callable[[Context], Check]:
    """Skip (never pass) a check when no CUDA device is usable."""
    def guarded(ctx: Context) -> Check:
        return fn(ctx) if ctx.cuda_ok else Check("skipped", None, None, NO_GPU)
    guarded.__doc__, guarded.__name__ = fn.__doc__, fn.__name__
    return guarded


# ------------------------------------- installed distributions (JAX, TensorFlow)
def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def distribution_versions() -> Dict[str, str]:
    """Every installed distribution's version, by canonical name (importlib.metadata)."""
    import importlib.metadata as metadata
    found: Dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name:
            found.setdefault(canonical_name(name), dist.version)
    return found


def library_versions(dists: Dict[str, str], patterns: Dict[str, str]) -> Dict[str, Any]:
    """{key: (distribution, version) or None}: the first installed distribution matching each pattern."""
    out: Dict[str, Any] = {}
    for key, pattern in patterns.items():
        out[key] = next(((n, v) for n, v in sorted(dists.items()) if re.fullmatch(pattern, n)), None)
    return out


def compare_exact(ctx: Context, key: str, label: str, actual: Optional[str], where: str) -> Check:
    """Compare an installed distribution's version with expect[key] on every component."""
    if key not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no {key}; found {label} {actual or 'none'}")
    want = ctx.expect[key]
    if want is None and actual is None:
        return Check("passed", None, None, f"no {label} installed, as the lock expects")
    if want is None:
        return Check("failed", actual, None, f"found {label} {actual} ({where}) but the lock expects none")
    if actual is None:
        return Check("failed", None, want, f"{label} is not installed (no {where} distribution); expected {want}")
    n = max(len(ints(actual)), len(ints(want)))
    if same_version(actual, want, n):
        return Check("passed", actual, want, f"{label} {actual} ({where}) matches the lock's {want}")
    return Check("failed", actual, want, f"{label} {actual} ({where}) does not match expected {want}")


def check_wheel_cuda_runtime(ctx: Context) -> Check:
    return compare_exact(ctx, "cuda", "CUDA runtime", ctx.facts["cuda"], "nvidia-cuda-runtime")


def check_wheel_cudnn(ctx: Context) -> Check:
    return compare_exact(ctx, "cudnn", "cuDNN", ctx.facts["cudnn"], "nvidia-cudnn")


def check_wheel_nccl(ctx: Context) -> Check:
    return compare_exact(ctx, "nccl", "NCCL", ctx.facts["nccl"], "nvidia-nccl")
