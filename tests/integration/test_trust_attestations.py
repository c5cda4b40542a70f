"""What the nightly's publish attaches beside an image it pushes with a signing key, against the real local
registry: through ``app.nightly_publish._publish`` (the nightly's own publish step, its push, certificate artifact,
signature and attestations) with the SBOM and provenance of ``app.image_attestations``. The image is a label-only
image on the small envkit base (no new layer, nothing large is pushed); its build is recorded in a history store
as ``nightly`` records one, so the provenance is made from that record.

The ``.att`` then holds three attestations that verify with the team key (certificate, CycloneDX, SLSA); the SBOM
validates against the official CycloneDX 1.6 schema and lists the image's Debian packages; the provenance reads as
the official SLSA v1 protobuf definition (``tests.speccheck.check_provenance``), with the record's facts (its
builder and envkit version in ``runDetails.builder.version``); publishing again adds nothing; what an offline
bundle carries of it (``registry.carry``, ``bundle make --registry``) verifies; and once the SBOM
attestation's payload is altered the gate refuses the image (`envkit pull --require-certified`, exit 8)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from datetime import datetime, timedelta

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from envkit import __version__
from envkit.app.image_attestations import documents_for
from envkit.app.nightly_publish import Asked, ImageReport, _publish
from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE
from envkit.engine.protocol import RunOptions
from envkit.lock import BaseImage, Lock
from envkit.registry.api import _RegistryHTTP
from envkit.registry.carry import fetch_carried, judge_carried
from envkit.registry.signatures import DSSE_TYPE, PREDICATE_ANNOTATION, Layer, att_tag, read_manifest_layers
from envkit.store.history import Store
from envkit.support.labels import CONTEXT_LABEL
from envkit.trust.attest import verify_attestation
from envkit.trust.keys import TRUSTED_KEYS_ENV, TrustedKeys
from envkit.trust.provenance import PROVENANCE_PREDICATE_TYPE
from envkit.trust.sbom import SBOM_PREDICATE_TYPE
from tests.integration.conftest import ENVKIT, empty_store
from tests.integration.published import certificate, keypair, label_image, labels_for, untag_registry_refs
from tests.integration.registry import registry  # noqa: F401  (a fixture)
from tests.speccheck import check_provenance
from tests.unit.lockfixtures import make_image

pytestmark = pytest.mark.integration

TEAM, STACK, CONTEXT = "attest", "2.5.1-cu124-py3.11-a77e57ed", "sha256:" + "9" * 64
LOCAL = f"{TEAM}/torch25:{STACK}"
FINISHED = datetime.fromisoformat("2026-12-07T01:02:03.000000Z")


def _att(reg: _RegistryHTTP, digest: str) -> tuple[str, list[Layer]]:
    found = read_manifest_layers(reg, att_tag(digest))
    assert found is not None, "no .att"
    return found


def _envelope_payload(layer: Layer) -> dict:
    return dict(json.loads(base64.b64decode(json.loads(layer.data)["payload"])))


def test_publish_attaches_certificate_sbom_and_provenance_signed(engine, dc, base, registry, tmp_path):  # noqa: F811
    suite = "bookworm" if "bookworm" in base else "trixie"
    image = make_image(base=BaseImage(ref=base, digest=None, distro="debian", suite=suite))
    lock = Lock(team=TEAM, spec_digest="sha256:" + "1" * 64, catalog_digest="sha256:" + "2" * 64,
                envkit_version="0.1.0", images=(image,))
    image_id = label_image(dc, base, LOCAL, {**labels_for(image.hash, STACK), "io.envkit.team": TEAM,
                                             CONTEXT_LABEL: CONTEXT}, {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0"})
    key, public = keypair()
    trusted = TrustedKeys({key.fingerprint: key.public})
    repo = f"{registry.host}/{TEAM}/{image.name}"
    try:
        with Store.open(tmp_path / "history.sqlite", clock=lambda: FINISHED) as store:
            store.record_build(image.name, image.hash, CONTEXT, tag=LOCAL, image_id=image_id, seconds=95.0,
                               builder="buildkit", envkit_version=__version__)
            run_id = store.start_run(lock.spec_digest)
            cert = certificate(f"{TEAM}/torch25:{STACK}", image_id, image.hash, "NVIDIA H200", "certified",
                               "2026-12-07T03:00:00Z")
            info = engine.inspect(LOCAL)
            assert info is not None

            def publish() -> ImageReport:
                report = ImageReport(image.name, LOCAL, status="certified")
                _publish(engine, store, run_id, lock, image, report, info, registry.host, lambda _: None, cert,
                         Asked(), key, documents=documents_for(engine, store, image, LOCAL, "team.yaml"))
                assert report.publish_error is None, report.publish_error
                return report

            report = publish()
            digest = registry.manifest_digest(f"{TEAM}/{image.name}", STACK)
            assert digest and f"{repo}@{digest}" in report.pushed
            reg = _RegistryHTTP(None, repo)
            _, layers = _att(reg, digest)
            assert [layer.media_type for layer in layers] == [DSSE_TYPE] * 3
            verified = {v.predicate_type: v for v in (verify_attestation(x.data, trusted, digest) for x in layers)}
            assert set(verified) == {CERTIFICATE_PREDICATE_TYPE, SBOM_PREDICATE_TYPE, PROVENANCE_PREDICATE_TYPE}
            assert {layer.annotations[PREDICATE_ANNOTATION] for layer in layers} == set(verified)
            assert {v.signed_by for v in verified.values()} == {key.fingerprint}

            bom = verified[SBOM_PREDICATE_TYPE].predicate
            error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom))
            assert error is None, str(error)[:2000]
            query = engine.run(base, ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n"],
                               RunOptions(network=False, timeout=120))
            assert query.exit_code == 0, query.stderr
            installed = {line.split()[0] for line in query.stdout.splitlines() if line.split()[1:] == ["ii"]}
            debs = {c["name"] for c in bom["components"] if c["purl"].startswith("pkg:deb/debian/")}
            assert debs == installed and {"base-files", "dpkg", "libc6"} <= debs
            assert bom["metadata"]["component"]["hashes"][0]["content"] == digest.removeprefix("sha256:")

            provenance = verified[PROVENANCE_PREDICATE_TYPE].predicate
            check_provenance(provenance)
            assert provenance["runDetails"]["builder"]["version"] == {"envkit": __version__, "imageBuilder": "buildkit"}
            definition = provenance["buildDefinition"]
            assert definition["externalParameters"] == {"spec": "team.yaml", "image": image.name}
            assert definition["internalParameters"]["contextHash"] == CONTEXT
            assert definition["internalParameters"]["lockHash"] == image.hash
            metadata = provenance["runDetails"]["metadata"]
            assert metadata["finishedOn"] == "2026-12-07T01:02:03Z"
            assert metadata["startedOn"] == (FINISHED - timedelta(seconds=95)).strftime("%Y-%m-%dT%H:%M:%SZ")

            publish()  # the next signing nightly (published already: signed again) appends nothing
            assert [x.data for x in _att(reg, digest)[1]] == [x.data for x in layers]

            # what `bundle make --registry` carries of it: the signature and the three attestations, verifying
            carried = fetch_carried(engine, f"{repo}:{STACK}", image.hash)
            assert carried.pinned == f"{repo}@{digest}" and len(carried.files) == 5, carried
            judged = judge_carried(carried.files, trusted, image.hash)
            assert [j.get("signed_by") for j in judged] == [key.fingerprint] * 4, judged
            assert fetch_carried(engine, f"{repo}:{STACK}", "sha256:" + "0" * 64).files == {}  # another lock's

        env = {**os.environ, TRUSTED_KEYS_ENV: str(public)}
        command = [*ENVKIT, "pull", f"{repo}:{STACK}", "--no-gpus", "--require-certified", "--json", "--store",
                   str(empty_store(tmp_path))]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        untag_registry_refs(dc, registry.host)
        # the SBOM attestation's payload altered after signing: the manifest rewritten with the edited envelope
        sbom_at = next(i for i, x in enumerate(layers) if x.annotations[PREDICATE_ANNOTATION] == SBOM_PREDICATE_TYPE)
        envelope = json.loads(layers[sbom_at].data)
        statement = _envelope_payload(layers[sbom_at])
        statement["predicate"]["components"] = statement["predicate"]["components"][1:]  # a package hidden
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        edited = [*layers]
        edited[sbom_at] = Layer(DSSE_TYPE, json.dumps(envelope).encode(), dict(layers[sbom_at].annotations))
        _rewrite(reg, att_tag(digest), edited)
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        assert f"its {SBOM_PREDICATE_TYPE} attestation was altered after signing" in doc["message"], doc["message"]
        assert not dc.api.images(name=repo), "nothing is pulled"
    finally:
        untag_registry_refs(dc, registry.host)
        dc.images.remove(LOCAL, force=True)


def _rewrite(reg: _RegistryHTTP, tag: str, layers: list[Layer]) -> None:
    """Write ``tag`` anew with ``layers`` (an attacker with push rights; envkit itself only appends)."""
    from envkit.registry.signatures import _manifest_of

    config, manifest = _manifest_of(layers)
    for blob in [config, *(layer.data for layer in layers)]:
        reg.put_blob(blob)
    reg.put_manifest(tag, manifest)
