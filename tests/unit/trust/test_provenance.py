"""SLSA provenance v1 of an image build, checked against the official definition of the predicate.

The SLSA project publishes the v1 predicate as a CUE schema and a protobuf definition (slsa-framework/slsa
docs/spec/v1.*/schema/provenance.cue and .proto; in-toto/attestation protos/in_toto_attestation/predicates/
provenance/v1/provenance.proto), and no JSON Schema. The in-toto-attestation package ships that protobuf
definition compiled (``in_toto_attestation.predicates.provenance.v1.provenance_pb2``): the predicate is parsed into
it with unknown fields refused (every name and type as the spec's, timestamps as RFC 3339), and the spec's REQUIRED
fields, which protobuf cannot mark, are checked by name; the Statement around it with the package's own
``Statement.validate``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1.statement import Statement

from envkit import __version__
from envkit.errors import EnvkitError
from envkit.images.builder import Outcome
from envkit.lock import BaseImage
from envkit.trust.attest import statement
from envkit.trust.provenance import BUILDER_ID, PROVENANCE_PREDICATE_TYPE, build_provenance, provenance_for
from tests.speccheck import check_provenance
from tests.unit.lockfixtures import make_image

FINISHED = datetime(2026, 12, 7, 1, 2, 3, 456789, tzinfo=timezone.utc)
CONTEXT = "sha256:" + "c" * 64
BASE_ID = "sha256:" + "b" * 64


def outcome(**changes) -> Outcome:
    fields = dict(name="torch25", tag="vision/torch25:2.5.1-abc", action="built", image_id="sha256:" + "e" * 64,
                  size=1, seconds=125.5, builder="buildkit", context_hash=CONTEXT)
    fields.update(changes)
    return Outcome(**fields)  # type: ignore[arg-type]


def official(predicate: dict) -> provenance_pb2.Provenance:  # type: ignore[name-defined]
    """``predicate`` as the official protobuf definition reads it, the spec's REQUIRED fields present
    (``tests.speccheck.check_provenance``, which shares no code with envkit)."""
    return check_provenance(predicate)


def test_provenance_from_a_real_build_outcome_reads_as_the_official_definition():
    image = make_image()
    predicate = provenance_for(image, outcome(), spec_path="team.yaml", finished_on=FINISHED, base_id=BASE_ID,
                               invocation_id="nightly-42")
    message = official(predicate)
    assert message.run_details.metadata.finished_on.ToDatetime(timezone.utc) == FINISHED.replace(microsecond=0)
    assert message.run_details.metadata.started_on.ToDatetime(timezone.utc) == \
        (FINISHED - timedelta(seconds=125.5)).replace(microsecond=0)
    definition = predicate["buildDefinition"]
    assert definition["buildType"].startswith("https://envkit.dev/")
    assert definition["externalParameters"] == {"spec": "team.yaml", "image": "torch25"}
    assert definition["internalParameters"]["lockHash"] == image.hash
    assert definition["internalParameters"]["contextHash"] == CONTEXT
    base, lock = definition["resolvedDependencies"]
    assert base["name"] == image.base.ref and base["digest"] == {"sha256": "b" * 64}
    assert lock["digest"] == {"sha256": image.hash.removeprefix("sha256:")} and lock["uri"] == "team.lock"
    run = predicate["runDetails"]
    assert run["builder"] == {"id": BUILDER_ID, "version": {"envkit": __version__, "imageBuilder": "buildkit"}}
    assert message.run_details.builder.version["imageBuilder"] == "buildkit"
    assert run["metadata"] == {"invocationId": "nightly-42", "startedOn": "2026-12-07T00:59:57Z",
                               "finishedOn": "2026-12-07T01:02:03Z"}


def test_the_locks_base_digest_wins_and_an_unknown_one_leaves_a_uri():
    pinned = make_image(base=BaseImage(ref="nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                                       digest="sha256:" + "d" * 64, distro="ubuntu", suite="jammy"))
    base = build_provenance(pinned, spec_path="team.yaml", builder="classic", envkit_version="0.1.0",
                            context_hash=CONTEXT, started_on=FINISHED, finished_on=FINISHED,
                            base_id=BASE_ID)["buildDefinition"]["resolvedDependencies"][0]
    assert base["digest"] == {"sha256": "d" * 64}
    unknown = provenance_for(make_image(), outcome(), spec_path="team.yaml", finished_on=FINISHED)
    official(unknown)
    base = unknown["buildDefinition"]["resolvedDependencies"][0]
    assert "digest" not in base and base["uri"] == "docker-image:" + make_image().base.ref


def test_the_statement_around_it_is_a_valid_in_toto_statement_v1():
    predicate = provenance_for(make_image(), outcome(), spec_path="team.yaml", finished_on=FINISHED)
    doc = statement(PROVENANCE_PREDICATE_TYPE, predicate, "registry.example.org/vision/torch25", "sha256:" + "f" * 64)
    parsed = Statement.copy_from_pb(json_format.ParseDict(doc, Statement([], "", {}).pb))
    parsed.validate()
    assert parsed.pb.predicate_type == "https://slsa.dev/provenance/v1"


def test_the_official_definition_refuses_a_misspelt_field():
    predicate = provenance_for(make_image(), outcome(), spec_path="team.yaml", finished_on=FINISHED)
    predicate["runDetails"]["metadata"]["startedAt"] = predicate["runDetails"]["metadata"].pop("startedOn")
    with pytest.raises(json_format.ParseError):
        official(predicate)


def test_a_build_that_was_skipped_has_no_provenance_of_its_own():
    with pytest.raises(EnvkitError, match="was not built by this run"):
        provenance_for(make_image(), outcome(action="skipped", builder=""), spec_path="team.yaml",
                       finished_on=FINISHED)


def test_naive_times_are_refused():
    with pytest.raises(ValueError, match="no time zone"):
        provenance_for(make_image(), outcome(), spec_path="team.yaml", finished_on=FINISHED.replace(tzinfo=None))


def test_facts_a_build_record_does_not_hold_are_unknown_or_left_out_not_guessed():
    """A history record made before the store kept the builder says "unknown" for the builder and the envkit that
    built it (builder.version is a map of strings in SLSA v1), and an image only ever skipped has no build times:
    those are absent (SLSA v1 makes them optional); what remains still reads as the official definition."""
    image = make_image()
    predicate = build_provenance(image, spec_path="team.yaml", builder=None, envkit_version=None, context_hash=None,
                                 started_on=None, finished_on=None, invocation_id="nightly-43")
    official(predicate)
    assert predicate["buildDefinition"]["externalParameters"] == {"spec": "team.yaml", "image": "torch25"}
    assert predicate["runDetails"]["builder"] == {"id": BUILDER_ID,
                                                  "version": {"envkit": "unknown", "imageBuilder": "unknown"}}
    assert "contextHash" not in predicate["buildDefinition"]["internalParameters"]
    assert predicate["runDetails"]["metadata"] == {"invocationId": "nightly-43"}


@pytest.mark.parametrize("changes, kind", [({}, "buildkit"), ({"builder": "classic"}, "classic"),
                                           ({"layers": {"env": "sha256:" + "a" * 64}}, "reproducible")])
def test_the_outcomes_builder_is_the_provenances(changes, kind):
    """classic | buildkit from the outcome's builder; reproducible when envkit wrote the environment layers."""
    predicate = provenance_for(make_image(), outcome(**changes), spec_path="team.yaml", finished_on=FINISHED)
    assert official(predicate).run_details.builder.version["imageBuilder"] == kind


def test_a_builder_envkit_does_not_know_is_refused():
    with pytest.raises(ValueError, match="not an image builder"):
        build_provenance(make_image(), spec_path="team.yaml", builder="kaniko", envkit_version="0.1.0",
                         context_hash=None, started_on=None, finished_on=None)


def test_the_spec_check_refuses_a_builder_without_an_id():
    predicate = provenance_for(make_image(), outcome(), spec_path="team.yaml", finished_on=FINISHED)
    del predicate["runDetails"]["builder"]["id"]
    with pytest.raises(AssertionError):
        official(predicate)
