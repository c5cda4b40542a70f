"""The devel flavour's own questions; what every devel image must compile and run is data, in the devel stacks
(tests/stacks/*-devel, run by test_stacks.py).

A devel image is its runtime image plus layers: with the example image already built (`example_build`, the
torch25-devel stack's ``after``), the builder's cache makes its build take seconds and only the toolchain, nvcc and
CUDA_HOME layers are new. Offline, from a bundle: CUDA 12.4 (the toolkit .deb, the toolchain .debs and nvcc's wheels
from the bundle) and CUDA 13 (no toolkit .deb at all: the compiler's wheels from the bundle's wheelhouse), each a
small closure built with no network and compiling a kernel (tests/stacks/probes/nvcc.sh).
"""

import os
import shutil
from pathlib import Path

import pytest

from envkit.engine.protocol import Mount, RunOptions
from envkit.images.bundle import build_from_bundle, make_bundle
from envkit.images.bundle_manifest import verify_bundle
from envkit.lock import load_lock, sealed
from envkit.resolve import devel
from tests.integration.conftest import ROOT
from tests.integration.stacks import PROBES
from tests.integration.test_buildkit import ca_bundle

pytestmark = pytest.mark.integration

EMPTY_LAYER = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"  # an empty tar's diff_id


def test_devel_image_adds_layers_on_top_of_the_runtime_image(example_build, devel_build, engine):
    doc, _ = example_build
    runtime_id = doc["images"][0]["image_id"]  # by id: another build of the same lock may move the tag
    outcome, _ = devel_build("torch25-devel")
    # BuildKit gives WORKDIR a layer of its own, empty when the directory is there: not part of what is shared
    runtime = [d for d in engine.client.images.get(runtime_id).attrs["RootFS"]["Layers"] if d != EMPTY_LAYER]
    devel = [d for d in engine.client.images.get(outcome.tag).attrs["RootFS"]["Layers"] if d != EMPTY_LAYER]
    assert devel[:len(runtime)] == runtime, (
        "the devel image does not share the runtime image's layers: on a shared engine, did another build of the "
        "same instructions make a newer cache candidate (the classic builder takes the newest)?")
    assert 2 <= len(devel) - len(runtime) <= 5  # toolchain, nvcc wheels, compiler, CUDA_HOME
    info = engine.inspect(outcome.tag)
    assert info.env["CUDA_HOME"] == "/opt/cuda"
    assert info.labels["io.envkit.flavour"] == "devel"
    assert info.user == "1000:1000"


@pytest.mark.network
def test_devel_builds_offline_from_a_bundle(engine, tmp_path):
    """The devel template's offline variant: toolchain .debs, the toolkit .deb and the nvcc wheels
    all from a bundle, built with no network (a small closure: numpy and the CUDA runtime wheel)."""
    lock, image = _small_devel_lock()
    path = make_bundle(engine, lock, image.name, tmp_path / "bundle", ca_bundle=ca_bundle())
    files = verify_bundle(path)["files"]
    assert any(f.startswith("context/debs/nvcc/nvidia-cuda-toolkit_") for f in files)
    assert any(f.startswith("context/debs/devel/g++") for f in files)
    assert any(f.startswith("context/wheelhouse/nvidia_cuda_nvcc_cu12-") for f in files)
    assert_builds_offline_and_compiles(engine, path, "80", tmp_path)


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


@pytest.mark.network
def test_cuda13_devel_builds_offline_from_a_bundle(engine, tmp_path):
    """The CUDA 13 offline variant: no toolkit .deb at all, the compiler's wheels from the bundle's wheelhouse,
    built with no network (a small closure: numpy and the CUDA runtime wheel of examples/frameworks.yaml's torch)."""
    from envkit.index.closure import compile_closure
    from envkit.lock import Package

    lock = load_lock(ROOT / "examples" / "frameworks.lock")
    torch = lock.image("torch")
    runtime = next(p for p in torch.packages if p.name == "nvidia-cuda-runtime")
    pins = compile_closure(["numpy==2.*", f"nvidia-cuda-runtime=={runtime.version}"], python=torch.python,
                           glibc="2.41", index_url=torch.index_url)
    packages = tuple(Package(name=p.name, version=p.version, hashes=p.hashes, group="framework") for p in pins)
    image = devel.as_devel(torch.model_copy(update={"packages": packages}))
    image = sealed(image.model_copy(update={"name": "devel13-small"}))
    lock = lock.model_copy(update={"images": (image,)})
    path = make_bundle(engine, lock, image.name, tmp_path / "bundle", ca_bundle=ca_bundle())
    files = verify_bundle(path)["files"]
    assert not any(f.startswith("context/debs/nvcc/") for f in files)
    assert any(f.startswith("context/wheelhouse/nvidia_cuda_nvcc-13.0.") for f in files)
    assert_builds_offline_and_compiles(engine, path, "90", tmp_path)


def assert_builds_offline_and_compiles(engine, path: Path, arch: str, tmp_path: Path) -> None:
    """The bundle at ``path`` built with no network; in its image nvcc compiles a kernel for sm_ARCH. The image, and
    the images its classic build created, removed."""
    from tests.integration.test_buildkit import collect_created, remove_images

    made: list[str] = []
    outcome = build_from_bundle(engine, path, verify=False, progress=collect_created(made))
    try:
        src = tmp_path / "src"
        shutil.copytree(PROBES, src)
        os.chmod(src, 0o755)
        result = engine.run(outcome.tag, ["bash", "/src/nvcc.sh", arch],
                            RunOptions(timeout=300, network=False, mounts=(Mount(str(src), "/src", read_only=True),)))
        assert result.exit_code == 0 and "COMPILED" in result.stdout, result.stdout + result.stderr
    finally:
        remove_images(engine, outcome.image_id, created=made)
