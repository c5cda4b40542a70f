"""JAX and TensorFlow images after the lock: framework facts (envkit/frameworks.py), the rendered
context, the refusals (bundles, devel; a framework envkit does not build), and the host's verdict
on JAX and TensorFlow payload documents.

As in test_certificate.py, payload documents fake the device FACTS only; the outcome is always
``decide``'s.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest

from envkit import frameworks
from envkit.images.builder import build_image
from envkit.certify.verdict import decide
from envkit.payload.harness import expect_from_labels
from envkit.errors import BuildError, EnvkitError
from envkit.lock import Package, load_lock
from envkit.app.build import build_spec
from envkit.render.files import context_for, render_files
from tests.conftest import ROOT
from tests.unit.lockfixtures import make_image, make_jax_image, make_lock, make_tf_image
from tests.unit.payload_modules import payload_module, payload_sources, rendered_payload
from envkit.frameworks import expected

FRAMEWORKS_LOCK = ROOT / "examples" / "frameworks.lock"
JAX = make_jax_image()
EXPECT = expected(JAX)
STATIC = ("python_version", "jax_version", "cuda_runtime", "cudnn_version", "nccl_version", "pip_check",
          "cpu_train_step")
H200 = {"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": 105.0}
V100 = {"index": 1, "name": "Tesla V100-SXM2-32GB", "cc": "7.0", "memory_gib": 24.0}


# ------------------------------------------------------------------- what the lock says
def test_jax_expect_comes_from_the_lock():
    assert EXPECT == {"framework": "jax", "jax": "0.12.0.1", "jaxlib": "0.12.0.1", "cuda_plugin": "0.12.0.1",
                      "cuda": "13.5.37", "cudnn": "9.28.1.4", "nccl": "2.32.3", "min_cc": "7.5", "python": "3.13",
                      "driver_floor": "580"}


def test_torch_expect_is_unchanged():
    assert expected(make_image()) == {"torch": "2.5.1", "cuda": "12.4", "cudnn": "9.1.0.70", "nccl": "2.21.5",
                                     "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
                                     "python": "3.11", "driver_floor": "525.60.13"}


@pytest.mark.parametrize("image", [make_image(), make_jax_image(), make_tf_image()], ids=["torch", "jax", "tf"])
def test_pin_labels_say_what_the_lock_says(image):
    """`envkit verify IMAGE` without a lock reads the labels: the same expectations as the lock."""
    labels = dict(context_for(make_lock(image), image, "team.yaml").labels)
    assert expect_from_labels(labels) == expected(image)


def test_jax_labels_carry_its_own_pins_and_no_arch_list():
    labels = dict(context_for(make_lock(JAX), JAX, "team.yaml").labels)
    assert labels["io.envkit.framework"] == "jax==0.12.0.1"
    assert labels["io.envkit.min-cc"] == "7.5" and labels["io.envkit.jaxlib"] == "0.12.0.1"
    assert labels["io.envkit.cuda-plugin"] == "0.12.0.1" and labels["io.envkit.cuda"] == "13.5.37"
    assert "io.envkit.arch-list" not in labels
    torch_labels = dict(context_for(make_lock(make_image()), make_image(), "team.yaml").labels)
    assert "io.envkit.min-cc" not in torch_labels and torch_labels["io.envkit.arch-list"].startswith("sm_50")


# ------------------------------------------------------------------------- rendering
@pytest.fixture(scope="module")
def example_jax():
    lock = load_lock(FRAMEWORKS_LOCK)
    return lock, lock.image("jax")


def test_jax_dockerfile_is_the_runtime_flavour(example_jax):
    lock, image = example_jax
    files = render_files(lock, image, "examples/frameworks.yaml")
    text = files["Dockerfile"].decode()
    assert text.count("FROM ") == 2  # os, runtime (the environment installed where it runs)
    assert "FROM envkit-base/debian:trixie-minbase-" in text
    assert "--require-hashes" in text and "--no-deps" in text and "--only-binary :all:" in text
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in text
    assert "torch" not in text.lower()
    assert "site-ca" not in text.split("AS runtime", 1)[1]
    framework = files["requirements/framework.txt"].decode()
    cuda = files["requirements/cuda.txt"].decode()  # the CUDA wheels: a layer of their own
    for pin in ("jax==0.12.0.1", "jaxlib==0.12.0.1", "jax-cuda13-plugin==0.12.0.1"):
        assert f"{pin} \\\n    --hash=sha256:" in framework, pin
    for pin in ("nvidia-cudnn-cu13==9.28.1.4", "nvidia-nccl-cu13==2.32.6", "nvidia-cuda-runtime==13.5.37"):
        assert f"{pin} \\\n    --hash=sha256:" in cuda, pin
    assert json.loads(files["envkit/expect.json"]) == expected(image)
    assert rendered_payload(files) == payload_sources()


def test_jax_cuda13_devel_renders_with_no_nvcc_stage_when_the_closure_holds_the_compiler():
    """jax[cuda13]'s closure locks nvcc, crt, nvvm and cccl (the plugin uses ptxas): the devel group is empty,
    so the devel image adds the toolchain and CUDA_HOME's links only."""
    compiler = (("nvidia-cuda-nvcc", "13.5.37"), ("nvidia-cuda-crt", "13.5.37"), ("nvidia-nvvm", "13.5.37"),
                ("nvidia-cuda-cccl", "13.3.5.0.6"))
    packages = (*JAX.packages, *(Package(name=n, version=v, hashes=("sha256:" + "9" * 64,), group="framework")
                                 for n, v in compiler))
    image = make_jax_image(flavour="devel", packages=packages)
    files = render_files(make_lock(image), image, "team.yaml")
    text = files["Dockerfile"].decode()
    assert " AS nvcc" not in text and "COPY --from=nvcc" not in text and ".deb" not in text
    assert "framework closure already holds every compiler wheel" in text
    assert 'for d in "$nv"/*/bin "$nv"/*/nvvm; do' in text and "CUDA_HOME=/opt/cuda" in text
    assert "ln -s lib64 /opt/cuda/lib" in text  # CUDA 13.5's nvcc.profile links from $(TOP)/lib
    assert "g++ python3-dev ninja-build" in text
    assert "nvidia-cuda-nvcc" not in files["requirements/devel.txt"].decode()
    assert ("io.envkit.flavour", "devel") in context_for(make_lock(image), image, "t").labels


def test_jax_devel_without_the_compiler_in_its_lock_is_refused_with_the_way_out():
    image = make_jax_image(flavour="devel")  # no nvcc anywhere in the lock
    with pytest.raises(EnvkitError, match="nvidia-cuda-nvcc") as err:
        render_files(make_lock(image), image, "team.yaml")
    assert "envkit resolve" in err.value.hint


def test_jax_cuda12_devel_is_refused_for_its_cuda_release_with_the_way_out():
    """Render reads the lock alone: a CUDA 12 devel image whose lock pins no toolkit .deb is refused, and the way
    out is resolve, which refuses the release with its own (tests/unit/resolve/test_devel.py)."""
    image = make_jax_image(flavour="devel", variant="cuda12", cuda="12.9.79", cuda_major_minor="12.9")
    with pytest.raises(EnvkitError, match="no CUDA compiler for CUDA 12.9") as err:
        render_files(make_lock(image), image, "team.yaml")
    assert "the CUDA 12 nvcc wheels hold no nvcc driver" in err.value.message
    assert "envkit resolve" in err.value.hint


# ------------------------------------------------------------------------- refusals
class NoBuildEngine:
    """Any attempt to build (or look for a base) fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"the engine was used ({name}) before the refusal")


@pytest.fixture
def tensorflow_not_built(monkeypatch):
    """Every framework envkit locks is built today; the refusal is shown on TensorFlow as it was."""
    monkeypatch.setitem(frameworks.FRAMEWORKS, "tensorflow", dataclasses.replace(frameworks.TENSORFLOW, builds=False))


def test_build_refuses_a_framework_it_does_not_build_before_building_anything(tmp_path, monkeypatch,
                                                                              tensorflow_not_built):
    monkeypatch.chdir(ROOT)
    with pytest.raises(BuildError) as err:
        build_spec(ROOT / "examples" / "frameworks.yaml", tmp_path, NoBuildEngine(), lock_path=FRAMEWORKS_LOCK)
    assert err.value.message == ("image 'tf' is locked (tensorflow 2.20.0) but envkit builds only PyTorch and JAX "
                                 "images so far; TensorFlow images resolve and lock, and building them is next")
    assert err.value.exit_code == 7


def test_build_image_refuses_it_too(tensorflow_not_built):
    """nightly builds through build_image: it refuses there as well."""
    lock = load_lock(FRAMEWORKS_LOCK)
    with pytest.raises(BuildError, match="builds only PyTorch and JAX images"):
        build_image(NoBuildEngine(), lock, lock.image("tf"), "examples/frameworks.yaml", ca_bundle=None,
                    progress=lambda *_: None)


def test_every_locked_framework_builds():
    lock = load_lock(FRAMEWORKS_LOCK)
    for image in lock.images:
        frameworks.require_buildable(image)
    assert frameworks._titles([f for f in frameworks.FRAMEWORKS.values() if f.builds]) == "PyTorch, JAX and TensorFlow"


def test_every_locked_framework_bundles():
    lock = load_lock(FRAMEWORKS_LOCK)
    for image in lock.images:
        frameworks.require_bundle(image)
    assert frameworks._titles([f for f in frameworks.FRAMEWORKS.values() if f.bundles]) == "PyTorch, JAX and TensorFlow"


def test_a_framework_without_bundles_is_refused_with_the_way_out(monkeypatch):
    monkeypatch.setitem(frameworks.FRAMEWORKS, "jax", dataclasses.replace(frameworks.JAX, bundles=False))
    with pytest.raises(BuildError) as err:
        frameworks.require_bundle(JAX)
    assert "envkit bundles only PyTorch and TensorFlow images so far" in err.value.message
    assert "envkit build SPEC --image jax" in err.value.message
    frameworks.require_bundle(make_image())  # torch: fine


# --------------------------------------------------------------------- the verdict
def check(name, status="passed", message="ok"):
    return {"name": name, "status": status, "value": None, "expected": None, "message": message, "seconds": 0.1}


def gpu_doc(gpus=(H200,), driver="580.95.05", **facts):
    base = {"framework": "jax", "python": "3.13.5", "jax": "0.12.0.1", "jaxlib": "0.12.0.1", "cuda_plugin": "0.12.0.1",
            "cuda": "13.5.37", "cudnn": "9.28.1.4", "nccl": "2.32.3", "backend": "gpu", "driver": driver,
            "gpus": [dict(g) for g in gpus]}
    base.update(facts)
    return {"schema": "envkit.payload/1", "payload": {"version": "1", "sha256": "f" * 64}, "mode": "certify",
            "status": "certified", "facts": base,
            "checks": [check(n) for n in STATIC] + [check(n) for n in frameworks.JAX.gpu_checks],
            "telemetry": [], "seconds": 30.0}


def cpu_doc(**facts):
    doc = gpu_doc(gpus=(), driver=None, backend="cpu", **facts)
    doc.update(mode="verify", status="verified")
    doc["checks"] = [check(n) for n in STATIC] + [check(n, "skipped", "no CUDA device visible")
                                                  for n in frameworks.JAX.gpu_checks]
    return doc


def set_check(doc, name, status, message=""):
    doc = copy.deepcopy(doc)
    for c in doc["checks"]:
        if c["name"] == name:
            c.update(status=status, message=message)
    return doc


def test_jax_certified_on_h200_and_verified_on_cpu():
    assert decide(gpu_doc(), EXPECT, gpu_requested=True) == ("certified", ())
    assert decide(cpu_doc(), EXPECT, gpu_requested=False) == ("verified", ())


@pytest.mark.parametrize("fact, value, words", [
    ("cudnn", "9.28.1.5", ["cuDNN", "9.28.1.4", "9.28.1.5", "every component"]),
    ("cuda", "13.5.36", ["CUDA runtime", "13.5.37", "13.5.36"]),
    ("nccl", "2.32", ["NCCL", "2.32.3"]),
    ("jaxlib", "0.12.0", ["jaxlib", "0.12.0.1", "0.12.0"]),
    ("cuda_plugin", "0.11.2", ["JAX CUDA plugin", "0.11.2"]),
    ("jax", None, ["jax: the lock expects 0.12.0.1 but the image has none"]),
    ("cudnn", None, ["cuDNN", "has none"]),
])
def test_jax_library_mismatch_fails_even_when_the_payload_says_passed(fact, value, words):
    status, reasons = decide(gpu_doc(**{fact: value}), EXPECT, gpu_requested=True)
    assert status == "failed"
    assert any(all(w in r for w in words) for r in reasons), reasons


def test_gpu_below_the_jax_builds_min_cc_fails():
    status, reasons = decide(gpu_doc(gpus=(H200, V100)), EXPECT, gpu_requested=True)
    assert status == "failed"
    assert reasons == ("JAX build needs compute capability >= 7.5; Tesla V100-SXM2-32GB is cc 7.0",)


def test_no_min_cc_in_the_lock_cannot_certify():
    expect = {k: v for k, v in EXPECT.items() if k != "min_cc"}
    status, reasons = decide(gpu_doc(), expect, gpu_requested=True)
    assert status == "failed" and "gives no minimum compute capability" in reasons[0]


def test_required_jax_gpu_checks_must_really_pass():
    for name in frameworks.JAX.required_gpu_checks:
        status, reasons = decide(set_check(gpu_doc(), name, "skipped", "no CUDA device visible"), EXPECT,
                                 gpu_requested=True)
        assert status == "failed" and any(f"GPU check {name} did not pass (skipped)" in r for r in reasons)
    # the perf probes may skip or pass without floors; only the required three make it certified
    assert decide(set_check(gpu_doc(), "matmul_tflops", "skipped"), EXPECT, gpu_requested=True)[0] == "certified"


def test_jax_gpu_check_claimed_passed_without_a_gpu_fails():
    doc = set_check(cpu_doc(), "gpu_train_step", "passed", "bf16 loss fell")
    status, reasons = decide(doc, EXPECT, gpu_requested=False)
    assert status == "failed" and "claims GPU check gpu_train_step passed with no GPU visible" in reasons


def test_framework_is_the_locks_not_the_payloads():
    """A JAX document judged against a torch lock (the wrong image, or a payload that says otherwise) fails."""
    status, reasons = decide(gpu_doc(), expected(make_image()), gpu_requested=True)
    assert status == "failed"
    assert "torch: the lock expects 2.5.1 but the image has none" in reasons
    assert any("GPU check cuda_available did not pass" in r for r in reasons)


def test_images_of_a_framework_envkit_does_not_build_are_not_judged(tensorflow_not_built):
    tf = load_lock(FRAMEWORKS_LOCK).image("tf")
    assert decide(cpu_doc(), expected(tf), gpu_requested=False) == (
        "failed", ("envkit does not verify TensorFlow images yet",))


def test_gpu_check_names_match_the_payload_registries():
    runner = payload_module("envkit_check_main")
    assert set(runner.FRAMEWORKS) == {frameworks.TORCH.name, frameworks.JAX.name, frameworks.TENSORFLOW.name}
    for fw in (frameworks.TORCH, frameworks.JAX, frameworks.TENSORFLOW):
        registry = runner.framework_module(fw.name).REGISTRY
        assert tuple(name for name, _, gpu_only in registry if gpu_only) == fw.gpu_checks
        assert set(fw.required_gpu_checks) <= set(fw.gpu_checks)
        assert fw.deviceless_gpu_checks <= set(fw.gpu_checks)


def test_every_locked_framework_is_known():
    for path in (ROOT / "examples").glob("*.lock"):
        for image in load_lock(path).images:
            assert frameworks.framework(image.framework).name == image.framework
    with pytest.raises(EnvkitError, match="knows no framework 'mxnet'"):
        frameworks.framework("mxnet")


def test_each_framework_answers_the_stages_questions_itself():
    """One component per framework (issue 33, item 3): the resolver's builds (``resolve.candidates.BUILDS``) have a row
    for every framework and no other, and a framework judged by arch list names where its wheel holds that list
    (``Framework.arch``: the member ``index.wheel_arches`` reads, with a parser it has, and the text the catalog's
    check-arches source texts quote)."""
    from envkit.index.wheel_arches import PARSERS
    from envkit.resolve.candidates import BUILDS

    assert set(BUILDS) == set(frameworks.FRAMEWORKS)
    assert {n for n, f in frameworks.FRAMEWORKS.items() if f.arch} == set(frameworks.ARCH_LISTED)
    for f in frameworks.FRAMEWORKS.values():
        assert f.arch is None or (f.arch.parser in PARSERS and f.arch.member.startswith(f.name + "/") and f.arch.text)


def test_each_framework_says_what_the_companions_refresh_reads():
    """``Framework.companions`` (issue 33, item 3): no framework name is asked in catalog/refresh/companions*.py; each
    framework says how its wheels pin companions (named packages, an extra, or the cudaNN extras) and which companions
    declare it, as companions.yaml's rows hold them."""
    from envkit.catalog.files import load_catalog

    catalog = load_catalog()
    for name, f in frameworks.FRAMEWORKS.items():
        how = f.companions
        assert how.cuda_extras or how.pinned or how.pinned_extra, name  # its wheels pin something
        assert not how.pinned_extra or how.pinned_extra in f.extras  # an extra team.yaml may ask for too
        packages = {p for row in catalog.companion_rows.rows_of(name) for p, _ in row.packages}
        assert {p for p, _, _ in how.declared} <= packages | {"torchtext"}, name  # (torchtext: no row since 2.4)
    assert frameworks.JAX.companions.rows == "version" and frameworks.TORCH.companions.rows == "series"
    for module in ("companions.py", "companions_read.py"):
        text = (ROOT / "envkit" / "catalog" / "refresh" / module).read_text()
        assert not re.search(r'framework [!=]= "', text), module


def test_each_framework_has_its_catalog_rows():
    """catalog/releases.py reads each framework file's rows (one table, a row per framework): every row's patches
    are releases the catalog lists, and each framework's table row exists."""
    from envkit.catalog.files import load_catalog
    from envkit.catalog.releases import ROWS, lists_release, release_rows

    assert set(ROWS) == set(frameworks.FRAMEWORKS)
    catalog = load_catalog()
    for name in frameworks.FRAMEWORKS:
        rows = release_rows(catalog, name)
        assert rows and all(lists_release(catalog, name, p) for patches in rows.values() for p in patches)
        assert not lists_release(catalog, name, "0.0.1")
