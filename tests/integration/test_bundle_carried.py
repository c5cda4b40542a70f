"""An offline bundle carries what the team signed about its image, end to end against a real registry (Debian's
docker-registry): the image of a small lock published to the team registry under the lock's tag, signed and
certified as a nightly with --signing-key leaves it; `envkit bundle make --registry` carries its cosign signature and
its certificate attestation (and the team key signs the bundle); `envkit bundle build --trusted-keys` verifies the
bundle and them offline, then builds with no network. A carried attestation altered after signing refuses the bundle
(exit 8) before the engine builds anything.

The published image is a label-only image on the local base (``published.label_image``): what a registry holds of it
is what matters here, not its layers. Its labels carry the small lock's hash, so `bundle make` takes it as this lock's.
"""

from __future__ import annotations

import base64
import json
import shutil

import pytest

from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE
from envkit.lock import write_lock
from envkit.registry.publish import promote
from envkit.render.files import image_tag
from envkit.trust.keys import PASSWORD_ENV, PRIVATE_FILE, SIGNING_KEY_ENV, TRUSTED_KEYS_ENV
from tests.integration.conftest import ROOT, envkit
from tests.integration.published import NO_WAIT, certificate, keypair, label_image, labels_for, sign
from tests.integration.registry import registry  # noqa: F401  (a fixture)
from tests.integration.test_buildkit import remove_images
from tests.integration.test_reproducible import lock_with

pytestmark = [pytest.mark.integration, pytest.mark.network]


@pytest.fixture
def published(dc, engine, base, registry, tmp_path, monkeypatch):  # noqa: F811
    """examples/team.yaml beside a small lock of its torch25 image (reused by `bundle make`, not re-resolved), and
    that image published to the registry under the lock's tag, signed with the team key, with one signed certificate:
    (spec, locked image, its manifest digest in the registry)."""
    for name in (TRUSTED_KEYS_ENV, SIGNING_KEY_ENV, PASSWORD_ENV):
        monkeypatch.delenv(name, raising=False)
    lock, image = lock_with("torch25", "4.3.0", numpy="2.3.*")  # pins of its own: no other test builds its tag
    spec = tmp_path / "team.yaml"
    shutil.copyfile(ROOT / "examples" / "team.yaml", spec)
    write_lock(lock, spec.with_suffix(".lock"))
    repository, tag = image_tag(lock.team, image).split(":")
    local = "envkit-test/carried:1"
    image_id = label_image(dc, base, local, labels_for(image.hash, tag), {"NVIDIA_REQUIRE_CUDA": image.require_cuda})
    repo = registry.repo(repository)
    made = []
    try:
        digest = promote(engine, repo, tag, certified=True, image=local, **NO_WAIT).digest
        made.append(f"{repo}:{tag}")
        cert = certificate(f"{repository}:{tag}", image_id, image.hash, "none", "verified", "2026-12-07T03:00:00Z")
        sign(dc, repo, digest, [cert])
        yield spec, image, digest
    finally:
        remove_images(engine, local, *made)


def test_bundle_make_carries_the_signed_documents_and_bundle_build_verifies_them_offline(published, registry,  # noqa: F811
                                                                                        engine, tmp_path):
    spec, image, digest = published
    _, public = keypair()  # the team's key pair (published.sign signed the image with it)
    out = tmp_path / "out" / "torch25.bundle"
    made = envkit("bundle", "make", spec.name, "--bundle", out, "--registry", registry.host,
                  "--signing-key", public.parent / PRIVATE_FILE, "--json", cwd=spec.parent, timeout=900)
    assert made.returncode == 0, made.stderr[-4000:]
    doc = json.loads(made.stdout)
    assert doc["lock_reused"] is True and doc["lock_hash"] == image.hash and doc["signed_by"]
    prefix = digest.replace(":", "-")
    carried = doc["carried"]
    assert carried["from"] == f"{registry.repo(image_tag('vision', image).split(':')[0])}@{digest}", carried
    assert carried["files"] == sorted([f"{prefix}.att.0.dsse.json", f"{prefix}.sig.0.b64",
                                       f"{prefix}.sig.0.payload.json"]), carried
    assert f"carrying 3 signed document(s) of {carried['from']}" in made.stderr

    built = envkit("bundle", "build", out, "--trusted-keys", public, "--no-verify", "--json", timeout=900)
    try:
        assert built.returncode == 0, built.stderr[-4000:]
        result = json.loads(built.stdout)
        assert result["signature"]["checked"] is True and result["carried"]["checked"] is True
        judged = {d["file"]: d for d in result["carried"]["documents"]}
        assert set(judged) == {f"{prefix}.att.0.dsse.json", f"{prefix}.sig.0.b64"}  # (a payload goes with its .b64)
        assert all("why" not in d and d["signed_by"] for d in judged.values()), judged
        assert judged[f"{prefix}.att.0.dsse.json"]["predicate_type"] == CERTIFICATE_PREDICATE_TYPE
        [outcome] = result["images"]
        assert outcome["action"] == "built" and engine.inspect(outcome["tag"]) is not None
    finally:
        if built.returncode == 0:
            remove_images(engine, json.loads(built.stdout)["images"][0]["tag"])

    # the same bundle with its certificate attestation altered after signing: refused before any build
    attestation = next(out.rglob(f"{prefix}.att.0.dsse.json"))
    envelope = json.loads(attestation.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["status"] = "certified"  # (it said "verified")
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    attestation.write_text(json.dumps(envelope))
    refused = envkit("bundle", "build", out, "--trusted-keys", public, "--no-verify", "--json", timeout=300)
    assert refused.returncode == 8, refused.stderr[-3000:]
    assert "do not verify" in refused.stderr and "building from" not in refused.stderr
