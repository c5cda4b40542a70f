"""The pre-build disk check against the real engine: its data root measured on this host (statvfs), the need from the
lock's wheel sizes. The example lock's sizes are inflated to more than any disk here holds (and an apt package added,
so that no image of this lock exists already): `envkit build` refuses with exit 17 before it writes anything, and
--skip-space-check goes past the check (stopped at once by an unknown --image, so nothing is built)."""

import json
import re
import shutil

import pytest

from tests.integration.conftest import ENVKIT, ROOT

pytestmark = pytest.mark.integration
TEAM = "spacecheck"


@pytest.fixture
def huge_lock(tmp_path):
    from envkit.lock import load_lock, sealed, write_lock
    from envkit.resolve.plan import spec_digest
    from envkit.spec import load_spec

    spec = tmp_path / "team.yaml"
    spec.write_text((ROOT / "examples" / "team.yaml").read_text().replace("team: vision", f"team: {TEAM}"))
    lock = load_lock(ROOT / "examples" / "team.lock")
    # an apt package more: a lock no image in the engine was built from (one that was needs no new space)
    images = tuple(sealed(i.model_copy(update={"apt": ("less",), "packages": tuple(
        p.model_copy(update={"size": 10**14}) for p in i.packages)})) for i in lock.images)
    write_lock(lock.model_copy(update={"team": TEAM, "spec_digest": spec_digest(load_spec(spec)), "images": images}),
               tmp_path / "team.lock")
    return spec


def test_a_build_the_engines_disk_cannot_hold_is_refused_before_anything_is_written(huge_lock, tmp_path, dc):
    import subprocess

    out = tmp_path / "out"
    root = dc.info()["DockerRootDir"]
    before = shutil.disk_usage(root).free
    proc = subprocess.run([*ENVKIT, "build", str(huge_lock), "--locked", "--no-verify", "--json", "--out", str(out),
                           "--store", str(tmp_path / "h.sqlite")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 17, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    after = shutil.disk_usage(root).free
    assert doc["error"] == "DiskSpaceError" and doc["message"].startswith("building torch25 needs about ")
    said = re.search(rf"on the engine's disk; {re.escape(root)} has ([0-9.]+) GiB free", doc["message"])
    assert said, doc["message"]
    # the free space envkit read, between the test's two readings: the other worker writes and removes meanwhile
    # (a cold run read 9.7 GiB where the test read 9.8 after), so within 1 GiB of either side
    low, high = (min(before, after) - 2**30) / 2**30, (max(before, after) + 2**30) / 2**30
    assert low <= float(said.group(1)) <= high, (doc["message"], before, after)
    assert "`envkit gc --dry-run`" in doc["hint"] and "--skip-space-check" in doc["hint"]
    # nothing written, nothing built (the team's labels; not the engine's whole list: the other worker builds meanwhile)
    assert not out.exists() and not dc.images.list(all=True, filters={"label": f"io.envkit.team={TEAM}"})

    skipped = subprocess.run([*ENVKIT, "build", str(huge_lock), "--locked", "--no-verify", "--json", "--out", str(out),
                              "--store", str(tmp_path / "h.sqlite"), "--skip-space-check", "--image", "nosuch"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert skipped.returncode == 2 and "nosuch" in skipped.stdout  # past the check (none ran): the unknown image
