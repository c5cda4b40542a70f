"""The payload in a real image that does two things a lab's image may do: it prints a banner at
Python startup (a ``.pth`` file, as a sitecustomize would), and it is run as the researcher runs it
(the image's CMD, no arguments). Built FROM examples/team.yaml's torch image with this envkit's
payload copied over the image's own (so the self-check runs this code), then removed.
"""

import json
import uuid

import pytest

from envkit.engine.protocol import RunOptions
from envkit.lock import load_lock
from tests.integration.conftest import ROOT, envkit

pytestmark = pytest.mark.integration

BANNER = "*** lab image: remember to cite the lab ***"
LOCK = ROOT / "examples" / "team.lock"


def _existing(engine, locked) -> str | None:
    """A local build of the lock's image (any context): this test needs its contents, not this envkit's build."""
    prefix = f"{load_lock(LOCK).team}/{locked.name}:"
    for image in engine.client.images.list(filters={"label": f"io.envkit.lock-hash={locked.hash}"}):
        for tag in image.tags:
            if tag.startswith(prefix):
                return tag
    return None


@pytest.fixture(scope="module")
def lab_image(engine, tmp_path_factory, request):
    locked = load_lock(LOCK).images[0]
    base = _existing(engine, locked) or request.getfixturevalue("example_build")[0]["images"][0]["tag"]
    ctx = tmp_path_factory.mktemp("lab-image")
    from envkit.payload.contents import payload_files

    (ctx / "envkit_check").mkdir()
    for name, data in payload_files().items():
        (ctx / "envkit_check" / name).write_bytes(data)
    (ctx / "Dockerfile").write_text(
        f"FROM {base}\nUSER root\nCOPY envkit_check/ /opt/envkit/envkit_check/\n"
        f"RUN echo 'import sys; print(\"{BANNER}\")' > \"$(python3 -c 'import site; print(site.getsitepackages()[0])')/00-lab-banner.pth\"\n"
        "USER 1000:1000\n")
    tag = f"envkit-test/payload-lab:{uuid.uuid4().hex[:10]}"
    for _ in engine.build(ctx, tag, {}):
        pass
    yield tag
    engine.client.images.remove(tag, noprune=False)


def test_the_banner_is_printed_on_stdout(engine, lab_image):
    result = engine.run(lab_image, ["python3", "-c", "pass"], RunOptions(timeout=60))
    assert set(result.stdout.splitlines()) == {BANNER}  # twice in a venv: lib64 is lib, and site reads both


def test_the_plain_self_check_compares_against_the_images_expect_file(engine, lab_image):
    """`docker run IMAGE`: the CMD gives no --expect; the payload finds /opt/envkit/expect.json."""
    result = engine.run(lab_image, [], RunOptions(timeout=300))
    lines = result.stdout.splitlines()
    assert lines[0] == BANNER
    assert "expect: /opt/envkit/expect.json (beside the payload)" in lines
    status = {line.split()[0]: line.split()[1] for line in lines if line.split()[:1] and line.split()[0].endswith(
        ("_version", "_runtime", "arch_list"))}
    assert status == {"python_version": "passed", "torch_version": "passed", "cuda_runtime": "passed",
                      "cudnn_version": "passed", "nccl_version": "passed", "arch_list": "passed"}, result.stdout
    assert result.exit_code == 0, result.stdout + result.stderr[-2000:]


def test_verify_finds_the_report_after_the_banner(lab_image):
    proc = envkit("verify", lab_image, "--lock", "examples/team.lock", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "verified"
    assert {c["name"]: c["status"] for c in doc["checks"]}["torch_version"] == "passed"
