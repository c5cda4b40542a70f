"""The payload's proofs of issue 32 (envkit_check_linked.py, through requested_imports): what the closure's shared
objects link against the image's CUDA/cuDNN majors (ldd, real files gcc builds here), the NumPy-ABI message in an
import, and the device ops of the GPU-capable extras (fakes of cupy, jax and onnxruntime: no GPU here)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from envkit.catalog.files import load_catalog, packaged_dir
from tests.unit.payload_modules import payload_module

core, imports, linked = (payload_module("envkit_check_core"), payload_module("envkit_check_imports"),
                         payload_module("envkit_check_linked"))


def test_the_sonames_are_the_catalogs():
    rows = load_catalog(packaged_dir()).binaries.rows.cuda_sonames
    assert linked.SONAMES == tuple((r.pattern, r.library) for r in rows)


LDD = {
    "/s/ext.so": ("\tlinux-vdso.so.1 (0x00007ffd)\n\tlibcudart.so.11.0 => not found\n"
                  "\tlibc.so.6 => /lib/libc.so.6 (0x1)\n"),
    "/s/ok.so": "\tlibcudart.so.12 => /s/nvidia/cuda_runtime/lib/libcudart.so.12 (0x1)\n",
    "/s/cudnn_ops.so": "\tlibcublasLt.so.12 => not found\n",  # shipped beside it: the framework loads it first
    "/s/nvidia/cuda_runtime/lib/libcudart.so.12": "\tlibc.so.6 => /lib/libc.so.6 (0x1)\n",
    "/s/cu11/libcudart.so.11.0": "\tlibc.so.6 => /lib/libc.so.6 (0x1)\n",
    "/s/nvidia/cublas/lib/libcublasLt.so.12": "",
}


def test_linked_problems_name_the_library_and_the_images():
    files = {"gpukern": ["/s/ext.so"], "fine": ["/s/ok.so", "/s/cudnn_ops.so"],
             "nvidia-cuda-runtime-cu12": ["/s/nvidia/cuda_runtime/lib/libcudart.so.12"],
             "nvidia-cublas-cu12": ["/s/nvidia/cublas/lib/libcublasLt.so.12"],
             "nvidia-cuda-runtime-cu11": ["/s/cu11/libcudart.so.11.0"]}
    got = linked.linked_problems(files, {"cuda": 12, "cudnn": 9}, LDD.__getitem__)
    assert got == {
        "gpukern": ["ext.so needs libcudart.so.11.0 (CUDA 11) but the image has CUDA 12: not found"],
        "nvidia-cuda-runtime-cu11": ["ships libcudart.so.11.0, a CUDA 11 library, but the image has CUDA 12"]}
    assert linked.linked_problems(files, {"cuda": None, "cudnn": None}, LDD.__getitem__) == {}


def test_requirers_walk_the_closure():
    req = {"trainer": ["gpukern", "numpy"], "gpukern": ["numpy"], "numpy": []}
    assert linked.requirers(req, ["trainer", "numpy"]) == {"trainer": ["trainer"], "gpukern": ["trainer"],
                                                           "numpy": ["trainer", "numpy"]}


def test_parse_ldd():
    assert linked.parse_ldd(LDD["/s/ext.so"]) == [("libcudart.so.11.0", None), ("libc.so.6", "/lib/libc.so.6")]


# ------------------------------------------------------------ in the image's shape: real files, real ldd, a child
def make_dist(site: Path, name: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> None:
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in [*files, f"{info.name}/METADATA"]))


def gcc_so(tmp: Path, name: str, links: tuple[str, ...] = (), soname: str | None = None) -> bytes:
    src = tmp / "e.c"
    src.write_text("int envkit_test_symbol(void) { return 0; }\n")
    for lib in links:
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{lib}", "-o", str(tmp / lib), str(src)], check=True)
    out = tmp / name
    subprocess.run(["gcc", "-shared", "-fPIC", *([f"-Wl,-soname,{soname}"] if soname else []), "-o", str(out),
                    str(src), f"-L{tmp}", "-Wl,--no-as-needed", *[f"-l:{x}" for x in links]], check=True)
    for lib in links:
        (tmp / lib).unlink()  # the stub only links: the image has no such library
    return out.read_bytes()


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("ldd") is None, reason="gcc and ldd")
def test_a_wrong_major_library_in_the_closure_fails_the_package_that_brought_it(tmp_path, monkeypatch):
    site, build = tmp_path / "site", tmp_path / "build"
    site.mkdir(), build.mkdir()
    make_dist(site, "gpukern", {"gpukern/__init__.py": b"",
                                "gpukern/_C.so": gcc_so(build, "_C.so", ("libcudart.so.11.0",))})
    make_dist(site, "trainer", {"trainer/__init__.py": b"import gpukern\n"}, requires=("gpukern>=1",))
    make_dist(site, "nvidia-cuda-runtime-cu11", {"nvidia/cu11/lib/libcudart.so.11.0":
                                                 gcc_so(build, "libcudart.so.11.0", soname="libcudart.so.11.0")})
    make_dist(site, "plain", {"plain/__init__.py": b""})
    monkeypatch.syspath_prepend(str(site))
    ctx = core.Context(expect={"requested": {"trainer": "1.0", "nvidia-cuda-runtime-cu11": "1.0", "plain": "1.0"},
                               "cuda": "12.8.90", "cudnn": "9.10.2.21"}, mode="verify", t0=time.monotonic())
    result = imports.check_requested(ctx)
    got = {e["name"]: e for e in result.value}
    assert result.status == "failed"
    assert got["trainer"]["error"] == ("gpukern, which trainer requires, _C.so needs "
                                       "libcudart.so.11.0 (CUDA 11) but the image has CUDA 12: not found")
    assert got["nvidia-cuda-runtime-cu11"]["error"] == ("nvidia-cuda-runtime-cu11 ships libcudart.so.11.0, a CUDA "
                                                        "11 library, but the image has CUDA 12")
    assert got["plain"]["status"] == "ok"


def test_the_numpy_abi_message_fails_the_import_that_printed_it(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    msg = ("A module that was compiled using NumPy 1.x cannot be run in\\nNumPy 2.1.3 as it may crash. To support "
           "both 1.x and 2.x\\n")
    make_dist(site, "oldbin", {"oldbin/__init__.py": f"import sys\nsys.stderr.write('{msg}')\n".encode()})
    make_dist(site, "fw", {"fw/__init__.py": b"import sys\nsys.modules['fw_was_imported'] = sys\n"})
    make_dist(site, "checkfw", {"checkfw/__init__.py": b"import sys\nassert 'fw_was_imported' in sys.modules\n"})
    monkeypatch.syspath_prepend(str(site))
    ctx = core.Context(expect={"requested": {"oldbin": "1.0", "checkfw": "1.0"}, "framework": "fw"}, mode="verify",
                       t0=time.monotonic())
    got = {e["name"]: e for e in imports.check_requested(ctx).value}
    assert got["oldbin"]["status"] == "failed"
    assert got["oldbin"]["error"].startswith("import oldbin: A module that was compiled using NumPy 1.x cannot be run "
                                             "in (built against another NumPy ABI")
    assert got["checkfw"]["status"] == "ok"  # imported in the interpreter that imported the framework first


# ------------------------------------------------------------ the device ops, over fakes
class FakeCupyArray:
    def __init__(self, n): self.n = n
    def sum(self): return SimpleNamespace(get=lambda: sum(range(self.n)))


def fake_cupy(devices):
    return SimpleNamespace(float32="f4", arange=lambda n, dtype=None: FakeCupyArray(n),
                           cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: devices),
                                                Device=lambda: SimpleNamespace(id=0)))


def fake_jax(platforms):
    devs = [SimpleNamespace(platform=p, __str__=lambda: p) for p in platforms]
    arr = SimpleNamespace(sum=lambda: 6.0)
    return SimpleNamespace(devices=lambda: devs, device_put=lambda x, d: arr,
                           numpy=SimpleNamespace(arange=lambda n: None))


def fake_ort(providers, device):
    return SimpleNamespace(get_available_providers=lambda: providers, get_device=lambda: device)


def test_device_ops_pass_on_the_gpu_and_fail_a_cpu_fallback():
    assert "ran on GPU 0" in linked.device_op("cupy-cuda12x", lambda m: fake_cupy(1))
    with pytest.raises(RuntimeError, match="cupy sees no CUDA device"):
        linked.device_op("cupy-cuda12x", lambda m: fake_cupy(0))
    assert "ran on" in linked.device_op("jax", lambda m: fake_jax(["gpu"]))
    with pytest.raises(RuntimeError, match=r"jax runs on the CPU only.*jax\[cuda12\]"):
        linked.device_op("jax", lambda m: fake_jax(["cpu"]))
    assert "CUDAExecutionProvider" in linked.device_op("onnxruntime-gpu",
                                                       lambda m: fake_ort(["CUDAExecutionProvider"], "GPU"))
    with pytest.raises(RuntimeError, match="ask for onnxruntime-gpu"):
        linked.device_op("onnxruntime", lambda m: fake_ort(["CPUExecutionProvider"], "CPU"))
    assert linked.device_op("requests", lambda m: pytest.fail("no op for it")) is None
