"""envkit payload, the run: framework choice, the check runner, the document (``envkit.payload/1``)
and its table, the watchdog, the command line, and ``main``. ``__main__.py`` calls ``main``.

Standard library only (Python 3.9+); the chosen framework's module is imported by name, and no
other. Reference: docs/payload.md.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import json
import multiprocessing
import os
import platform
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

from envkit_check_core import (DEVICE_CHECKS, NO_GPU, PAYLOAD_VERSION, SCHEMA, VERIFY_FORCED, Check, Context,
                               Registry, expect_problems, payload_sha256)
from envkit_check_nvml import Nvml, Sampler

# Per framework, the module with its facts, checks and registry (each defines FACTS, TABLE_FACTS,
# REGISTRY, CHECKS, setup(ctx, mode), and optionally release(ctx) after each GPU check).
FRAMEWORKS = {"torch": "envkit_check_torch", "jax": "envkit_check_jax", "tensorflow": "envkit_check_tf"}
# Without --expect: the expect file beside the payload's directory, if there is one (in an image,
# /opt/envkit/expect.json beside /opt/envkit/envkit_check: what the image was built to hold).
EXPECT_BESIDE = "expect.json"


def expect_beside() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), EXPECT_BESIDE)


def framework_module(framework: str) -> Any:
    """The payload module of `framework` (PyTorch's for a name it does not know). Importing one imports
    no framework: each imports its own in its ``setup``, so a run never imports another's."""
    return importlib.import_module(FRAMEWORKS.get(framework, FRAMEWORKS["torch"]))


def run_checks(ctx: Context, registry: Registry, release: Optional[Callable[[Context], None]] = None) -> None:
    """Run `registry` in order; after each GPU check collect garbage and `release` the framework's caches."""
    for name, fn, gpu_only in registry:
        ctx.current, start = name, time.monotonic()
        if gpu_only and ctx.mode == "verify":
            result = Check("skipped", None, None, VERIFY_FORCED if ctx.cuda_ok else NO_GPU)
        else:
            try:
                result = fn(ctx)
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                result = Check("failed", None, None, f"check raised {type(e).__name__}: {e}")
            if gpu_only and ctx.cuda_ok:  # free what the check left so later probes are not starved
                try:
                    gc.collect()
                    if release is not None:
                        release(ctx)
                except Exception:  # e.g. a sticky CUDA error: the next checks report it themselves
                    traceback.print_exc(file=sys.stderr)
        result.name, result.seconds = name, round(time.monotonic() - start, 3)
        with ctx.lock:
            ctx.results.append(result)
    ctx.current = ""


def overall_status(mode: str, results: List[Check]) -> str:
    """Any failure fails; certified needs certify mode with a usable CUDA device."""
    if any(r.status == "failed" for r in results):
        return "failed"
    if mode == "verify":
        return "verified"
    return "certified" if any(r.name in DEVICE_CHECKS and r.status == "passed" for r in results) else "failed"


def build_document(ctx: Context, results: List[Check]) -> Dict[str, Any]:
    return {"schema": SCHEMA, "payload": {"version": PAYLOAD_VERSION, "sha256": payload_sha256()},
            "mode": ctx.mode, "status": overall_status(ctx.mode, results), "facts": ctx.facts,
            "checks": [r.to_json() for r in results], "telemetry": list(ctx.sampler.samples) if ctx.sampler else [],
            "seconds": round(time.monotonic() - ctx.t0, 3)}


def expect_line(expect_file: Optional[str]) -> str:
    """Which expect file the run compared against (the table's third line; stderr under --json)."""
    if expect_file is None:
        return "expect: none (no --expect, and no expect.json beside the payload): version comparisons skipped"
    beside = " (beside the payload)" if os.path.abspath(expect_file) == expect_beside() else ""
    return f"expect: {expect_file}{beside}"


def render_table(doc: Dict[str, Any], expect: Optional[str] = None) -> str:
    """The document as a table; `expect`, when given, a line saying which expect file was used."""
    facts, width = doc["facts"], max([len(c["name"]) for c in doc["checks"]] + [5])
    shown = framework_module(str(facts.get("framework") or "torch")).TABLE_FACTS
    lines = (
        [
            f"envkit payload {doc['payload']['version']} (sha256 {doc['payload']['sha256'][:12]}): mode {doc['mode']}, "
            f"status {doc['status'].upper()} in {doc['seconds']:.1f} s",
            "  ".join(f"{k} {facts.get(k) or '-'}" for k in shown),
        ]
        + ([expect] if expect else [])
        + ["", f"{'CHECK':<{width}}  {'STATUS':<7}  {'SECONDS':>7}  MESSAGE"]
    )
    lines += [f"{c['name']:<{width}}  {c['status']:<7}  {c['seconds']:>7.2f}  {c['message']}" for c in doc["checks"]]
    return "\n".join(lines) + "\n"


def emit(ctx: Context, out: Any, as_json: bool, results: List[Check]) -> str:
    """Write the run's one document (caller holds ctx.lock); return its status."""
    doc = build_document(ctx, results)
    out.write(json.dumps(doc, indent=2, default=str) + "\n" if as_json
              else render_table(doc, expect_line(ctx.expect_file)))
    out.flush()
    ctx.done = True
    return doc["status"]


def start_watchdog(ctx: Context, out: Any, as_json: bool, timeout: float) -> threading.Timer:
    """After `timeout` s: report what finished plus a failed `timeout` check, kill children, exit 1."""
    def fire() -> None:
        with ctx.lock:
            if ctx.done:
                return
            late = Check("failed", {"timeout_s": timeout, "running": ctx.current or None}, None,
                         f"payload exceeded --timeout {timeout:g} s while running {ctx.current or 'setup'}", "timeout")
            emit(ctx, out, as_json, list(ctx.results) + [late])
            for child in multiprocessing.active_children():
                child.kill()
            os._exit(1)
    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    return timer


def parse_args(argv: Optional[List[str]]) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """The options, and the expect document (args.expect: the file it came from, or None)."""
    p = argparse.ArgumentParser(
        prog="envkit_check", description="Verify or certify a PyTorch, JAX or TensorFlow image from inside."
    )
    p.add_argument(
        "--expect",
        metavar="FILE",
        help="JSON object: what the lock says the image holds "
        "(default: expect.json beside the payload's directory, if there is one)",
    )
    p.add_argument("--mode", choices=["verify", "certify", "auto"], default="auto",
                   help="auto (default): certify when a CUDA device is usable, else verify")
    p.add_argument("--framework", choices=["torch", "jax", "tensorflow", "auto"], default="auto",
                   help="auto (default): the expect file's, else the one installed (torch first)")
    p.add_argument(
        "--steps", type=int, metavar="N", help="optimizer steps of the train checks (default 30 CPU, 40 CUDA)"
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout; everything else on stderr")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="fail the whole run after S seconds (300)")
    args = p.parse_args(argv)
    if args.steps is not None and args.steps < 2:
        p.error("--steps must be at least 2")
    if not 0 < args.timeout <= threading.TIMEOUT_MAX:  # also refuses nan and inf (which would disable the watchdog)
        p.error(f"--timeout must be a positive, finite number of seconds (at most {threading.TIMEOUT_MAX:.0f}), "
                f"not {args.timeout:g}")
    expect: Any = {}
    if args.expect is None and os.path.isfile(expect_beside()):
        args.expect = expect_beside()
    if args.expect:
        try:
            with open(args.expect, encoding="utf-8") as f:
                expect = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"--expect {args.expect}: {e}")
        if not isinstance(expect, dict):
            p.error(f"--expect {args.expect}: must hold a JSON object, not {type(expect).__name__}")
        problems = expect_problems(expect)
        if problems:
            p.error(f"--expect {args.expect}: " + "; ".join(problems))
    return args, expect


def choose_framework(arg: str, expect: Dict[str, Any]) -> str:
    """--framework, else the expect file's (JAX's names itself; PyTorch's has a "torch" key), else
    whichever is installed, torch first. Found with importlib, never by importing the other one."""
    if arg != "auto":
        return arg
    if expect.get("framework"):
        return str(expect["framework"])
    if "torch" in expect:
        return "torch"
    for name in ("jax", "tensorflow"):
        if name in expect:
            return name
    if importlib.util.find_spec("torch") is None:
        for name in ("jax", "tensorflow"):
            if importlib.util.find_spec(name) is not None:
                return name
    return "torch"


def initial_facts(framework: str) -> Dict[str, Any]:
    """The document's facts before (or if never) gathered: every key, None."""
    facts: Dict[str, Any] = dict.fromkeys(framework_module(framework).FACTS, None)
    if "framework" in facts:  # frameworks after PyTorch name themselves
        facts["framework"] = framework
    facts.update(python=platform.python_version(), gpus=[])
    return facts


def main(argv: Optional[List[str]] = None) -> int:
    args, expect = parse_args(argv)
    out = sys.stdout
    if args.json:  # keep fd 1 for the document; C-level and child-process noise goes to stderr
        sys.stdout.flush()
        out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)
    framework = choose_framework(args.framework, expect)
    ctx = Context(expect=expect, mode="verify" if args.mode == "auto" else args.mode, t0=time.monotonic(),
                  steps=args.steps, framework=framework, facts=initial_facts(framework), current=f"import {framework}",
                  expect_file=args.expect or None)
    if args.json:  # the document has no place for it (envkit.payload/1); the table says it on its third line
        print(f"envkit_check: {expect_line(ctx.expect_file)}", file=sys.stderr, flush=True)
    watchdog = start_watchdog(ctx, out, args.json, args.timeout)
    ctx.deadline = ctx.t0 + args.timeout
    try:
        if framework not in FRAMEWORKS:
            raise ValueError(
                f"this payload checks torch, jax and tensorflow images; the expect file names {framework!r}"
            )
        module = framework_module(framework)
        module.setup(ctx, args.mode)
        nvml = Nvml.load() if ctx.mode == "certify" else None
        if nvml is not None:
            ctx.sampler = Sampler(nvml, ctx.t0)
            ctx.sampler.start()
        run_checks(ctx, module.REGISTRY, getattr(module, "release", None))
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        with ctx.lock:
            ctx.results.append(Check("failed", None, None, f"{ctx.current} failed: {type(e).__name__}: {e}", "setup"))
    finally:
        if ctx.sampler is not None:
            ctx.sampler.stop()
    with ctx.lock:
        if ctx.done:  # the watchdog has already reported
            return 1
        watchdog.cancel()
        status = emit(ctx, out, args.json, list(ctx.results))
    return 0 if status in ("verified", "certified") else 1

