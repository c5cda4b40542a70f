"""The devel flavour for CUDA 13: examples/frameworks.yaml's torch image (torch 2.14.1 cu130, Debian
trixie, Python 3.13) as flavour devel, its compiler wholly from the index (envkit/devel.py).

The devel group is locked as the resolver locks it (``devel.as_devel``: the compiler's closure
constrained by the image's framework closure), so the runtime layers are the example's own and the
classic builder's cache makes the build add only the devel layers when the example image was built
before (test_examples). Then, with no GPU and no network: nvcc reports the lock's release, compiles
a kernel for sm_90 and links an executable; torch.utils.cpp_extension builds and loads an extension
with a __global__ kernel. Nothing runs a kernel.
"""

import pytest

from envkit import devel as held  # what a locked devel image holds
from envkit.resolve import devel
from envkit.lock import load_lock, sealed
from tests.integration.conftest import ROOT
from tests.integration.test_devel import (EXTENSION, KERNEL, _ca, _options, assert_nvcc_compiles_and_links,
                                         built_devel_example)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def devel13(engine):
    yield from built_devel_example(engine, "torch", verify=False)


def test_the_lock_pins_the_compiler_of_its_cuda(devel13):
    _, image = devel13
    pins = {p.name: p.version for p in held.packages(image)}
    assert set(pins) == {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl"}
    assert all(v.startswith(image.cuda_major_minor + ".") for v in pins.values())


def test_nvcc_is_the_locked_release_and_compiles_and_links_for_sm90(devel13, engine, tmp_path):
    outcome, image = devel13
    assert_nvcc_compiles_and_links(engine, outcome.tag, image, tmp_path)


def test_torch_cpp_extension_with_a_kernel_builds_and_loads(devel13, engine, tmp_path):
    outcome, _ = devel13
    (tmp_path / "ext.py").write_text(EXTENSION)
    result = engine.run(outcome.tag, ["python", "/src/ext.py"],
                        _options(tmp_path, timeout=900, env={"TORCH_CUDA_ARCH_LIST": "9.0", "MAX_JOBS": "2"}))
    assert result.exit_code == 0, (result.stdout + result.stderr)[-4000:]
    assert "EXTENSION-LOADED envkit_devel_probe True" in result.stdout
    assert "/opt/cuda/bin/nvcc" in result.stdout + result.stderr  # torch found the compiler through CUDA_HOME


@pytest.mark.network
def test_cuda13_devel_builds_offline_from_a_bundle(engine, tmp_path):
    """The CUDA 13 offline variant: no toolkit .deb at all, the compiler's wheels from the bundle's wheelhouse,
    built with no network (a small closure: numpy and the CUDA runtime wheel of the example's torch)."""
    from envkit.images.bundle import build_from_bundle, make_bundle
    from envkit.images.bundle_manifest import verify_bundle
    from envkit.index.closure import compile_closure
    from envkit.lock import Package
    from tests.integration.test_buildkit import collect_created, remove_images

    lock = load_lock(ROOT / "examples" / "frameworks.lock")
    torch = lock.image("torch")
    runtime = next(p for p in torch.packages if p.name == "nvidia-cuda-runtime")
    pins = compile_closure(["numpy==2.*", f"nvidia-cuda-runtime=={runtime.version}"], python=torch.python,
                           glibc="2.41", index_url=torch.index_url)
    packages = tuple(Package(name=p.name, version=p.version, hashes=p.hashes, group="framework") for p in pins)
    image = devel.as_devel(torch.model_copy(update={"packages": packages}))
    image = sealed(image.model_copy(update={"name": "devel13-small"}))
    lock = lock.model_copy(update={"images": (image,)})
    path = make_bundle(engine, lock, image.name, tmp_path / "bundle", ca_bundle=_ca())
    files = verify_bundle(path)["files"]
    assert not any(f.startswith("context/debs/nvcc/") for f in files)
    assert any(f.startswith("context/wheelhouse/nvidia_cuda_nvcc-13.0.") for f in files)
    made: list[str] = []
    outcome = build_from_bundle(engine, path, verify=False, progress=collect_created(made))
    try:
        src = tmp_path / "src"
        src.mkdir()
        (src / "k.cu").write_text(KERNEL)
        script = "nvcc -c -arch=sm_90 /src/k.cu -o /tmp/k.o && test -s /tmp/k.o && echo COMPILED"
        result = engine.run(outcome.tag, ["bash", "-c", script], _options(src, timeout=300))
        assert result.exit_code == 0 and "COMPILED" in result.stdout, result.stdout + result.stderr
    finally:
        remove_images(engine, outcome.image_id, created=made)
