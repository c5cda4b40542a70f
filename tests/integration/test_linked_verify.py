"""Issue 32 in a real image: the small stack of test_buildkit.small_lock plus a CUDA 11 runtime
(nvidia-cuda-runtime-cu11, as a pip: package) beside the example's CUDA 12 image, built by the engine; the
payload's requested_imports, run inside it, fails naming the package, the library it ships and the image's CUDA.
(The torch payload cannot run whole on this torch-less image, so the check is run alone, as the payload runs it.)"""

from __future__ import annotations

import json

import pytest

from envkit.engine.protocol import RunOptions
from envkit.images.builder import build_image
from envkit.lock import Package, sealed
from tests.integration.test_buildkit import buildkit, ca_bundle, remove_images, small_lock  # noqa: F401

SNIPPET = """
import json, sys, time
sys.path.insert(0, "/opt/envkit/envkit_check")
import envkit_check_core as core, envkit_check_imports as imports
expect = json.loads(sys.argv[1])
r = imports.check_requested(core.Context(expect=expect, mode="verify", t0=time.monotonic()))
print(json.dumps({"status": r.status, "message": r.message, "entries": r.value}))
"""


@pytest.mark.integration
@pytest.mark.network
def test_a_cuda_11_runtime_beside_a_cuda_12_image_fails_verification_naming_it(engine, buildkit):  # noqa: F811
    from envkit.index.closure import compile_closure

    lock, image = small_lock("linked-cu11")
    cu11 = compile_closure(["nvidia-cuda-runtime-cu11==11.8.*"], python="3.11", glibc="2.36",
                           index_url="https://pypi.org/simple")
    have = {p.name for p in image.packages}
    packages = image.packages + tuple(Package(name=p.name, version=p.version, hashes=p.hashes, group="extra")
                                      for p in cu11 if p.name not in have)
    image = sealed(image.model_copy(update={"packages": packages,
                                            "requested": ("typing-extensions", "nvidia-cuda-runtime-cu11")}))
    lock = lock.model_copy(update={"images": (image,)})
    built = None
    try:
        built = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), progress=lambda *_: None,
                            verify=False, builder="buildkit")
        want = {p.name: p.version for p in image.packages}
        expect = {"requested": {n: want[n] for n in image.requested}, "cuda": image.cuda, "cudnn": image.cudnn}
        run = engine.run(built.tag, ["python3", "-c", SNIPPET, json.dumps(expect)],
                         RunOptions(timeout=180, network=False))
        assert run.exit_code == 0, run.stderr
        doc = json.loads(run.stdout.strip().splitlines()[-1])
        got = {e["name"]: e for e in doc["entries"]}
        assert doc["status"] == "failed", doc
        assert got["typing-extensions"]["status"] == "ok"
        assert got["nvidia-cuda-runtime-cu11"]["status"] == "failed"
        assert got["nvidia-cuda-runtime-cu11"]["error"] == (
            f"nvidia-cuda-runtime-cu11 ships libcudart.so.11.0, a CUDA 11 library, but the image has CUDA "
            f"{image.cuda.split('.')[0]}")
    finally:
        if built is not None:
            remove_images(engine, built.tag)


@pytest.mark.network
def test_resolve_refuses_the_same_stack_naming_the_library_that_fits(tmp_path):
    from envkit.catalog.files import load_catalog, packaged_dir
    from envkit.index.client import PackageIndex
    from envkit.resolve.binaries import BinaryMismatch
    from envkit.resolve.resolver import resolve
    from envkit.spec import load_spec
    from tests.integration.conftest import ROOT

    text = (ROOT / "examples" / "team.yaml").read_text().replace(
        'pip: ["numpy==2.1.*"]', 'pip: ["numpy==2.1.*", "nvidia-cuda-runtime-cu11==11.8.*"]')
    assert "nvidia-cuda-runtime-cu11" in text
    (tmp_path / "team.yaml").write_text(text)
    with pytest.raises(BinaryMismatch) as exc:
        resolve(load_spec(tmp_path / "team.yaml"), load_catalog(packaged_dir()), PackageIndex())
    assert "nvidia-cuda-runtime-cu11" in exc.value.message and "is built for CUDA 11" in exc.value.message
    assert exc.value.hint.startswith("ask for nvidia-cuda-runtime-cu12 instead")
