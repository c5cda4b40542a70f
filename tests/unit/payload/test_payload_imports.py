"""The payload's ``requested_imports`` check (envkit_check_imports.py): the spec's pip: packages are
installed at the locked version and import, each in a child interpreter.

Distributions are real ones, made in temporary directories put on sys.path: ``*.dist-info`` with
METADATA and RECORD (or top_level.txt) read by importlib.metadata, and modules that import, raise,
hang or kill their interpreter. torchaudio and torchvision are fakes that register their ops
with the host's CPU torch through ``torch.library`` (as torchaudio 2.9+ and torchvision register
theirs), or stand in for torchaudio's pybind module before 2.9. Every verdict is the payload's own
code; a whole payload run's document is judged by the host's ``decide`` (test_requested.py holds
the host's side on made-up documents).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Optional

import pytest

from envkit.certify.verdict import decide
from tests.unit.payload_modules import PAYLOAD_DIR, payload_module

core, imports = payload_module("envkit_check_core"), payload_module("envkit_check_imports")
UNDEFINED = "libbroken.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"


def make_dist(site: Path, name: str, version: str, files: Dict[str, str], *, record: bool = True,
              top_level: Optional[str] = None) -> None:
    """An installed distribution: its files under `site`, and its metadata as pip writes it."""
    for path, text in files.items():
        target = site / path
        if not path.startswith(".."):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(text))
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)
    if record:
        (info / "RECORD").write_text("".join(f"{row},,\n" for row in rows))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("requested-site")
    make_dist(root, "Good_Pkg", "1.0.0", {  # a name spelt as its project spells it: found by canonical name
        "goodpkg/__init__.py": "VALUE = 1\n",
        "goodpkg/sub.py": "",
        "_goodpkg_speedups.py": "raise ImportError('a private helper is not imported')\n",
        "tests/__init__.py": "raise ImportError('tests are not the package')\n",
        "../../../bin/goodpkg": ""})
    make_dist(root, "brokenpkg", "2.0", {"brokenpkg/__init__.py": f"raise OSError({UNDEFINED!r})\n"})
    make_dist(root, "datapkg", "0.1", {"datapkg_data/model.json": "{}\n", "../../../bin/datatool": ""})
    make_dist(root, "nspkg", "3.1", {"fakens/sub/__init__.py": "", "fakens/sub/lib/libfake.so": ""})
    make_dist(root, "toplevelonly", "1.2", {"tlmod.py": "X = 2\n"}, record=False, top_level="tlmod\n")
    make_dist(root, "hangpkg", "1.0", {"hangpkg.py": "import time\ntime.sleep(60)\n"})
    make_dist(root, "crashpkg", "1.0", {"crashpkg.py": "import os\nos.abort()\n"})
    make_dist(root, "printpkg", "1.0", {"printpkg.py": "print('hello from printpkg')\n"})
    make_dist(root, "exitpkg", "1.0", {"exitpkg.py": "raise SystemExit('no display')\n"})
    return root


@pytest.fixture
def on_path(site, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(site))
    return site


def run(requested: Dict[str, Optional[str]], deadline: Optional[float] = None):
    ctx = core.Context(expect={"requested": requested}, mode="verify", t0=time.monotonic(), deadline=deadline)
    result = imports.check_requested(ctx)
    return result, {e["name"]: e for e in result.value or []}


# ------------------------------------------------------------------ per package
def test_an_importable_package_passes_with_its_modules(on_path):
    result, got = run({"good-pkg": "1.0.0"})
    assert result.status == "passed", result.message
    e = got["good-pkg"]
    # the public package, not the private helper beside it, nor the tests it ships, nor its script in bin/
    assert (e["status"], e["version"], e["modules"], e["imported"], e["error"]) == (
        "ok", "1.0.0", ["goodpkg"], ["goodpkg"], None)
    assert result.message == "1 requested package(s) import: good-pkg 1.0.0"
    assert result.expected == {"good-pkg": "1.0.0"}


def test_an_import_that_raises_fails_with_the_exceptions_last_line(on_path):
    result, got = run({"good-pkg": "1.0.0", "brokenpkg": "2.0"})
    assert result.status == "failed"
    assert got["good-pkg"]["status"] == "ok"
    assert got["brokenpkg"]["status"] == "failed"
    assert got["brokenpkg"]["error"] == f"import brokenpkg: OSError: {UNDEFINED}"
    assert result.message == f"1 of 2 requested packages failed: brokenpkg 2.0: import brokenpkg: OSError: {UNDEFINED}"


def test_a_package_with_no_module_is_reported_not_failed(on_path):
    result, got = run({"datapkg": "0.1"})
    assert (result.status, got["datapkg"]["status"], got["datapkg"]["modules"]) == ("passed", "no_modules", [])
    assert result.message == "no module to import (data or a program): datapkg 0.1"


def test_a_missing_package_fails(on_path):
    result, got = run({"missingpkg": "1.0"})
    assert (result.status, got["missingpkg"]["status"]) == ("failed", "failed")
    assert got["missingpkg"]["error"] == "not installed (the lock has 1.0)"


def test_another_version_than_the_locks_fails(on_path):
    result, got = run({"good-pkg": "1.0.1"})
    assert result.status == "failed"
    assert got["good-pkg"]["error"] == "1.0.0 is installed but the lock has 1.0.1"
    assert got["good-pkg"]["imported"] == ["goodpkg"]  # imported all the same: the report says both


def test_without_a_locked_version_presence_is_enough(on_path):
    assert run({"good-pkg": None})[0].status == "passed"


def test_a_namespace_is_descended_and_top_level_txt_is_read_without_record(on_path):
    result, got = run({"nspkg": "3.1", "toplevelonly": "1.2"})
    assert result.status == "passed", result.message
    assert got["nspkg"]["imported"] == ["fakens.sub"]  # not the bare namespace "fakens", nor libfake.so
    assert got["toplevelonly"]["imported"] == ["tlmod"]


def test_what_a_module_prints_or_a_systemexit_does_not_break_the_report(on_path):
    result, got = run({"printpkg": "1.0", "exitpkg": "1.0", "good-pkg": "1.0.0"})
    assert got["printpkg"]["status"] == "ok" and got["good-pkg"]["status"] == "ok"
    assert got["exitpkg"]["error"] == "import exitpkg: SystemExit: no display"


def test_a_hang_fails_that_package_only(on_path, monkeypatch):
    monkeypatch.setattr(imports, "PER_IMPORT_S", 3.0)
    start = time.monotonic()
    result, got = run({"hangpkg": "1.0", "good-pkg": "1.0.0"})
    assert time.monotonic() - start < 30
    assert got["hangpkg"]["error"] == "did not finish importing hangpkg within 3 s"
    assert got["good-pkg"]["status"] == "ok"  # a fresh child took the rest


def test_a_crash_fails_that_package_only(on_path):
    result, got = run({"crashpkg": "1.0", "good-pkg": "1.0.0"})
    assert got["crashpkg"]["error"].startswith("importing crashpkg ended the interpreter (signal SIGABRT)")
    assert got["good-pkg"]["status"] == "ok"


def test_the_check_stays_inside_the_runs_watchdog(on_path, monkeypatch):
    """Close to the watchdog the imports get at least 5 s, and what does not fit is said, not hung on."""
    assert imports.check_limit(None) == imports.CHECK_S
    assert imports.check_limit(100.0, now=40.0) == 50.0  # less RESERVE_S
    assert imports.check_limit(100.0, now=99.0) == 5.0
    monkeypatch.setattr(imports, "CHECK_S", 2.0)
    result, got = run({"hangpkg": "1.0", "good-pkg": "1.0.0"})
    assert got["hangpkg"]["error"] == "had not finished importing hangpkg when the check's time ran out"
    assert got["good-pkg"]["error"] == "not tried: the check's 5 s ran out"  # at least 5 s


def test_skipped_when_the_lock_requests_nothing():
    ctx = core.Context(expect={"torch": "2.5.1"}, mode="verify", t0=time.monotonic())
    assert imports.check_requested(ctx).status == "skipped"


@pytest.mark.parametrize("paths, names", [
    (["six.py", "six-1.16.0.dist-info/RECORD"], ["six"]),
    (["yaml/__init__.py", "yaml/_yaml.cpython-311-x86_64-linux-gnu.so", "_yaml/__init__.py"], ["_yaml", "yaml"]),
    (["google/protobuf/__init__.py", "google/protobuf/message.py", "google/_upb/_message.abi3.so"],
     ["google._upb._message", "google.protobuf"]),
    (["nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/lib/libcudnn_ops.so", "nvidia/cudnn/__init__.py"],
     ["nvidia.cudnn"]),
    (["../../../bin/tool", "pkg/__pycache__/x.cpython-311.pyc", "share/data.txt", "my-pkg/x.py"], []),
])
def test_import_names_from_a_record(paths, names):
    assert imports.modules_of(paths) == names


@pytest.mark.parametrize("have, want, same", [
    ("2.5.1+cu124", "2.5.1+cu124", True), ("1.0-RC1", "1.0rc1", True), ("2.5.1", "2.5.1+cu124", False),
    ("1.0.0", "1.0.1", False), ("4.46.3", "4.46.3", True), ("1.0.post1", "1.0-r1", True),
])
def test_versions_are_compared_whole(have, want, same):
    assert imports.same_release(have, want) is same


# ------------------------------------------------------- PyTorch's compiled companions
TORCH_OPS = '''
import torch
_lib = torch.library.Library("{ns}", "DEF")
'''
AUDIO_29 = TORCH_OPS.format(ns="_torchaudio") + '''
_lib.define("cuda_version() -> int?")
_lib.impl("cuda_version", lambda: {cuda}, "CompositeExplicitAutograd")
_IS_TORCHAUDIO_EXT_AVAILABLE = True
'''
VISION = TORCH_OPS.format(ns="torchvision") + '''
_lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_lib.define("_cuda_version() -> int")


def _nms(dets, scores, threshold):
    keep = []
    for i in scores.argsort(descending=True).tolist():
        a = dets[i]
        overlaps = []
        for j in keep:
            b = dets[j]
            w = max(0.0, float(min(a[2], b[2]) - max(a[0], b[0])))
            h = max(0.0, float(min(a[3], b[3]) - max(a[1], b[1])))
            area = float((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]))
            overlaps.append(w * h / (area - w * h))
        if all(o <= threshold for o in overlaps):
            keep.append(i)
    return torch.tensor(keep, dtype=torch.int64)


_lib.impl("nms", _nms, "CPU")
_lib.impl("_cuda_version", lambda: {cuda}, "CompositeExplicitAutograd")


def _has_ops():
    return {has_ops}
'''


def companion_site(root: Path, audio: Optional[Dict[str, str]], vision: Optional[str]) -> Path:
    if audio is not None:
        make_dist(root, "torchaudio", "2.9.0", {"torchaudio/__init__.py": "from . import _extension\n", **audio})
    if vision is not None:
        make_dist(root, "torchvision", "0.24.0", {"torchvision/__init__.py": "from . import extension\n",
                                                  "torchvision/extension.py": vision})
    return root


@pytest.fixture
def torch_here():
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("the fakes are CPU builds; this torch has CUDA")
    return torch


COMPANIONS = {
    "2.9+ and torchvision": ({"torchaudio/_extension/__init__.py": AUDIO_29.format(cuda="None")},
                             VISION.format(cuda=-1, has_ops=True), None),
    "before 2.9": ({"torchaudio/_extension/__init__.py": "_IS_TORCHAUDIO_EXT_AVAILABLE = True\n",
                    "torchaudio/lib/__init__.py": "",
                    "torchaudio/lib/_torchaudio.py": "def cuda_version():\n    return None\n"}, None, None),
    "no extension": ({"torchaudio/_extension/__init__.py": "_IS_TORCHAUDIO_EXT_AVAILABLE = False\n"}, None,
                     "torchaudio's compiled extension: RuntimeError: torchaudio imported without its compiled "
                     "extension (torchaudio._extension._IS_TORCHAUDIO_EXT_AVAILABLE is False)"),
    "extension that does not load": (
        {"torchaudio/_extension/__init__.py": "",
         "torchaudio/lib/__init__.py": "",
         "torchaudio/lib/_torchaudio.py": f"raise ImportError({UNDEFINED!r})\n"}, None,
        "torchaudio's compiled extension: RuntimeError: torchaudio's extension does not load: "
        "torch.ops._torchaudio.cuda_version: AttributeError: '_OpNamespace' '_torchaudio' object has no attribute "
        f"'cuda_version'; torchaudio.lib._torchaudio: ImportError: {UNDEFINED}"),
    "built for another CUDA": ({"torchaudio/_extension/__init__.py": AUDIO_29.format(cuda=12040)}, None,
                               "torchaudio's compiled extension: RuntimeError: torchaudio's extension was built for "
                               "CUDA 12.4 but torch has CUDA none (a CPU build)"),
    "torchvision without its ops": (None, VISION.format(cuda=-1, has_ops=False),
                                    "torchvision's compiled extension: RuntimeError: torchvision imported without its "
                                    "compiled ops (torchvision._C did not load: torchvision.extension._has_ops() is "
                                    "False)"),
}


@pytest.mark.parametrize("case", list(COMPANIONS))
def test_torch_companions_must_load_their_extension(case, torch_here, tmp_path, monkeypatch):
    audio, vision, error = COMPANIONS[case]
    monkeypatch.syspath_prepend(str(companion_site(tmp_path, audio, vision)))
    wanted = {**({"torchaudio": "2.9.0"} if audio is not None else {}),
              **({"torchvision": "0.24.0"} if vision is not None else {})}
    result, got = run(wanted)
    if error is None:
        assert result.status == "passed", result.message
        for name, e in got.items():
            assert e["extension"]["loaded"] is True and e["extension"]["cuda"] is None, e
        if "torchvision" in got:
            assert got["torchvision"]["extension"]["via"] == "torch.ops.torchvision"
        assert got["torchaudio"]["extension"]["via"] == (
            "torch.ops._torchaudio" if case.startswith("2.9") else "torchaudio.lib._torchaudio")
        assert "(its extension loads, CUDA none)" in result.message
    else:
        [e] = got.values()
        assert (result.status, e["status"], e["error"]) == ("failed", "failed", error)
        assert e["imported"] == [e["name"]]  # the import itself succeeded: only the extension check caught it


# ----------------------------------------------- a whole run, judged by the host
def test_a_payload_run_reports_each_package_and_the_host_fails_it_by_name(site, tmp_path):
    """The payload as images run it (with its expect file), a broken and a missing package among the requested
    ones: the document names them, and the host's verdict fails with a reason per package."""
    pytest.importorskip("torch")
    expect = {"python": f"{sys.version_info.major}.{sys.version_info.minor}",
              "requested": {"good-pkg": "1.0.0", "brokenpkg": "2.0", "datapkg": "0.1", "missingpkg": "1.0"}}
    (tmp_path / "expect.json").write_text(json.dumps(expect))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run([sys.executable, str(PAYLOAD_DIR), "--json", "--mode", "verify", "--expect",
                           str(tmp_path / "expect.json")], capture_output=True, text=True, env=env, timeout=300)
    doc = json.loads(proc.stdout)
    check = {c["name"]: c for c in doc["checks"]}["requested_imports"]
    statuses = {e["name"]: e["status"] for e in check["value"]}
    assert statuses == {"good-pkg": "ok", "brokenpkg": "failed", "datapkg": "no_modules", "missingpkg": "failed"}
    assert check["status"] == "failed" and proc.returncode == 1
    status, reasons = decide(doc, expect, gpu_requested=False)
    assert status == "failed"
    assert f"requested package brokenpkg 2.0 failed: import brokenpkg: OSError: {UNDEFINED}" in reasons
    assert "requested package missingpkg failed: not installed (the lock has 1.0)" in reasons
    assert not any(r.startswith("check requested_imports") for r in reasons)  # per package, not twice


def test_a_banner_the_interpreter_prints_at_start_is_not_a_record(on_path, tmp_path, monkeypatch):
    """An image whose sitecustomize prints a banner on every start (the lab images of test_payload_image.py): the
    child prints it before it can move its stdout; only its marked record lines count."""
    banner = tmp_path / "banner"
    banner.mkdir()
    (banner / "sitecustomize.py").write_text("print('*** lab image: remember to cite the lab ***')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(banner), os.environ.get("PYTHONPATH")])))
    result, got = run({"good-pkg": "1.0.0"})
    assert result.status == "passed", result.message
    assert got["good-pkg"]["status"] == "ok"
