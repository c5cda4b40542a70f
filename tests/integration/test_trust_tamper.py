"""The signed gate against a real registry (Debian's docker-registry): every way of faking "certified" is refused by
`envkit pull --require-certified` (exit 8, nothing pulled) with its reason, and the genuine image is pulled.

The images are label-only images on the small envkit base (no new layer); the attacker's moves are made with plain
registry writes. The genuine image's signature and attestation are also checked against the published specs with
tests/speccheck.py, reading the registry over HTTP with ``requests`` (no envkit code on that side).
"""

from __future__ import annotations

import base64
import json
import os

import pytest
import requests

from envkit.registry.api import _RegistryHTTP
from envkit.registry.artifacts import attach_certificate
from envkit.registry.publish import promote
from envkit.registry.signatures import DSSE_TYPE, PREDICATE_ANNOTATION, Layer, append_layers, att_tag, read_layers
from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE as CERTIFICATE_PREDICATE
from envkit.trust.attest import attest
from envkit.trust.keys import TRUSTED_KEYS_ENV
from envkit.trust.sbom import SBOM_PREDICATE_TYPE as CYCLONEDX_PREDICATE
from tests import speccheck
from tests.integration.conftest import ENVKIT, empty_store
from tests.integration.published import (NO_WAIT, certificate, label_image, labels_for, sign, keypair,
                                         untag_registry_refs)
from tests.integration.registry import registry  # noqa: F401  (a fixture)

REPO = "tamper/torch25"
LOCK = "sha256:" + "c" * 64
STACKS = {case: f"2.5.1-cu124-py3.11-{n:08x}" for n, case in enumerate(
    ["genuine", "unsigned", "replayed", "altered", "mallory", "uncertified", "truncated", "sbom", "lock", "victim",
     "appended"],
    start=0xC0)}


class World:
    def __init__(self, dc, engine, host: str):
        self.dc, self.engine, self.host = dc, engine, host
        self.digests: dict[str, str] = {}
        self.ids: dict[str, str] = {}
        self.local: list[str] = []

    def ref(self, case: str, repo: str = REPO) -> str:
        return f"{self.host}/{repo}:{STACKS[case]}"

    def push(self, base: str, case: str, repo: str = REPO, *, lock: str = LOCK) -> str:
        local = f"envkit-test/tamper-{case}:1"
        self.ids[case] = label_image(self.dc, base, local, {**labels_for(lock, STACKS[case]),
                                                            "io.envkit.image": "torch25", "io.envkit.team": "tamper"},
                                     {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0"})
        self.local.append(local)
        digest = promote(self.engine, f"{self.host}/{repo}", STACKS[case], certified=False, image=local,
                         **NO_WAIT).digest
        self.digests[case] = digest
        return digest

    def cert(self, case: str, status: str = "certified", lock: str = LOCK):
        return certificate(f"{REPO}:{STACKS[case]}", self.ids[case], lock, "NVIDIA H200", status,
                           "2026-12-06T03:00:00Z")

    def reg(self, repo: str = REPO) -> _RegistryHTTP:
        return _RegistryHTTP(None, f"{self.host}/{repo}")

    def write_att(self, case: str, envelope: bytes, predicate_type: str = CERTIFICATE_PREDICATE,
                  repo: str = REPO) -> None:
        append_layers(self.reg(repo), att_tag(self.digests[case]),
                      [Layer(DSSE_TYPE, envelope, {PREDICATE_ANNOTATION: predicate_type})])

    def envelope(self, case: str, key: str = "team", status: str = "certified", lock: str = LOCK) -> bytes:
        from envkit.certify.certificate_predicate import certificate_predicate

        return attest(CERTIFICATE_PREDICATE, certificate_predicate(self.cert(case, status, lock)),
                      f"{self.host}/{REPO}", self.digests[case], keypair(key)[0])


@pytest.fixture(scope="module")
def world(dc, engine, base, registry):  # noqa: F811
    w = World(dc, engine, registry.host)
    repo = f"{registry.host}/{REPO}"
    w.push(base, "genuine")
    sign(dc, repo, w.digests["genuine"], [w.cert("genuine")])
    w.push(base, "unsigned")  # the old format: an unsigned certificate artifact
    attach_certificate(engine, repo, STACKS["unsigned"], w.cert("unsigned").to_bytes(), gpu_slug="nvidia-h200",
                       status="certified", **NO_WAIT)
    w.push(base, "replayed")  # the genuine image's attestation copied onto another image
    genuine_att = read_layers(w.reg(), att_tag(w.digests["genuine"]))
    assert genuine_att
    w.write_att("replayed", genuine_att[0].data)
    w.push(base, "altered")  # a failed certificate signed, then edited to say certified
    doc = json.loads(w.envelope("altered", status="failed"))
    statement = json.loads(base64.b64decode(doc["payload"]))
    statement["predicate"]["status"] = "certified"
    statement["predicate"]["reasons"] = []
    doc["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    w.write_att("altered", json.dumps(doc).encode())
    w.push(base, "mallory")  # signed by a key nobody trusts
    w.write_att("mallory", w.envelope("mallory", key="mallory"))
    w.push(base, "truncated")
    full = w.envelope("truncated")
    w.write_att("truncated", full[: len(full) // 2])
    w.push(base, "sbom")  # a genuine certificate, and an SBOM edited after signing
    sign(dc, repo, w.digests["sbom"], [w.cert("sbom")])
    bom = {"bomFormat": "CycloneDX", "specVersion": "1.6", "components": [
        {"type": "library", "name": "torch", "version": "2.5.1", "purl": "pkg:pypi/torch@2.5.1"}]}
    signed = json.loads(attest(CYCLONEDX_PREDICATE, bom, repo, w.digests["sbom"], keypair()[0]))
    statement = json.loads(base64.b64decode(signed["payload"]))
    statement["predicate"]["components"][0]["version"] = "2.5.0"
    signed["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    w.write_att("sbom", json.dumps(signed).encode(), CYCLONEDX_PREDICATE)
    w.push(base, "lock")  # signed, for this digest, but for another lock than the image's label
    w.write_att("lock", w.envelope("lock", lock="sha256:" + "d" * 64))
    # :certified moved: a genuine certified image, then :certified re-pointed at an image nobody certified
    w.push(base, "victim", "tamper/moved")
    sign(dc, f"{registry.host}/tamper/moved", w.digests["victim"], [w.cert("victim")])
    promote(engine, f"{registry.host}/tamper/moved", STACKS["victim"], certified=True, image="envkit-test/tamper-victim:1",
            **NO_WAIT)
    w.push(base, "uncertified", "tamper/moved")
    promote(engine, f"{registry.host}/tamper/moved", STACKS["uncertified"], certified=True,
            image="envkit-test/tamper-uncertified:1", **NO_WAIT)
    # the stack tag re-pointed: the genuine stack tag of tamper/repoint now names an image nobody certified
    w.push(base, "genuine", "tamper/repoint")
    sign(dc, f"{registry.host}/tamper/repoint", w.digests["genuine"], [w.cert("genuine")])
    w.push(base, "uncertified", "tamper/repoint")
    repoint = w.reg("tamper/repoint")  # envkit refuses to move a stack tag: the attacker writes the manifest itself
    other = repoint.get_manifest(STACKS["uncertified"])
    assert other is not None
    repoint.put_manifest(STACKS["genuine"], other)
    w.digests["genuine"] = registry.manifest_digest(REPO, STACKS["genuine"])
    untag_registry_refs(dc, registry.host)
    yield w
    untag_registry_refs(dc, registry.host)
    for local in w.local:
        try:
            dc.images.remove(local, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def pull(world: World, ref: str, tmp_path, trusted: str | None = "team", code: int = 8) -> dict:
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != TRUSTED_KEYS_ENV}
    if trusted:
        env[TRUSTED_KEYS_ENV] = ",".join(str(keypair(k)[1]) for k in trusted.split(","))
    proc = subprocess.run([*ENVKIT, "pull", ref, "--no-gpus", "--require-certified", "--json", "--store",
                           str(empty_store(tmp_path))], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    if code == 8:
        assert doc["error"] in ("VerificationError", "TrustError") and doc["message"].startswith("refusing to pull")
        assert not world.dc.api.images(name=ref.rpartition(":")[0]), "nothing is pulled"
    untag_registry_refs(world.dc, world.host)
    return doc


def test_the_genuine_image_is_pulled(world, tmp_path):
    doc = pull(world, world.ref("genuine"), tmp_path, code=0)
    assert doc["pinned"].endswith(world.digests["genuine"]) and doc["gate"]["passed"]
    assert doc["gate"]["certificates"][0]["signed_by"] == keypair()[0].fingerprint


def test_the_genuine_layout_verifies_by_the_spec_alone(world):
    """cosign's .sig and .att manifests read with requests and checked with tests/speccheck.py."""
    digest, url = world.digests["genuine"], f"http://{world.host}/v2/{REPO}"
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    public = keypair()[1].read_bytes()
    sig = requests.get(f"{url}/manifests/{speccheck.tag_for(digest, '.sig')}", headers=accept, timeout=10).json()
    assert sig["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json" and len(sig["layers"]) == 1
    layer = sig["layers"][0]
    blob = requests.get(f"{url}/blobs/{layer['digest']}", timeout=10).content
    payload = speccheck.check_signature_layer(sig, blob, layer, public, digest)
    assert payload["critical"]["identity"]["docker-reference"] == f"{world.host}/{REPO}"
    att = requests.get(f"{url}/manifests/{speccheck.tag_for(digest, '.att')}", headers=accept, timeout=10).json()
    layer = att["layers"][0]
    assert layer["mediaType"] == speccheck.DSSE_LAYER and layer["annotations"]["predicateType"] == CERTIFICATE_PREDICATE
    statement = speccheck.check_envelope(requests.get(f"{url}/blobs/{layer['digest']}", timeout=10).content, public,
                                         digest)
    assert statement["predicate"]["status"] == "certified" and statement["predicate"]["gpu_model"] == "NVIDIA H200"
    assert statement["predicate"]["lock_hash"] == LOCK


@pytest.mark.parametrize("case, reason", [
    ("unsigned", "unsigned"),
    ("replayed", "for another image sha256:"),
    ("altered", "altered after signing"),
    ("mallory", "signed by unknown key "),
    ("truncated", "truncated/malformed envelope"),
    ("sbom", f"its {CYCLONEDX_PREDICATE} attestation was altered after signing"),
    ("lock", f"for another lock sha256:{'d' * 64}"),
])
def test_a_faked_certificate_is_refused_with_its_reason(world, tmp_path, case, reason):
    doc = pull(world, world.ref(case), tmp_path)
    assert reason in doc["message"], doc["message"]
    if case == "mallory":
        assert keypair("mallory")[0].fingerprint in doc["message"]
    if case == "replayed":
        assert world.digests["genuine"] in doc["message"] or "for another image" in doc["message"]


def test_certified_moved_to_an_uncertified_image_gains_nothing(world, tmp_path):
    doc = pull(world, f"{world.host}/tamper/moved:certified", tmp_path)
    assert "has no certificate" in doc["message"] and "(none at all)" in doc["message"]
    pull(world, world.ref("victim", "tamper/moved"), tmp_path, code=0)  # the genuine one still is


def test_a_re_pointed_stack_tag_gains_nothing(world, tmp_path):
    doc = pull(world, world.ref("genuine", "tamper/repoint"), tmp_path)
    assert "has no certificate" in doc["message"]


def test_no_trusted_key_refuses_and_says_how_to_get_the_team_key(world, tmp_path):
    doc = pull(world, world.ref("genuine"), tmp_path, trusted=None)
    assert "no trusted key configured" in doc["message"]
    assert "envkit keys show" in doc["hint"] and "ENVKIT_TRUSTED_KEYS" in doc["hint"]


def test_only_another_key_trusted_refuses(world, tmp_path):
    doc = pull(world, world.ref("genuine"), tmp_path, trusted="mallory")
    assert f"signed by unknown key {keypair()[0].fingerprint}" in doc["message"]
    pull(world, world.ref("genuine"), tmp_path, trusted="mallory,team", code=0)  # a rotation: both trusted


def test_signing_again_adds_nothing_and_a_new_certificate_is_appended(world, base):
    """What a signing nightly does on its next run, and a second GPU model's certificate: appended, not replacing.
    On an image of its own (``appended``: its own labels, so its own digest and .sig/.att), so what it appends
    changes no other test's image whatever the order the module runs in."""
    repo = f"{world.host}/{REPO}"
    digest = world.push(base, "appended")
    sign(world.dc, repo, digest, [world.cert("appended")])
    untag_registry_refs(world.dc, world.host)
    before = (read_layers(world.reg(), speccheck.tag_for(digest, ".sig")),
              read_layers(world.reg(), att_tag(digest)))
    assert before[0] is not None and before[1] is not None and len(before[0]) == 1 and len(before[1]) == 1
    sign(world.dc, repo, digest, [world.cert("appended")])
    assert [len(read_layers(world.reg(), t) or []) for t in (speccheck.tag_for(digest, ".sig"), att_tag(digest))] \
        == [1, len(before[1])]
    a100 = world.cert("appended").model_copy(update={"gpu_model": "NVIDIA A100-SXM4-80GB"})
    sign(world.dc, repo, digest, [a100])
    after = read_layers(world.reg(), att_tag(digest)) or []
    assert len(after) == len(before[1]) + 1 and [layer.data for layer in after[:-1]] == [x.data for x in before[1]]
