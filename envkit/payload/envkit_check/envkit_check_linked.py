"""envkit payload, what the closure's compiled code links and where the GPU-capable extras run (issue 32).

Three proofs inside the image, read by ``requested_imports`` (envkit_check_imports.py), each failing the requested
package it concerns:

- ``linked_problems``: every shared object of every installed distribution (extension modules and bundled
  libraries) is asked of the dynamic loader (``ldd``: its search, RPATHs included): a CUDA runtime, cuBLAS or cuDNN
  it needs that is not found, or one of another major than the image's (``expect.json``'s cuda, cudnn), and a
  distribution that ships such a library of another major (a second CUDA beside the framework's).
- ``NUMPY_ABI``: the message NumPy 2 prints importing a module compiled against NumPy 1.x (the import may
  succeed; the first array fails), caught in the import child's stderr.
- ``device_ops``: on a GPU, one tiny operation per GPU-capable extra (cupy, jax, onnxruntime) proving it runs on
  the device, not silently on the CPU.

The sonames' majors are the catalog's ``cuda_sonames`` (envkit/catalog/data/binaries.yaml), kept in step by
tests/unit/payload/test_payload_linked.py. Standard library only (Python 3.9+).
"""
from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

SONAMES: Tuple[Tuple[str, str], ...] = (  # (pattern, whose major): binaries.yaml's cuda_sonames
    (r"libcudart\.so\.(?P<major>[0-9]+)(?:\.[0-9]+)*", "cuda"),
    (r"libcublas(?:Lt)?\.so\.(?P<major>[0-9]+)(?:\.[0-9]+)*", "cuda"),
    (r"libcudnn(?:_[a-z_]+)?\.so\.(?P<major>[0-9]+)(?:\.[0-9]+)*", "cudnn"),
)
NUMPY_ABI = "compiled using NumPy 1.x cannot be run in"  # NumPy 2's message (numpy/core/_multiarray_umath.py)
MAX_FILES = 4000  # shared objects asked of ldd
LDD_S = 20.0  # one ldd run
_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")


def soname_major(name: str) -> Optional[Tuple[str, int]]:
    """Which library's major a soname pins (``libcudart.so.11.0``: ("cuda", 11)); None for any other."""
    for pattern, library in SONAMES:
        m = re.fullmatch(pattern, name)
        if m:
            return library, int(m.group("major"))
    return None


def parse_ldd(text: str) -> List[Tuple[str, Optional[str]]]:
    """``ldd``'s lines as (soname, the path it resolved to, or None when not found)."""
    out = []
    for line in text.splitlines():
        m = _LDD_LINE.match(line)
        if m:
            out.append((m.group(1), None if m.group(2) == "not found" else m.group(2)))
    return out


def _is_shared_object(path: str) -> bool:
    base = os.path.basename(path)
    return base.endswith(".so") or ".so." in base


def shared_objects(dist: Any) -> List[str]:
    """The absolute paths of a distribution's shared objects (its RECORD)."""
    return [str(dist.locate_file(f)) for f in (dist.files or []) if _is_shared_object(str(f))]


def run_ldd(path: str) -> str:
    try:
        done = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=LDD_S, errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


def _which(library: str, major: Optional[int]) -> str:
    return f"{'CUDA' if library == 'cuda' else 'cuDNN'} {major}" if major is not None else f"no {library}"


def linked_problems(files: Dict[str, List[str]], want: Dict[str, Optional[int]],
                    ldd: Callable[[str], str] = run_ldd) -> Dict[str, List[str]]:
    """Per distribution, what its shared objects need or ship of another CUDA/cuDNN major than ``want``
    ({"cuda": 12, "cudnn": 9}; a library the image has none of, None, is not judged), or need and cannot find
    (unless the closure ships it at the image's major: the framework loads its own libraries first)."""
    jobs = [(dist, path) for dist, paths in sorted(files.items()) for path in paths][:MAX_FILES]
    shipped = {os.path.basename(path) for _, path in jobs}
    with ThreadPoolExecutor(max_workers=8) as pool:
        outputs = list(pool.map(lambda job: ldd(job[1]), jobs))
    problems: Dict[str, List[str]] = {}
    for (dist, path), text in zip(jobs, outputs):
        base = os.path.basename(path)
        found = []
        own = soname_major(base)
        if own is not None and want.get(own[0]) is not None and own[1] != want[own[0]]:
            found.append(f"ships {base}, a {_which(*own)} library, but the image has {_which(own[0], want[own[0]])}")
        for lib, where in parse_ldd(text):
            hit = soname_major(lib)
            if hit is None or want.get(hit[0]) is None:
                continue
            if hit[1] != want[hit[0]]:
                found.append(f"{base} needs {lib} ({_which(*hit)}) but the image has {_which(hit[0], want[hit[0]])}"
                             + (": not found" if where is None else f" (it loads {where})"))
            elif where is None and lib not in shipped:
                found.append(f"{base} needs {lib}: not found by the dynamic loader")
        if found:
            problems.setdefault(dist, []).extend(dict.fromkeys(found))
    return problems


def requirers(requires: Dict[str, Iterable[str]], asked: Iterable[str]) -> Dict[str, List[str]]:
    """Each distribution -> the asked ones whose closure holds it (by ``requires``: name -> names it requires)."""
    out: Dict[str, List[str]] = {}
    for root in asked:
        seen, todo = set(), [root]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            out.setdefault(n, []).append(root)
            todo += list(requires.get(n, ()))
    return out


def required_names(dist: Any) -> List[str]:
    """The canonical names a distribution requires (any extra or marker: an over-approximation)."""
    names = []
    for req in dist.requires or []:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if m:
            names.append(re.sub(r"[-_.]+", "-", m.group(1)).lower())
    return names


# ----------------------------------------------------------- one tiny op on the device
def _cupy(mod: Any) -> str:
    if mod.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("cupy sees no CUDA device")
    total = int(mod.arange(4, dtype=mod.float32).sum().get())
    if total != 6:
        raise RuntimeError(f"cupy.arange(4).sum() on the GPU gave {total}, not 6")
    return f"cupy.arange(4).sum() ran on GPU {mod.cuda.Device().id}"


def _jax(mod: Any) -> str:
    gpus = [d for d in mod.devices() if getattr(d, "platform", "") in ("gpu", "cuda", "rocm")]
    if not gpus:
        raise RuntimeError(f"jax runs on the CPU only: its devices are {[str(d) for d in mod.devices()]} "
                           "(no CUDA plugin: ask for jax[cuda12] or jax[cuda13])")
    x = mod.device_put(mod.numpy.arange(4.0), gpus[0]).sum()
    if float(x) != 6.0:
        raise RuntimeError(f"jax's sum on {gpus[0]} gave {float(x)}, not 6")
    return f"jax.numpy sum ran on {gpus[0]}"


def _onnxruntime(mod: Any) -> str:
    providers = list(mod.get_available_providers())
    if "CUDAExecutionProvider" not in providers:
        raise RuntimeError(f"onnxruntime has no CUDAExecutionProvider (it has {providers}): it runs on the CPU only "
                           "(ask for onnxruntime-gpu)")
    if str(mod.get_device()).upper() != "GPU":
        raise RuntimeError(f"onnxruntime.get_device() is {mod.get_device()}, not GPU")
    return "onnxruntime's CUDAExecutionProvider is available (device GPU)"


DEVICE_OPS: Dict[str, Tuple[str, Callable[[Any], str]]] = {  # distribution -> (module, its op)
    "cupy": ("cupy", _cupy), "jax": ("jax", _jax), "onnxruntime": ("onnxruntime", _onnxruntime),
    "onnxruntime-gpu": ("onnxruntime", _onnxruntime),
}


def device_op(dist: str, load: Callable[[str], Any]) -> Optional[str]:
    """Run ``dist``'s tiny device op (``load``: importlib.import_module): what ran, or None when it has none;
    raises when it does not run on the GPU."""
    if re.sub(r"-cuda[0-9]+x?$", "", dist) not in DEVICE_OPS:
        return None
    module, op = DEVICE_OPS[re.sub(r"-cuda[0-9]+x?$", "", dist)]
    return op(load(module))
