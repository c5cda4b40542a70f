"""``envkit bundle make --signing-key`` and ``bundle build --trusted-keys``: a bundle made by the CLI (its network
and engine parts replaced by small files) is signed with a real key, and a build verifies that signature before the
engine is asked anything; the build itself is replaced (tests/integration builds bundles)."""

from __future__ import annotations

import json

import pytest

from envkit.images import bundle as bundle_mod
from envkit.images.builder import Outcome
from envkit.images.bundle_manifest import MANIFEST, SIGNATURE
from envkit.trust import keys
from envkit.trust.bundle import manifest_digest
from tests import speccheck
from tests.unit.cli import test_cli
from tests.unit.cli.test_cli import invoke

# the fixtures of the bundle make/build CLI tests (make_bundle without network, no engine)
engine, example_resolved, offline_parts = test_cli.engine, test_cli.example_resolved, test_cli.offline_parts


@pytest.fixture
def team(tmp_path, monkeypatch):
    for name in (keys.PASSWORD_ENV, keys.TRUSTED_KEYS_ENV, keys.SIGNING_KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    return keys.generate_keys(tmp_path / "team")


@pytest.fixture
def built(monkeypatch):
    """build_from_bundle, replaced: what it was asked."""
    seen: dict = {}

    def build_from_bundle(eng, path, **kwargs):
        seen.update(kwargs, path=path)
        return Outcome("torch25", "vision/torch25:x", "built", "sha256:1", 2**30, 3.0)

    monkeypatch.setattr(bundle_mod, "build_from_bundle", build_from_bundle)
    return seen


def test_a_signed_bundle_is_verified_before_it_is_built(engine, example_resolved, offline_parts,
                                                        built, team, tmp_path, monkeypatch):
    out = tmp_path / "torch25.bundle"
    made = invoke("bundle", "make", "examples/team.yaml", "--bundle", out, "--signing-key", team["private_key"],
                  "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.stdout)["signed_by"] == team["fingerprint"]
    digest = manifest_digest((out / MANIFEST).read_bytes())
    speccheck.check_envelope((out / SIGNATURE).read_bytes(), open(team["public_key"], "rb").read(), digest)
    monkeypatch.setenv(keys.TRUSTED_KEYS_ENV, team["public_key"])  # as a site sets it
    result = invoke("bundle", "build", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["signature"] == {"checked": True, "signed_by": team["fingerprint"],
                                                      "manifest": digest}
    assert built["signed_manifest"] == digest  # the build re-checks that the manifest is still the signed one
    assert f"signed by trusted key {team['fingerprint'][:16]}" in result.stderr


def test_the_signing_key_option_and_its_environment_variable(engine, example_resolved, offline_parts,
                                                             team, tmp_path, monkeypatch):
    unsigned = invoke("bundle", "make", "examples/team.yaml", "--bundle", tmp_path / "u")
    assert unsigned.exit_code == 0 and "unsigned (--signing-key signs it)" in unsigned.stdout
    assert not (tmp_path / "u" / SIGNATURE).exists()
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, team["private_key"])
    signed = invoke("bundle", "make", "examples/team.yaml", "--bundle", tmp_path / "s")
    assert signed.exit_code == 0 and f"signed by {team['fingerprint'][:16]}" in signed.stdout
    assert (tmp_path / "s" / SIGNATURE).is_file()


def test_a_bad_signing_key_fails_before_anything_is_fetched(example_resolved, offline_parts, team,
                                                            tmp_path, monkeypatch):
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: pytest.fail("the engine was asked"))
    result = invoke("bundle", "make", "examples/team.yaml", "--bundle", tmp_path / "b", "--signing-key",
                    team["public_key"], "--json")
    assert result.exit_code == 8 and json.loads(result.stdout)["error"] == "TrustError"
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("case", ["unsigned", "untrusted", "altered"])
def test_a_bundle_that_does_not_verify_is_refused_before_the_engine(engine, example_resolved,
                                                                    offline_parts, team, tmp_path, monkeypatch,
                                                                    case):
    other = keys.generate_keys(tmp_path / "other")
    signer = {"unsigned": [], "untrusted": ["--signing-key", other["private_key"]],
              "altered": ["--signing-key", team["private_key"]]}[case]
    out = tmp_path / "b"
    assert invoke("bundle", "make", "examples/team.yaml", "--bundle", out, *signer).exit_code == 0
    signed_digest = manifest_digest((out / MANIFEST).read_bytes())
    if case == "altered":
        (out / MANIFEST).write_text((out / MANIFEST).read_text().replace('"torch25"', '"other"', 1))
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: pytest.fail("the engine was asked"))
    monkeypatch.setattr(bundle_mod, "build_from_bundle", lambda *a, **k: pytest.fail("a build started"))
    result = invoke("bundle", "build", out, "--trusted-keys", team["public_key"], "--json")
    assert result.exit_code == 8, result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "TrustError"
    expected = {"unsigned": "is unsigned", "untrusted": f"not trusted here ({other['fingerprint']})",
                "altered": f"about the manifest {signed_digest}, not this bundle's"}[case]
    assert expected in doc["message"]


def test_a_bundle_carries_the_images_registry_documents_and_a_site_verifies_them(
        engine, example_resolved, offline_parts, built, team, tmp_path, monkeypatch):
    """``bundle make --registry``: what ``registry.carry.fetch_carried`` reads there (replaced: a real cosign
    signature and certificate attestation, signed with the team key) goes into attestations/ and the manifest;
    ``bundle build --trusted-keys`` verifies each before the build, and refuses (exit 8) one altered since."""
    from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE
    from envkit.registry import carry
    from envkit.trust.attest import attest
    from envkit.trust.cosign import sign_payload, simple_signing_payload

    key = keys.load_signing_key(team["private_key"])
    asked = {}

    def fetch_carried(eng, ref, lock_hash):
        digest = "sha256:" + "d" * 64
        prefix, repo = digest.replace(":", "-"), ref.rsplit(":", 1)[0]
        payload = simple_signing_payload(repo, digest)
        asked.update(ref=ref, lock_hash=lock_hash)
        return carry.Carried({f"{prefix}.sig.0.payload.json": payload,
                              f"{prefix}.sig.0.b64": sign_payload(payload, key).encode(),
                              f"{prefix}.att.0.dsse.json": attest(CERTIFICATE_PREDICATE_TYPE, {"lock_hash": lock_hash},
                                                                  repo, digest, key)}, f"{repo}@{digest}")

    monkeypatch.setattr(carry, "fetch_carried", fetch_carried)
    out = tmp_path / "b"
    made = invoke("bundle", "make", "examples/team.yaml", "--bundle", out, "--signing-key", team["private_key"],
                  "--registry", "registry.example.org:5000", "--json")
    assert made.exit_code == 0, made.output
    doc = json.loads(made.stdout)
    assert asked["ref"] == f"registry.example.org:5000/{doc['tag']}" and asked["lock_hash"] == doc["lock_hash"]
    assert len(doc["carried"]["files"]) == 3 and doc["carried"]["from"].endswith("@sha256:" + "d" * 64)
    manifest = json.loads((out / MANIFEST).read_text())
    assert {f"attestations/{name}" for name in doc["carried"]["files"]} <= set(manifest["files"])

    result = invoke("bundle", "build", out, "--trusted-keys", team["public_key"], "--json")
    assert result.exit_code == 0, result.output
    carried = json.loads(result.stdout)["carried"]
    assert carried["checked"] and [d.get("signed_by") for d in carried["documents"]] == [team["fingerprint"]] * 2
    att = next(out.glob("attestations/*.att.0.dsse.json"))
    envelope = json.loads(att.read_bytes())
    envelope["payload"] = envelope["payload"][:-8] + "AAAAAAA="
    att.write_text(json.dumps(envelope))
    monkeypatch.setattr(bundle_mod, "build_from_bundle", lambda *a, **k: pytest.fail("a build started"))
    refused = invoke("bundle", "build", out, "--trusted-keys", team["public_key"], "--json")
    assert refused.exit_code == 8 and "altered after signing" in json.loads(refused.stdout)["message"]
