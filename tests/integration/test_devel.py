"""The devel flavour for CUDA 12.4: the example image's lock as flavour "devel" (its devel group locked
as the resolver locks it), built from the devel template. CUDA 13: test_devel_cuda13.py.

A devel image is its runtime image plus layers, so with the example image already built (the
`example_build` fixture) the classic builder's cache makes this build take seconds: only the
toolchain, nvcc and CUDA_HOME layers are new. Then, with no GPU and no network, nvcc compiles a
kernel and torch.utils.cpp_extension builds, links and loads an extension with a __global__ kernel.
"""

import os
from pathlib import Path

import pytest

from envkit.resolve import devel
from envkit.images.builder import build_image
from envkit.engine.protocol import Mount, RunOptions
from envkit.lock import load_lock, sealed
from tests.integration.conftest import ROOT, remove_built

pytestmark = pytest.mark.integration

KERNEL = """
__global__ void add_one(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
"""

# The kernel's file includes nothing of torch, so only the binding compiles torch's headers (the slow part:
# load_inline would have put them in front of the .cu file too, a second heavy translation unit).
EXTENSION = r'''
import os
from torch.utils.cpp_extension import load

kernel = r"""
#include <cstdint>
__global__ void add_one_kernel(float* x, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
void add_one_launch(float* x, int64_t n) { add_one_kernel<<<(n + 255) / 256, 256>>>(x, n); }
"""
binding = r"""
#include <torch/extension.h>
void add_one_launch(float* x, int64_t n);
void add_one(torch::Tensor x) { add_one_launch(x.data_ptr<float>(), x.numel()); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); }
"""
os.makedirs("/tmp/ext/src", exist_ok=True)
for name, text in (("kernel.cu", kernel), ("binding.cpp", binding)):
    with open(f"/tmp/ext/src/{name}", "w") as f:
        f.write(text)
module = load("envkit_devel_probe", ["/tmp/ext/src/binding.cpp", "/tmp/ext/src/kernel.cu"], build_directory="/tmp/ext",
              verbose=True)
print("EXTENSION-LOADED", module.__name__, callable(module.add_one))
'''


EMPTY_LAYER = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"  # an empty tar's diff_id


@pytest.fixture(scope="module")
def devel_image(example_build, engine):
    doc, _ = example_build
    lock = load_lock(ROOT / "examples" / "team.lock")
    image = devel.as_devel(lock.images[0])  # the devel group, locked as the resolver locks it
    image = sealed(image.model_copy(update={"name": f"{lock.images[0].name}-devel"}))
    lock = lock.model_copy(update={"images": (image,)})
    outcome = build_image(engine, lock, image, "examples/team.yaml", ca_bundle=_ca(), progress=lambda *_: None,
                          verify=False)
    yield outcome, doc["images"][0]["image_id"], image  # by id: another build of the same lock may move the tag
    remove_built(engine, [outcome.tag])  # with its nvcc-tools stage image (it was left behind before)


def test_devel_image_adds_layers_on_top_of_the_runtime_image(devel_image, engine):
    outcome, runtime_tag, image = devel_image
    # BuildKit gives WORKDIR a layer of its own, empty when the directory is there: not part of what is shared
    runtime = [d for d in engine.client.images.get(runtime_tag).attrs["RootFS"]["Layers"] if d != EMPTY_LAYER]
    devel = [d for d in engine.client.images.get(outcome.tag).attrs["RootFS"]["Layers"] if d != EMPTY_LAYER]
    assert devel[:len(runtime)] == runtime, (
        "the devel image does not share the runtime image's layers: on a shared engine, did another build of the "
        "same instructions make a newer cache candidate (the classic builder takes the newest)?")
    assert 2 <= len(devel) - len(runtime) <= 5  # toolchain, nvcc wheels, compiler, CUDA_HOME
    info = engine.inspect(outcome.tag)
    assert info.env["CUDA_HOME"] == "/opt/cuda"
    assert info.labels["io.envkit.flavour"] == "devel"
    assert info.user == "1000:1000"


def test_nvcc_matches_the_locked_cuda_and_compiles_a_kernel(devel_image, engine, tmp_path):
    outcome, _, image = devel_image
    (tmp_path / "k.cu").write_text(KERNEL)
    script = "nvcc --version && nvcc -c -arch=sm_80 /src/k.cu -o /tmp/k.o && test -s /tmp/k.o && echo COMPILED"
    result = engine.run(outcome.tag, ["bash", "-c", script], _options(tmp_path, timeout=300))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"release {image.cuda_major_minor}," in result.stdout
    assert "COMPILED" in result.stdout


def test_torch_cpp_extension_with_a_kernel_builds_and_loads(devel_image, engine, tmp_path):
    """The host-side build of a CUDA extension: nvcc + g++ + ninja, linked against the wheels' libcudart."""
    outcome, _, _ = devel_image
    (tmp_path / "ext.py").write_text(EXTENSION)
    result = engine.run(outcome.tag, ["python", "/src/ext.py"],
                        _options(tmp_path, timeout=900, env={"TORCH_CUDA_ARCH_LIST": "8.0", "MAX_JOBS": "2"}))
    assert result.exit_code == 0, (result.stdout + result.stderr)[-4000:]
    assert "EXTENSION-LOADED envkit_devel_probe True" in result.stdout
    assert "/opt/cuda/bin/nvcc" in result.stdout + result.stderr  # torch found the compiler through CUDA_HOME


@pytest.mark.network
def test_devel_builds_offline_from_a_bundle(engine, tmp_path):
    """The devel template's offline variant: toolchain .debs, the toolkit .deb and the nvcc wheels
    all from a bundle, built with no network (a small closure: numpy and the CUDA runtime wheel)."""
    from envkit.images.bundle import build_from_bundle, make_bundle
    from envkit.images.bundle_manifest import verify_bundle
    from tests.integration.test_buildkit import collect_created, remove_images

    lock, image = _small_devel_lock()
    path = make_bundle(engine, lock, image.name, tmp_path / "bundle", ca_bundle=_ca())
    files = verify_bundle(path)["files"]
    assert any(f.startswith("context/debs/nvcc/nvidia-cuda-toolkit_") for f in files)
    assert any(f.startswith("context/debs/devel/g++") for f in files)
    assert any(f.startswith("context/wheelhouse/nvidia_cuda_nvcc_cu12-") for f in files)
    made: list[str] = []  # the images this classic build created, removed at the end
    outcome = build_from_bundle(engine, path, verify=False,
                                progress=collect_created(made))
    try:
        src = tmp_path / "src"
        src.mkdir()
        (src / "k.cu").write_text(KERNEL)
        script = "nvcc -c -arch=sm_80 /src/k.cu -o /tmp/k.o && test -s /tmp/k.o && echo COMPILED"
        result = engine.run(outcome.tag, ["bash", "-c", script], _options(src, timeout=300))
        assert result.exit_code == 0 and "COMPILED" in result.stdout, result.stdout + result.stderr
    finally:
        remove_images(engine, outcome.image_id, created=made)


def _small_devel_lock():
    from envkit.index.closure import compile_closure
    from envkit.lock import Package

    lock = load_lock(ROOT / "examples" / "team.lock")
    pins = compile_closure(["numpy==2.1.*", f"nvidia-cuda-runtime-cu12=={lock.images[0].cuda}"], python="3.11",
                           glibc="2.36", index_url="https://pypi.org/simple")
    packages = tuple(Package(name=p.name, version=p.version, hashes=p.hashes, group="framework") for p in pins)
    image = devel.as_devel(lock.images[0].model_copy(update={"packages": packages}))
    image = sealed(image.model_copy(update={"name": "devel-small"}))
    return lock.model_copy(update={"images": (image,)}), image


MAIN = KERNEL + r"""
#include <cstdio>
int main() { printf("%p\n", (void *)add_one); return 0; }
"""


def assert_nvcc_compiles_and_links(engine, tag: str, image, src: Path) -> None:
    """In ``tag``: nvcc is the lock's release, compiles a kernel for sm_90 and links an executable that runs."""
    nvcc = next(p.version for p in image.packages if p.name == "nvidia-cuda-nvcc")
    (src / "k.cu").write_text(KERNEL)
    (src / "main.cu").write_text(MAIN)
    script = ("nvcc --version && nvcc -c -arch=sm_90 /src/k.cu -o /tmp/k.o && test -s /tmp/k.o && echo COMPILED "
              "&& nvcc -arch=sm_90 /src/main.cu -o /tmp/main && /tmp/main && echo LINKED")
    result = engine.run(tag, ["bash", "-c", script], _options(src, timeout=300))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"release {image.cuda_major_minor}, V{nvcc}" in result.stdout
    assert "COMPILED" in result.stdout and "LINKED" in result.stdout


def built_devel_example(engine, example: str, *, verify: bool):
    """Module fixture body: examples/frameworks.lock's EXAMPLE image built as its devel flavour (as the resolver
    locks `flavour: devel`, the same lock hash), named EXAMPLE-devel; yields (outcome, image), then removes it."""
    import time

    lock = load_lock(ROOT / "examples" / "frameworks.lock")
    image = sealed(devel.as_devel(lock.image(example)).model_copy(update={"name": f"{example}-devel"}))
    lock = lock.model_copy(update={"images": (image,)})
    started = time.monotonic()
    outcome = build_image(engine, lock, image, "examples/frameworks.yaml", ca_bundle=_ca(),
                          progress=lambda *_: None, verify=verify)
    print(f"{example} devel (CUDA {image.cuda_major_minor}) build{' + verify' if verify else ''}: "
          f"{time.monotonic() - started:.1f} s")
    yield outcome, image
    try:
        engine.client.images.remove(outcome.tag, force=True)
    except Exception:  # noqa: BLE001 - best effort cleanup
        pass


def _options(src: Path, *, timeout: int, env: dict | None = None) -> RunOptions:
    os.chmod(src, 0o755)
    return RunOptions(timeout=timeout, network=False, env=env or {},
                      mounts=(Mount(str(src), "/src", read_only=True),))


def _ca():
    value = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    return Path(value) if value and Path(value).is_file() else None
