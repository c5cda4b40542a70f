"""`envkit nightly --reproducible` on the real engine: the nightly builds through the reproducible path, its image's
environment layers match the record `envkit build --reproducible --record` wrote beside the lock, and a record the
test alters makes the next nightly (the image removed first, so it is built again) fail that image, naming the group
and both digests, with exit 18; the image is then neither verified nor published, and the store keeps why.

The small stack of test_reproducible.py (the example lock's base with numpy and typing-extensions: the framework and
extra groups) under its own team, locked for a spec of that team so `--locked` takes it. Its lock still names torch
(the small closure keeps the example's framework fields), so the payload's verification of the matching image fails
on `import torch` (exit 12): what this test shows of that run is its layers, not its verdict. No registry: nothing is
published by a run without one, and the layer check comes before publishing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.catalog.files import load_catalog
from envkit.images.layer_record import record_path
from envkit.lock import write_lock
from envkit.render.files import image_tag
from envkit.resolve.plan import spec_digest
from envkit.spec import load_spec
from envkit.store.history import Store
from tests.integration.conftest import ROOT
from tests.integration.test_buildkit import remove_images, small_lock

pytestmark = [pytest.mark.integration, pytest.mark.network]

TEAM = "nightrepro"
SPEC = f"""\
version: 1
team: {TEAM}
fleet:
  min_driver: "550.54.15"
  gpus: [A100, H100, L40S]
  policy: minor
defaults:
  base:
    bootstrap: {{suite: bookworm, mirror: "http://deb.debian.org/debian"}}
images:
  - name: small
    framework: "torch==2.5.*"
"""


def envkit(root: Path, *args: str, code: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "envkit.cli", *args, "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == code, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def nightly(root: Path, code: int) -> dict:
    return envkit(root, "nightly", str(root / "team.yaml"), "--locked", "--reproducible", "--no-gpus",
                  "--store", str(root / "history.sqlite"), "--reports", str(root / "reports"),
                  "--out", str(root / "out"), "--builder", "classic", code=code)


def test_nightly_reproducible_checks_each_build_against_the_lock_record(engine, tmp_path):
    spec_path = tmp_path / "team.yaml"
    spec_path.write_text(SPEC)
    lock, image = small_lock("small")
    lock = lock.model_copy(update={"team": TEAM, "spec_digest": spec_digest(load_spec(spec_path)),
                                   "catalog_digest": load_catalog().digest})
    write_lock(lock, tmp_path / "team.lock")
    tag = image_tag(TEAM, image)
    try:
        # the record, as `envkit build --reproducible --record` writes it (the one writer of the file)
        built = envkit(tmp_path, "build", str(spec_path), "--locked", "--reproducible", "--record", "--no-verify",
                       "--builder", "classic", "--store", str(tmp_path / "build.sqlite"),
                       "--out", str(tmp_path / "out"), code=0)
        recorded = built["images"][0]["layers"]
        assert sorted(recorded) == ["extra", "framework", "payload"]  # (--json sorts keys)
        assert json.loads(record_path(tmp_path / "team.lock").read_text())["images"]["small"]["layers"] == recorded
        engine.client.images.remove(tag, force=True)  # (its OS stage stays: the nightly's build starts from it)

        # the nightly builds it again, reproducibly: the same layers as the record's
        doc = nightly(tmp_path, code=12)  # (verification: the small stack has no torch; see the module doc)
        [img] = doc["images"]
        assert img["build"] == "built", img
        layers = img["layers"]
        assert layers["reproducible"] is True and layers["check"] == "passed", layers
        assert layers["message"] == "environment layers match the lock exactly (framework, extra)"
        assert layers["digests"] == recorded and layers["recorded"] is False and layers["differs"] == []
        assert not any(r.startswith("layers:") for r in img["reasons"]), img["reasons"]
        assert engine.inspect(tag).layers[-3:] == tuple(recorded[g] for g in ("framework", "extra", "payload"))
        with Store.open(tmp_path / "history.sqlite") as store:  # the certificate (and so the reports) say it too
            [cert] = store.certificates_for(engine.inspect(tag).id)
        checks = {c["name"]: c for c in cert.document["checks"]}
        assert checks["layers"]["status"] == "passed" and len(checks) > 1  # the payload's checks, and this one
        report = json.loads((tmp_path / "reports" / "report.json").read_text())
        assert "environment layers match the lock exactly" in json.dumps(report)

        # a record that says otherwise: the next nightly, the image removed first, fails it naming the group
        path = record_path(tmp_path / "team.lock")
        doc = json.loads(path.read_text())
        altered = "sha256:" + "0" * 64
        doc["images"]["small"]["layers"]["extra"] = altered
        path.write_text(json.dumps(doc, indent=2))
        engine.client.images.remove(tag, force=True)
        doc = nightly(tmp_path, code=18)
        assert doc["outcome"] == "layer mismatch"
        [img] = doc["images"]
        assert img["build"] == "built" and img["status"] == "failed", img
        assert img["layers"]["check"] == "failed"
        assert img["layers"]["differs"] == [{"group": "extra", "record": altered, "image": recorded["extra"]}]
        said = (f"layers: the extra layer differs from the lock's record: the image has {recorded['extra']}, "
                f"the record {altered}")
        assert img["reasons"] == [said] and img["pushed"] == []
        with Store.open(tmp_path / "history.sqlite") as store:
            [cert] = store.certificates_for(engine.inspect(tag).id)
        assert cert.status == "failed" and [c["name"] for c in cert.document["checks"]] == ["layers"]
        assert json.loads(path.read_text())["images"]["small"]["layers"]["extra"] == altered  # never rewritten
    finally:
        remove_images(engine, tag)
