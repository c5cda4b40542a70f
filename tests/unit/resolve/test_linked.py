"""resolve/linked.py: the shared libraries unknown compiled packages link (DT_NEEDED readings, recorded) against the
image's CUDA and cuDNN majors, and CPU-only accelerator libraries in a GPU image (the packaged binaries.yaml)."""

from __future__ import annotations

import hashlib

import pytest

from envkit.catalog.files import load_catalog, packaged_dir
from envkit.catalog.models import PyRange
from envkit.index.closure import REQUESTED, Pin
from envkit.resolve import binaries, joint, linked
from envkit.resolve.candidates import Candidate
from tests.unit.index.test_index import server  # noqa: F401 (the fixture)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(packaged_dir())


def cand(version="2.8.0", cuda="12.8", variant="cu128"):
    return Candidate("torch", version, variant, cuda, None, None, ("8.0",), None, PyRange(min="3.9", max="3.13"), True,
                     None, f"torch=={version}", True)


def _pin(name, version, *via):
    return Pin(name, version, ("sha256:" + hashlib.sha256(f"{name}{version}".encode()).hexdigest(),),
               via or (REQUESTED,))


def target(*extras):
    return joint.Target("img", tuple(extras), "3.11", "2.36")


# what wheel_needed read from each wheel (recorded shapes: a cupy-like runtime module, a pure-Python wheel: None)
READINGS = {
    ("gpu-kernels", "0.4"): {"gpu_kernels/_C.cpython-311-x86_64-linux-gnu.so": ("libcudart.so.11.0", "libc.so.6")},
    ("gpu-kernels", "0.5"): {"gpu_kernels/_C.cpython-311-x86_64-linux-gnu.so": ("libcudart.so.12", "libc.so.6")},
    ("dnn-ops", "1.0"): {"dnn_ops/_ops.so": ("libcudnn.so.8", "libcublasLt.so.12")},
    ("numpy", "2.1.3"): {"numpy/core/_multiarray_umath.so": ("libc.so.6",)},
}


def read(pin):
    return READINGS.get((pin.name, pin.version))


def test_a_library_of_another_cuda_major_is_refused_naming_the_package_and_both_libraries(catalog):
    pins = [_pin("torch", "2.8.0"), _pin("nvidia-cudnn-cu12", "9.10.2.21", "torch"), _pin("trainer", "1.0"),
            _pin("gpu-kernels", "0.4", "trainer")]
    with pytest.raises(binaries.BinaryMismatch) as exc:
        linked.check_linked(target("trainer"), cand(), "12.8", "9.10.2.21", pins, {"torch", "nvidia-cudnn-cu12"},
                            catalog, read)
    err = exc.value
    assert err.package == "trainer"
    assert err.message.startswith("gpu-kernels 0.4, which trainer (pip:) requires, links libcudart.so.11.0 "
                                  "(gpu_kernels/_C.cpython-311-x86_64-linux-gnu.so): a cuda 11 library, but the "
                                  "image has CUDA 12.8")
    assert "cuda_soname_versioning" in err.message and "built for cuda 12" in err.hint


def test_a_cudnn_of_another_major_is_refused(catalog):
    pins = [_pin("torch", "2.8.0"), _pin("dnn-ops", "1.0")]
    with pytest.raises(binaries.BinaryMismatch, match=r"links libcudnn.so.8 .*image has cuDNN 9.10.2.21"):
        linked.check_linked(target("dnn-ops"), cand(), "12.8", "9.10.2.21", pins, {"torch"}, catalog, read)


def test_a_closure_linking_the_images_majors_says_what_was_read(catalog):
    pins = [_pin("torch", "2.8.0"), _pin("gpu-kernels", "0.5"), _pin("numpy", "2.1.3"), _pin("requests", "2.32.0"),
            _pin("cupy-cuda12x", "13.6.0")]  # cupy: the catalog's row knows it, not read
    seen = []

    def recording(pin):
        seen.append(pin.name)
        return read(pin)

    (d,) = linked.check_linked(target("gpu-kernels"), cand(), "12.8", "9.10.2.21", pins, {"torch"}, catalog,
                               recording)
    assert seen == ["gpu-kernels", "numpy", "requests"]
    assert d.topic == binaries.LINKED_TOPIC and d.choice == "CUDA 12, cuDNN 9"
    assert "of 2 compiled package(s)" in d.reason
    assert "gpu-kernels link CUDA libraries of the image's majors" in d.reason


def test_no_reader_or_no_cuda_reads_nothing(catalog):
    pins = [_pin("gpu-kernels", "0.4")]
    assert linked.check_linked(target(), cand(), "12.8", None, pins, set(), catalog, None) == []
    assert linked.check_linked(target(), cand(), None, None, pins, set(), catalog, read) == []


def test_an_unreadable_wheel_is_said_not_refused(catalog):
    from envkit.errors import WheelReadError

    def failing(pin):
        raise WheelReadError("no byte ranges")

    (d,) = linked.check_linked(target(), cand(), "12.8", None, [_pin("gpu-kernels", "0.4")], set(), catalog, failing)
    assert "not read: gpu-kernels 0.4 (no byte ranges)" in d.reason


def test_a_cpu_only_accelerator_library_warns_or_is_refused(catalog):
    pins = [_pin("torch", "2.8.0"), _pin("onnxruntime", "1.22.0"), _pin("jax", "0.7.1"),
            _pin("jax-cuda12-plugin", "0.7.1")]
    (d,) = linked.check_cpu_fallback(cand(), "12.8", pins, catalog)
    assert d.topic == binaries.CPU_TOPIC + "onnxruntime" and d.reason.startswith(linked.WARNING)
    assert "ask for onnxruntime-gpu" in d.reason and "onnxruntime_cuda_ep_doc" in d.reason
    with pytest.raises(binaries.BinaryMismatch, match="onnxruntime 1.22.0 runs on the CPU only") as exc:
        linked.check_cpu_fallback(cand(), "12.8", pins, catalog, "refuse")
    assert exc.value.package == "onnxruntime" and "cpu_fallback: warn" in exc.value.hint
    assert linked.check_cpu_fallback(cand(), None, pins, catalog, "refuse") == []  # a CPU image: nothing to say
    (j,) = linked.check_cpu_fallback(cand(), "12.8", [_pin("jax", "0.7.1")], catalog)
    assert "jax[cuda12]" in j.reason


# ------------------------------------------------------------ through the resolver (test_resolve's fakes)
def test_the_resolver_warns_or_refuses_a_cpu_only_library_as_build_cpu_fallback_says(catalog, monkeypatch):
    from envkit.errors import ResolutionError
    from tests.unit.resolve import test_resolve as tr

    monkeypatch.setitem(tr.EXTRA_CLOSURE, "onnxruntime", [("onnxruntime", "1.22.0"), ("numpy", "2.1.3")])
    text = tr.make_spec(framework="torch==2.8.*", pip=["onnxruntime"])
    image = tr.run(catalog, spec=tr.load(text)).images[0]
    d = next(d for d in image.decisions if d.topic == "cpu_fallback onnxruntime")
    assert d.reason.startswith("WARNING: onnxruntime 1.22.0 runs on the CPU only in this CUDA 12.8 image: ask for "
                               "onnxruntime-gpu")
    assert d in binaries.explained(image)  # explain shows it, with its source
    with pytest.raises(ResolutionError, match="build.cpu_fallback is refuse"):
        tr.run(catalog, spec=tr.load(text + "build:\n  cpu_fallback: refuse\n"))


def test_build_cpu_fallback_prints_in_resolve(catalog, monkeypatch, capsys):
    from envkit.cli.build import _echo_extras
    from tests.unit.resolve import test_resolve as tr

    monkeypatch.setitem(tr.EXTRA_CLOSURE, "onnxruntime", [("onnxruntime", "1.22.0"), ("numpy", "2.1.3")])
    image = tr.run(catalog, spec=tr.load(tr.make_spec(framework="torch==2.8.*", pip=["onnxruntime"]))).images[0]
    _echo_extras(image)
    assert "  WARNING: onnxruntime 1.22.0 runs on the CPU only" in capsys.readouterr().out


def test_a_pins_reading_is_kept_on_disk_and_a_failed_one_is_not(server, tmp_path):
    """``reader`` over a real PackageIndex (127.0.0.1): a pure-Python wheel's answer is kept by the pin's digest, so
    a second resolve (a new client on the same cache directory) asks the index nothing; a wheel whose .so cannot
    be read is asked again."""
    from envkit.errors import WheelReadError
    from tests.unit.index.test_index import build_wheel, make_index

    pure = build_wheel("puremod", "1.0", [], tag="py3-none-any")
    broken = build_wheel("brokenext", "1.0", [])  # its lib/libpadding.so: random bytes, no ELF
    server.add("puremod", pure)
    server.add("brokenext", broken)
    pins = [Pin("puremod", "1.0", (f"sha256:{pure.sha256}",)), Pin("brokenext", "1.0", (f"sha256:{broken.sha256}",))]
    read = linked.reader(make_index(server, tmp_path), "3.11", "2.36")
    assert read(pins[0]) is None
    with pytest.raises(WheelReadError):
        read(pins[1])
    server.hits.clear()
    again = linked.reader(make_index(server, tmp_path), "3.11", "2.36")
    assert again(pins[0]) is None and server.hits == []  # the kept answer
    with pytest.raises(WheelReadError):
        again(pins[1])
    assert server.hits  # read again
