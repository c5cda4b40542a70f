"""envkit payload, the packages the team asked for (the spec's ``pip:`` packages, the expect file's
``requested``): each is installed at the locked version and its modules import. The check is the
same for every framework: ``requested_imports``, in each framework's registry after ``pip_check``.

Per distribution: found with importlib.metadata (by canonical name), its version compared with the
lock's, its top-level import names read from its RECORD (a namespace directory such as ``google/``
is descended into the packages under it), else from ``top_level.txt``; a distribution with no module
(data, a CLI) is reported as such, not failed. The imports run in a child interpreter (this file run
as a script), so an import that hangs or kills its interpreter fails that package only: each has
``PER_IMPORT_S``, the whole check ``CHECK_S`` and never past the run's watchdog (less ``RESERVE_S``);
after a hang or a crash a fresh child takes the rest. PyTorch's compiled companions must also load
their extension, which a build against another torch can lack while its import succeeds:
torchaudio (``torch.ops._torchaudio`` from 2.9, ``torchaudio.lib._torchaudio`` before) and
torchvision (``torchvision._C``: ``torch.ops.torchvision.nms`` runs), each built for torch's CUDA.

Standard library only (Python 3.9+). Reference: docs/payload.md, "Requested packages".
"""
from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, Tuple

from envkit_check_core import Check, Context
from envkit_check_linked import NUMPY_ABI, device_op, linked_problems, required_names, requirers, shared_objects

PER_IMPORT_S = 60.0  # one distribution's imports (and its extension probe), the child's start included
CHECK_S = 180.0  # every distribution together
RESERVE_S = 10.0  # left before the run's watchdog, so the checks after this one still report
NOT_API = frozenset({"test", "tests", "doc", "docs", "example", "examples", "benchmark", "benchmarks", "conftest",
                     "setup"})  # top-level names some wheels ship that are no package's API (setup.py runs setup())
STATUSES = ("ok", "failed", "no_modules")  # per package; "no_modules": nothing to import (data, a CLI)


# ------------------------------------------------------------------ the distributions
def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def installed() -> Dict[str, Any]:
    """The installed distributions by canonical name (the first on sys.path, as imports find them)."""
    import importlib.metadata as metadata
    found: Dict[str, Any] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name:
            found.setdefault(canonical(name), dist)
    return found


def _module_suffixes() -> List[str]:
    """What a module file ends with; not the bare ".so", which a wheel's shared libraries (libfoo.so) end with too."""
    return sorted(set(importlib.machinery.SOURCE_SUFFIXES + importlib.machinery.EXTENSION_SUFFIXES) - {".so", ".pyd"},
                  key=len, reverse=True)


def modules_of(paths: List[str]) -> List[str]:
    """The top-level import names of a distribution's files (RECORD paths, relative to site-packages): each
    module or regular package at the top, and under a namespace directory (no ``__init__.py``) the modules and
    packages it holds. Files outside site-packages (``../../bin``), metadata and ``__pycache__`` do not count."""
    suffixes, packages, modules = _module_suffixes(), set(), set()
    for path in paths:
        parts = path.replace("\\", "/").lstrip("/").split("/")
        outside = parts[0].startswith("..") or parts[0].endswith((".dist-info", ".egg-info", ".data"))
        if outside or "__pycache__" in parts:
            continue
        suffix = next((s for s in suffixes if parts[-1].endswith(s)), None)
        if suffix is None:
            continue
        stem = parts[-1][:-len(suffix)]
        names = parts[:-1] if stem == "__init__" else parts[:-1] + [stem]
        if names and all(n.isidentifier() for n in names):
            modules.add(".".join(names))
            if stem == "__init__":
                packages.add(".".join(names))
    roots = set()
    for name in modules:
        parts = name.split(".")
        prefixes = [".".join(parts[:i]) for i in range(1, len(parts))]
        roots.add(next((p for p in prefixes if p in packages), name))  # the first regular package, else the module
    return sorted(roots)


def import_names(dist: Any) -> List[str]:
    """What to import of `dist`: its top-level modules (RECORD, else top_level.txt), the public ones where it has
    any (``_cffi_backend`` beside ``cffi`` is not imported), never a name in NOT_API."""
    files = dist.files
    names = modules_of([str(f) for f in files]) if files else []
    if not names:
        text = dist.read_text("top_level.txt") or ""
        names = sorted({n.strip() for n in text.splitlines() if n.strip().isidentifier()})
    names = [n for n in names if n.split(".")[0] not in NOT_API]
    public = [n for n in names if not any(p.startswith("_") for p in n.split("."))]
    return public or names


_ALIASES = {"alpha": "a", "beta": "b", "c": "rc", "pre": "rc", "preview": "rc", "rev": "post", "r": "post"}


def same_release(have: Any, want: Any) -> bool:
    """Equal versions, spelt either way (``1.0-RC1`` is ``1.0rc1``; a local tag such as ``+cu124`` counts)."""
    def tokens(v: Any) -> List[Any]:
        text = str(v).strip().lower().lstrip("v")
        return [int(t) if t.isdigit() else _ALIASES.get(t, t) for t in re.findall(r"\d+|[a-z]+|\+", text)]
    return tokens(have) == tokens(want)


# ------------------------------------------------------------ the imports, in a child
def _last_line(exc: BaseException) -> str:
    """The exception as a traceback's last line: ``OSError: libtorchaudio.so: undefined symbol: ...``."""
    return traceback.format_exception_only(type(exc), exc)[-1].strip()[:500]


def _companion_cuda(name: str, how: str, code: Any, torch: Any) -> Dict[str, Any]:
    """A companion's CUDA (CUDA_VERSION as an int, 12040; None or -1 without CUDA) must be torch's major.minor."""
    mine = None if code is None or int(code) < 0 else f"{int(code) // 1000}.{int(code) % 1000 // 10}"
    theirs = ".".join(str(torch.version.cuda).split(".")[:2]) if torch.version.cuda else None
    if mine != theirs:
        raise RuntimeError(f"{name}'s extension was built for CUDA {mine or 'none (a CPU build)'} but torch has CUDA "
                           f"{theirs or 'none (a CPU build)'}")
    return {"loaded": True, "via": how, "cuda": mine}


def probe_torchaudio() -> Dict[str, Any]:
    """torchaudio's compiled extension: torchaudio._extension says it loaded, and its cuda_version() answers:
    ``torch.ops._torchaudio`` (2.9+, the stable-ABI library), else the pybind module ``torchaudio.lib._torchaudio``."""
    import torch
    ext = importlib.import_module("torchaudio._extension")
    if getattr(ext, "_IS_TORCHAUDIO_EXT_AVAILABLE", None) is False:
        raise RuntimeError("torchaudio imported without its compiled extension "
                           "(torchaudio._extension._IS_TORCHAUDIO_EXT_AVAILABLE is False)")
    try:
        code, how = torch.ops._torchaudio.cuda_version(), "torch.ops._torchaudio"
    except (AttributeError, RuntimeError) as exc:  # before 2.9: no such op
        first = _last_line(exc)
        try:
            how = "torchaudio.lib._torchaudio"
            code = importlib.import_module(how).cuda_version()
        except (ImportError, AttributeError) as again:
            raise RuntimeError(f"torchaudio's extension does not load: torch.ops._torchaudio.cuda_version: {first}; "
                               f"torchaudio.lib._torchaudio: {_last_line(again)}") from None
    return _companion_cuda("torchaudio", how, code, torch)


def probe_torchvision() -> Dict[str, Any]:
    """torchvision's compiled ops (torchvision._C): loaded, and ``torch.ops.torchvision.nms`` runs on the CPU."""
    import torch
    ext = importlib.import_module("torchvision.extension")
    has = getattr(ext, "_has_ops", None)
    if (has() if callable(has) else getattr(ext, "_HAS_OPS", None)) is False:
        raise RuntimeError("torchvision imported without its compiled ops (torchvision._C did not load: "
                           "torchvision.extension._has_ops() is False)")
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0]])
    keep = [int(i) for i in torch.ops.torchvision.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist()]
    if keep != [0, 2]:
        raise RuntimeError(f"torch.ops.torchvision.nms kept boxes {keep}, not [0, 2]")
    return _companion_cuda("torchvision", "torch.ops.torchvision", torch.ops.torchvision._cuda_version(), torch)


COMPANIONS = {"torchaudio": probe_torchaudio, "torchvision": probe_torchvision}  # PyTorch's compiled companions


RECORD = "envkit-import-record "  # starts each line the child writes for the parent


class _Tee:
    """The child's stderr, also kept per distribution: NumPy 2 prints its ABI message there (the import succeeds)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.text = stream, []  # type: Any, List[str]

    def write(self, text: str) -> int:
        self.text.append(text)
        return int(self.stream.write(text))

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _import_one(dist: str, modules: List[str], tee: _Tee, gpu: bool) -> Tuple[List[str], List[str], Any]:
    """One distribution's imports in the child: (imported, errors, its extension's or device op's record)."""
    imported, errors, extension = [], [], None  # type: List[str], List[str], Any
    tee.text = []
    for name in modules:
        try:
            importlib.import_module(name)
            imported.append(name)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from a module's import too
            errors.append(f"import {name}: {_last_line(exc)}")
    said = "".join(tee.text)
    if NUMPY_ABI in said:
        line = next(x for x in said.splitlines() if NUMPY_ABI in x).strip()
        errors.append(f"import {', '.join(modules)}: {line[:300]} (built against another NumPy ABI than the "
                      "image's numpy)")
    if not errors and gpu:
        try:
            ran = device_op(dist, importlib.import_module)
            if ran is not None:
                extension = {"loaded": True, "via": ran, "cuda": None}
        except BaseException as exc:
            errors.append(f"{dist} on the GPU: {_last_line(exc)}")
    if not errors and dist in COMPANIONS:
        try:
            extension = COMPANIONS[dist]()
        except BaseException as exc:
            extension = {"loaded": False}
            errors.append(f"{dist}'s compiled extension: {_last_line(exc)}")
    return imported, errors, extension


def child(plan: Dict[str, Any]) -> int:
    """In the child: import each distribution's modules in turn (the framework first, as a job imports them), one
    JSON line per distribution on the original stdout (fd 1 then points at stderr, so what a module prints cannot
    break a line)."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.path[:] = plan["path"]  # the payload's own sys.path: what its imports would find
    tee = _Tee(sys.stderr)
    sys.stderr = tee
    if plan.get("framework"):
        try:
            importlib.import_module(plan["framework"])
        except BaseException as exc:  # the framework's own checks say why; the packages are still tried
            tee.stream.write(f"import {plan['framework']}: {_last_line(exc)}\n")
    for dist, modules in plan["imports"]:
        start = time.monotonic()
        imported, errors, extension = _import_one(dist, modules, tee, bool(plan.get("gpu")))
        out.write(RECORD + json.dumps({"dist": dist, "imported": imported, "error": "; ".join(errors) or None,
                              "extension": extension, "seconds": round(time.monotonic() - start, 3)}) + "\n")
        out.flush()
    return 0

def _lines(stream: Any, lines: "queue.Queue[Optional[str]]") -> None:
    """The child's records (its other lines, e.g. a banner an image's sitecustomize prints at start, are not)."""
    for line in iter(stream.readline, ""):
        if line.startswith(RECORD):
            lines.put(line[len(RECORD):])
    lines.put(None)


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _one_child(todo: List[Tuple[str, List[str]]], deadline: float, framework: Optional[str] = None,
               gpu: bool = False) -> Dict[str, Dict[str, Any]]:
    """Run one child over `todo`: the records it wrote, and a failure for the distribution it hung or died on
    (which ends this child; the caller starts another for the rest)."""
    results: Dict[str, Dict[str, Any]] = {}
    plan = json.dumps({"path": sys.path, "imports": todo, "framework": framework, "gpu": gpu})
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), plan], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=log, text=True, encoding="utf-8", errors="replace")
        except OSError as exc:
            return {dist: {"error": f"no interpreter to import in ({sys.executable}): {_last_line(exc)}"}
                    for dist, _ in todo}
        lines: "queue.Queue[Optional[str]]" = queue.Queue()
        reader = threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True)
        reader.start()
        stuck: Optional[Tuple[str, str]] = None  # (distribution, what happened): the child's stderr is added
        try:
            for dist, modules in todo:
                wait = min(PER_IMPORT_S, deadline - time.monotonic())
                try:
                    line = lines.get(timeout=max(wait, 0.0))
                except queue.Empty:
                    proc.kill()
                    stuck = (dist, f"did not finish importing {', '.join(modules)} within {PER_IMPORT_S:g} s"
                             if wait >= PER_IMPORT_S else
                             f"had not finished importing {', '.join(modules)} when the check's time ran out")
                    break
                if line is None:  # the child ended: an import killed it
                    stuck = (dist, f"importing {', '.join(modules)} ended the interpreter ({_ended(proc.wait())})")
                    break
                try:
                    record = json.loads(line)
                    results[str(record["dist"])] = record
                except (ValueError, KeyError, TypeError):
                    results[dist] = {"error": f"the import child wrote {line.strip()[:200]!r}"}
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            reader.join(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    sys.stderr.write(text)  # what the imports said (warnings, tracebacks) goes where the payload's own does
    if stuck is not None:
        tail = [line.strip() for line in text.splitlines() if line.strip()]
        results[stuck[0]] = {"error": stuck[1] + (f"; its stderr ended: {tail[-1][:300]}" if tail else "")}
    return results


def run_imports(todo: List[Tuple[str, List[str]]], limit_s: float, framework: Optional[str] = None,
                gpu: bool = False) -> Dict[str, Dict[str, Any]]:
    """Every distribution's import record ({imported, error, extension, seconds}); a fresh child after a hang or
    a crash; what the time left no room for is a failure that says so."""
    deadline, results = time.monotonic() + limit_s, {}
    while todo:
        if time.monotonic() >= deadline:
            results.update({d: {"error": f"not tried: the check's {limit_s:g} s ran out"} for d, _ in todo})
            break
        results.update(_one_child(todo, deadline, framework, gpu))
        todo = [(d, m) for d, m in todo if d not in results]
    return results


# ------------------------------------------------------------------------ the check
def _major(version: Any) -> Optional[int]:
    m = re.match(r"\s*([0-9]+)", str(version)) if version else None
    return int(m.group(1)) if m else None


def closure_linked(ctx: Context, dists: Dict[str, Any], asked: List[str]) -> Dict[str, List[str]]:
    """Each requested package -> what the shared objects of its closure link of another CUDA/cuDNN major than the
    image's (expect's cuda, cudnn), or cannot find (envkit_check_linked.linked_problems), naming the distribution."""
    want = {"cuda": _major(ctx.expect.get("cuda")), "cudnn": _major(ctx.expect.get("cudnn"))}
    if want["cuda"] is None:
        return {}
    files = {name: shared_objects(d) for name, d in dists.items()}
    problems = linked_problems({n: f for n, f in files.items() if f}, want)
    if not problems:
        return {}
    owners = requirers({n: required_names(d) for n, d in dists.items()}, [canonical(a) for a in asked])
    out: Dict[str, List[str]] = {}
    for dist, found in problems.items():
        for root in owners.get(dist, []):
            who = dist if dist == root else f"{dist}, which {root} requires,"
            out.setdefault(root, []).append(f"{who} " + "; ".join(found[:3]))
    return out


def check_limit(deadline: Optional[float], now: Optional[float] = None) -> float:
    """Seconds the imports may take: CHECK_S, never past the watchdog (less RESERVE_S), at least 5."""
    limit = CHECK_S
    if deadline is not None:
        limit = min(limit, deadline - (time.monotonic() if now is None else now) - RESERVE_S)
    return max(limit, 5.0)


def _entry_text(e: Dict[str, Any]) -> str:
    name = f"{e['name']} {e['version']}" if e["version"] else e["name"]
    ext = e.get("extension") or {}
    if e["status"] == "failed":
        return f"{name}: {e['error']}"
    if ext.get("loaded"):
        return f"{name} (its extension loads, CUDA {ext.get('cuda') or 'none'})"
    return name


def _entry(name: str, want: Optional[str], dist: Any) -> Dict[str, Any]:
    """A requested package's entry before its import: installed at the lock's version, and its modules."""
    e: Dict[str, Any] = {"name": name, "version": dist.version if dist else None, "expected": want,
                         "modules": [], "imported": [], "status": "ok", "error": None, "extension": None,
                         "seconds": None}
    if dist is None:
        e.update(status="failed", error="not installed" + (f" (the lock has {want})" if want else ""))
        return e
    if want is not None and not same_release(dist.version, want):
        e.update(status="failed", error=f"{dist.version} is installed but the lock has {want}")
    e["modules"] = import_names(dist)
    if not e["modules"] and e["status"] == "ok":
        e["status"] = "no_modules"
    return e


def check_requested(ctx: Context) -> Check:
    wanted = ctx.expect.get("requested")
    if not wanted:
        return Check("skipped", None, None, "lock gives no requested packages (the spec's pip: packages)")
    dists = installed()
    entries = [_entry(name, want, dists.get(canonical(name))) for name, want in wanted.items()]
    todo = [(e["name"], e["modules"]) for e in entries if e["modules"]]
    results = run_imports(todo, check_limit(ctx.deadline), ctx.expect.get("framework"),
                          ctx.cuda_ok and ctx.mode == "certify")
    linked = closure_linked(ctx, dists, [e["name"] for e in entries])
    for e in entries:
        if linked.get(canonical(e["name"])):
            e.update(status="failed", error="; ".join(filter(None, (e["error"], *linked[canonical(e["name"])]))))
        record = results.get(e["name"])
        if record is None:
            continue
        e.update(imported=record.get("imported") or [], extension=record.get("extension"),
                 seconds=record.get("seconds"))
        if record.get("error"):
            e.update(status="failed", error="; ".join(filter(None, (e["error"], record["error"]))))
    failed = [e for e in entries if e["status"] == "failed"]
    bare = [e for e in entries if e["status"] == "no_modules"]
    if failed:
        return Check("failed", entries, wanted, f"{len(failed)} of {len(entries)} requested packages failed: "
                     + "; ".join(map(_entry_text, failed)))
    ok = [e for e in entries if e["status"] == "ok"]
    text = f"{len(ok)} requested package(s) import: " + ", ".join(map(_entry_text, ok)) if ok else ""
    if bare:
        text += ("; " if text else "") + "no module to import (data or a program): " + ", ".join(map(_entry_text, bare))
    return Check("passed", entries, wanted, text)


if __name__ == "__main__":  # the child: python3 envkit_check_imports.py PLAN
    sys.exit(child(json.loads(sys.argv[1])))
