"""envkit payload: NVML (a ctypes binding to libnvidia-ml.so.1, no pynvml), the telemetry sampler,
nvidia-smi, and the two GPU-only checks every framework shares (nvidia_smi, telemetry).

Standard library only (Python 3.9+). Reference: docs/payload.md.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

from envkit_check_core import Check, Context, driver_meets

CLOCK_REASONS = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                 "display_clock_setting"]  # NVML clocks event reason bits 0x1 .. 0x100


def decode_clock_reasons(mask: int) -> List[str]:
    return [name for bit, name in enumerate(CLOCK_REASONS) if mask & (1 << bit)]


# ------------------------------------------------------------------------- NVML
class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """Minimal ctypes binding to libnvidia-ml.so.1 (no pynvml needed)."""

    def __init__(self, lib: Any):
        self.lib = lib

    @classmethod
    def load(cls) -> Optional["Nvml"]:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            return cls(lib) if lib.nvmlInit_v2() == 0 else None
        except (OSError, AttributeError):
            return None

    def driver_version(self) -> Optional[str]:
        buf = ctypes.create_string_buffer(96)
        ok = self.lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0
        return (buf.value.decode("ascii", "replace") or None) if ok else None

    def count(self) -> int:
        n = ctypes.c_uint(0)
        return n.value if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 else 0

    def ok(self, *names: str, args: tuple = ()) -> bool:
        """Whether the first of `names` this driver's library exports returned NVML_SUCCESS (False when none is
        exported: a function a driver dropped loses that one reading, not the sample)."""
        fn = next((f for f in (getattr(self.lib, n, None) for n in names) if f is not None), None)
        return fn is not None and fn(*args) == 0

    def sample(self, index: int, t: float) -> Optional[Dict[str, Any]]:
        h, ref = ctypes.c_void_p(), ctypes.byref
        if not self.ok("nvmlDeviceGetHandleByIndex_v2", args=(ctypes.c_uint(index), ref(h))):
            return None
        util, mem, power, temp, mask = _Utilization(), _Memory(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        readings = {"util_pct": util.gpu if self.ok("nvmlDeviceGetUtilizationRates", args=(h, ref(util))) else None,
                    "mem_used_mib": round(mem.used / 2**20, 1) if self.ok("nvmlDeviceGetMemoryInfo", args=(h, ref(mem)))
                    else None,
                    "power_w": power.value / 1000.0 if self.ok("nvmlDeviceGetPowerUsage", args=(h, ref(power)))
                    else None,  # mW
                    "temp_c": temp.value if self.ok("nvmlDeviceGetTemperature", args=(h, ctypes.c_int(0), ref(temp)))
                    else None,
                    "clock_event_reasons": decode_clock_reasons(mask.value)
                    if self.ok("nvmlDeviceGetCurrentClocksEventReasons",  # driver 535+
                               "nvmlDeviceGetCurrentClocksThrottleReasons", args=(h, ref(mask))) else None}
        if all(v is None for v in readings.values()):
            return None  # a handle but no readable metric (e.g. no permission): not a sample
        return dict({"t": round(t, 3), "gpu": index}, **readings)


class Sampler(threading.Thread):
    """Samples every NVML device each `period` seconds until stopped."""

    def __init__(self, nvml: Nvml, t0: float, period: float = 0.2):
        super().__init__(name="envkit-telemetry", daemon=True)
        self.nvml, self.t0, self.period = nvml, t0, period
        self.samples: List[Dict[str, Any]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        try:  # telemetry is best effort: an NVML failure ends sampling, never the run
            n = self.nvml.count()
        except Exception:
            return
        while not self.halt.is_set():
            t = time.monotonic() - self.t0
            for i in range(n):
                try:
                    s = self.nvml.sample(i, t)
                except Exception:
                    s = None
                if s:
                    self.samples.append(s)
            self.halt.wait(self.period)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(timeout=2)


# ------------------------------------------------- shared GPU-only checks
def query_nvidia_smi(exe: str) -> List[Dict[str, Any]]:
    """One dict per GPU from nvidia-smi; [] when it fails."""
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    for query in (fields, fields[:-1]):  # drivers before ~510 lack compute_cap
        try:
            proc = subprocess.run([exe, "--query-gpu=" + ",".join(query), "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return []
        if proc.returncode == 0:
            rows = [[c.strip() for c in line.split(",")] for line in proc.stdout.strip().splitlines()]
            return [dict(zip(query, row)) for row in rows if len(row) == len(query)]
    return []


def check_nvidia_smi(ctx: Context) -> Check:
    exe = shutil.which("nvidia-smi")
    gpus = query_nvidia_smi(exe) if exe else []
    driver, source = (gpus[0]["driver_version"], "nvidia-smi") if gpus else (None, None)
    if driver is None:
        nvml = Nvml.load()
        driver, source = (nvml.driver_version() if nvml else None), "NVML"
    floor = ctx.expect.get("driver_floor")
    if driver is None:
        return Check("failed", None, floor, f"no NVIDIA driver found: nvidia-smi {'failed' if exe else 'is absent'} "
                                            "and libnvidia-ml.so.1 gave no driver version")
    ctx.facts["driver"] = driver
    value = {"driver": driver, "source": source, "gpus": gpus}
    if floor is None:
        return Check("passed", value, None, f"driver {driver} (via {source}); lock gives no driver_floor")
    if driver_meets(driver, str(floor)):
        return Check("passed", value, floor, f"driver {driver} (via {source}) >= floor {floor}")
    return Check(
        "failed", value, floor, f"driver {driver} is older than the lock's floor {floor}; upgrade the host driver"
    )


def check_telemetry(ctx: Context) -> Check:
    if ctx.sampler is None:
        return Check("skipped", None, None, "NVML (libnvidia-ml.so.1) not loadable; no telemetry sampled")
    ctx.sampler.stop()
    samples = list(ctx.sampler.samples)
    if not samples:
        return Check("skipped", {"samples": 0}, None, "NVML loaded but gave no samples")

    def peak(key: str) -> Any:
        return max((s[key] for s in samples if s[key] is not None), default=None)

    reasons = sorted({r for s in samples for r in (s["clock_event_reasons"] or [])})
    value = {
        "samples": len(samples),
        "max_util_pct": peak("util_pct"),
        "max_temp_c": peak("temp_c"),
        "max_power_w": peak("power_w"),
        "max_mem_used_mib": peak("mem_used_mib"),
        "clock_event_reasons_seen": reasons,
    }
    return Check(
        "passed",
        value,
        None,
        f"{len(samples)} NVML samples; max {value['max_temp_c']} C, "
        f"{value['max_power_w']} W; clock event reasons seen: {', '.join(reasons) or 'none'}",
    )
