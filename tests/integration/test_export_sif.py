"""`envkit export sif`: a small image (the smallest local envkit base, with this envkit's payload and envkit's
labels) written as a SIF with Debian's skopeo, umoci, squashfs-tools and siftool, then read back with siftool and
unsquashfs: the partition list, the payload's files and the lock labels inside. Apptainer is not installable here
(no Debian package), so nothing runs the SIF. The image and every file are removed."""

import json
import os
import shutil
import subprocess
import uuid

import pytest

from tests.integration.conftest import envkit

pytestmark = pytest.mark.integration

LABELS = {"io.envkit.lock-hash": "0123abcd" * 8, "io.envkit.team": "siftest", "io.envkit.image": "tiny",
          "io.envkit.torch": "2.13.0"}


@pytest.fixture(scope="module")
def tools():
    missing = [t for t in ("skopeo", "umoci", "mksquashfs", "unsquashfs", "siftool") if not shutil.which(t)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"missing {missing}: run ./scripts/ensure-sif-tools.sh (make test does)")
        pytest.skip(f"missing {missing}: ./scripts/ensure-sif-tools.sh installs them")


@pytest.fixture(scope="module")
def tiny_image(engine, base, tools, tmp_path_factory):
    from envkit.payload.contents import payload_files

    ctx = tmp_path_factory.mktemp("sif-image")
    (ctx / "envkit_check").mkdir()
    for name, data in payload_files().items():
        (ctx / "envkit_check" / name).write_bytes(data)
    (ctx / "Dockerfile").write_text(f"FROM {base}\nCOPY envkit_check/ /opt/envkit/envkit_check/\n"
                                    "ENV ENVKIT_SIF_TEST=yes\n")
    tag = f"envkit-test/sif-tiny:{uuid.uuid4().hex[:10]}"
    for _ in engine.build(ctx, tag, LABELS):
        pass
    yield tag
    engine.client.images.remove(tag, noprune=False)


def _run(*cmd) -> str:
    return subprocess.run(list(map(str, cmd)), check=True, capture_output=True, text=True).stdout


def test_the_sif_holds_the_squashfs_partition_the_payload_and_the_lock_labels(tiny_image, tmp_path):
    from envkit.payload.contents import payload_files

    out = tmp_path / "tiny.sif"
    proc = envkit("export", "sif", tiny_image, "--sif", out, "--json", check=True, timeout=600)
    doc = json.loads(proc.stdout)
    assert doc["path"] == str(out) and doc["size"] == out.stat().st_size > 0
    assert {k: doc["labels"][k] for k in LABELS} == LABELS
    for step in ("skopeo", "umoci", "mksquashfs", "siftool"):
        assert step in proc.stderr  # a progress line per step
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.sif"]  # no temporary file left beside it

    listing = _run("siftool", "list", out)
    rows = {row["type"]: row["id"] for row in doc["objects"]}
    assert "FS (Squashfs/*System/amd64)" in listing and "FS (Squashfs/*System/amd64)" in rows
    assert "Def.FILE" in rows and "JSON.Generic" in rows

    part = tmp_path / "rootfs.squashfs"
    part.write_bytes(subprocess.run(["siftool", "dump", rows["FS (Squashfs/*System/amd64)"], str(out)],
                                    check=True, capture_output=True).stdout)
    for name, data in payload_files().items():
        inside = subprocess.run(["unsquashfs", "-cat", str(part), f"opt/envkit/envkit_check/{name}"],
                                check=True, capture_output=True).stdout
        assert inside == data, name
    labels = json.loads(_run("unsquashfs", "-cat", part, ".singularity.d/labels.json"))
    assert {k: labels[k] for k in LABELS} == LABELS
    assert "ENVKIT_SIF_TEST=yes" in _run("unsquashfs", "-cat", part, ".singularity.d/env/10-docker2singularity.sh")
    assert json.loads(_run("siftool", "dump", rows["JSON.Generic"], out)) == doc["labels"]
    assert f"io.envkit.lock-hash {LABELS['io.envkit.lock-hash']}" in _run("siftool", "dump", rows["Def.FILE"], out)


def test_an_image_not_in_the_engine_is_exit_6_and_leaves_the_old_file(tools, tmp_path):
    out = tmp_path / "old.sif"
    out.write_bytes(b"old")
    proc = envkit("export", "sif", f"envkit-test/no-such:{uuid.uuid4().hex[:8]}", "--sif", out, "--json")
    assert proc.returncode == 6, proc.stderr
    assert "no image" in json.loads(proc.stdout)["message"]
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["old.sif"]


def test_sigterm_mid_export_leaves_no_file_and_no_scratch_directory(tiny_image, tmp_path):
    """Stopped while it works (unpacking the layers skopeo copied): exit 143, nothing at --sif or beside it, and its
    scratch directory (under this test's $TMPDIR) removed."""
    import signal
    import sys
    import time

    from tests.integration.conftest import ROOT

    out_dir, tmpdir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    tmpdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "envkit.cli", "export", "sif", tiny_image, "--sif",
                             str(out_dir / "stopped.sif")], cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, TMPDIR=str(tmpdir)))
    assert proc.stderr is not None
    for line in proc.stderr:
        if "umoci" in line:  # the OCI layout is in its scratch directory
            break
    time.sleep(0.5)
    assert [p.name.split("-")[1] for p in tmpdir.iterdir()] == ["sif"]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err
    assert list(out_dir.iterdir()) == [] and list(tmpdir.iterdir()) == []
