"""`build.variant_index_url`: a non-default PyTorch build resolved from a local mirror of PyTorch's variant indexes.

PyTorch's own index (download.pytorch.org/whl/{variant}) is not reachable from many companies, nor from this
machine. The mirror here (``pyindex.PackageIndexServer`` at ``http://127.0.0.1:PORT/whl/cu126``) serves what
the resolver needs for examples/variant.yaml's image (V100s: torch 2.11's cu126 build, not PyPI's default
cu130): the torch wheel, as the smallest faithful stand-in (``pyindex.make_torch_standin``: the real file name
``torch-2.11.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl``, the real Requires-Dist pins of the cu126 runtime,
cuDNN and NCCL, and the arch flags string in ``torch/lib/libtorch_python.so``, a few KiB where the real wheel is
about 800 MB). The rest of the closure (the nvidia-* wheels' metadata, filelock, ...) comes from PyPI, the spec's
index, as it would beside a real mirror. Nothing is built: the closure's CUDA wheels are gigabytes, and the
stand-in is no torch to verify; `envkit render` shows what the build's pip would be told.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from envkit.index.urls import DEFAULT_INDEX
from tests.integration.conftest import ENVKIT, ROOT
from tests.integration.pyindex import PackageIndexServer, make_torch_standin

LINUX_X86 = 'platform_system == "Linux" and platform_machine == "x86_64"'
ARCH_FLAGS = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90"  # the catalog's torch 2.11 cu126 list


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("variant-mirror")
    wheel = make_torch_standin(wheels, "2.11.0", "cu126", python="3.11", arch_flags=ARCH_FLAGS, requires=[
        "filelock", "typing-extensions>=4.10.0", f"nvidia-cuda-runtime-cu12==12.6.77; {LINUX_X86}",
        f"nvidia-cudnn-cu12==9.10.2.21; {LINUX_X86}", f"nvidia-nccl-cu12==2.28.9; {LINUX_X86}"])
    with PackageIndexServer(wheels, host="127.0.0.1", root="/whl/cu126") as server:
        yield server, wheel


def run_envkit(*args, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "ENVKIT_OFFLINE"}
    return subprocess.run([*ENVKIT, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**environ, **(env or {})})


@pytest.mark.integration
@pytest.mark.network
def test_resolve_locks_the_torch_wheel_from_the_variant_mirror(mirror, tmp_path):
    server, wheel = mirror
    mirror_cu126 = server.url()
    spec = tmp_path / "variant.yaml"
    spec.write_text((ROOT / "examples" / "variant.yaml").read_text().replace(
        "images:", f'build:\n  variant_index_url: "http://127.0.0.1:{server.port}/whl/{{variant}}"\nimages:'))
    server.clear()
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}  # no reading cached from an earlier run: the mirror is asked
    proc = run_envkit("resolve", spec, "--json", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    image = json.loads((tmp_path / "variant.lock").read_text())["images"][0]
    # the lock's index is the mirror's cu126 index; the rest of the closure from the spec's (PyPI)
    assert (image["variant"], image["index_url"], image["extra_index_url"]) == ("cu126", mirror_cu126, DEFAULT_INDEX)
    torch = next(p for p in image["packages"] if p["name"] == "torch")
    assert torch["version"] == "2.11.0+cu126"
    assert torch["hashes"] == ["sha256:" + hashlib.sha256(wheel.read_bytes()).hexdigest()]  # the mirror's file
    assert (image["cuda"], image["cudnn"], image["nccl"]) == ("12.6.77", "9.10.2.21", "2.28.9")  # its METADATA
    reasons = {d["topic"]: d["reason"] for d in image["decisions"]}
    assert reasons["torch"].endswith(f"so it comes from {mirror_cu126}")
    assert f"on {mirror_cu126}" in reasons["bundled"]
    assert image["arch_list"] == ARCH_FLAGS.split() and f"{wheel.name} on {mirror_cu126}" in reasons["arch_list"]
    asked = [(r.path, r.status) for r in server.requests]
    assert ("/whl/cu126/torch/", 200) in asked and (f"/files/{wheel.name}.metadata", 200) in asked
    assert (f"/files/{wheel.name}", 206) in asked  # the arch list: the wheel's directory and one member, by ranges

    # render: the build's uv asks the indexes as the resolver did (index.urls.uv_index_args: uv asks
    # --extra-index-url first, so the mirror goes there), a plain-http mirror named as it is
    out = tmp_path / "out"
    rendered = run_envkit("render", spec, "--out", out, "--locked", "--json")
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    dockerfile = (out / "dockerfiles" / "torch211" / "Dockerfile").read_text()
    assert f"--index-url {DEFAULT_INDEX} --extra-index-url {mirror_cu126}" in dockerfile
    requirements = "".join(p.read_text() for p in (out / "dockerfiles" / "torch211").rglob("*.txt"))
    assert "torch==2.11.0+cu126" in requirements


@pytest.mark.integration
@pytest.mark.network
def test_doctor_asks_the_variant_mirror(mirror, tmp_path):
    server, _ = mirror
    spec = tmp_path / "variant.yaml"
    spec.write_text((ROOT / "examples" / "variant.yaml").read_text().replace(
        "images:", f'build:\n  variant_index_url: "http://127.0.0.1:{server.port}/whl/{{variant}}"\nimages:'))
    server.clear()
    proc = run_envkit("doctor", "--spec", spec, "--store", tmp_path / "absent.sqlite", "--json", timeout=300)
    found = {f["name"]: f for f in json.loads(proc.stdout)["findings"]}
    assert found["framework_index"]["status"] == "ok", found["framework_index"]
    assert found["framework_index"]["value"].startswith(f"{server.url()}/torch/")
    assert found["framework_index"]["value"].endswith("(for torch211)")
    assert ("/whl/cu126/torch/", 200) in [(r.path, r.status) for r in server.requests]
