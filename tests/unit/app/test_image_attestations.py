"""The provenance of a published image from the history store's record of its build (``app.image_attestations``):
the record's facts, and none it does not hold (a real sqlite store; the engine only answers ``inspect``)."""

from __future__ import annotations

from datetime import datetime

from envkit.app.image_attestations import image_documents, recorded_provenance
from envkit.engine.protocol import ImageInfo
from envkit.store.history import Store
from envkit.support.labels import BASE_LABEL, CONTEXT_LABEL
from envkit.trust.provenance import PROVENANCE_PREDICATE_TYPE
from envkit.trust.sbom import SBOM_PREDICATE_TYPE
from tests.unit.lockfixtures import make_image

CONTEXT = "sha256:" + "9" * 64
BASE_ID = "sha256:" + "b" * 64
WHEN = datetime.fromisoformat("2026-12-07T01:02:03.000000Z")


class Inspecting:
    def __init__(self, labels: dict[str, str]):
        self.labels = labels

    def inspect(self, ref: str) -> ImageInfo:
        return ImageInfo(id="sha256:" + "e" * 64, tags=(ref,), size=1, labels=self.labels, env={}, user="")


def test_a_built_record_gives_the_context_hash_and_the_build_times_and_no_builder(tmp_path):
    image = make_image()
    with Store.open(tmp_path / "h.sqlite", clock=lambda: WHEN) as store:
        store.record_build(image.name, image.hash, CONTEXT, tag="vision/torch25:x", image_id="sha256:e", seconds=90)
        predicate = recorded_provenance(Inspecting({CONTEXT_LABEL: CONTEXT, BASE_LABEL: BASE_ID}), store, image,
                                        ref="vision/torch25:x", spec_path="team.yaml")
    definition = predicate["buildDefinition"]
    assert definition["externalParameters"] == {"spec": "team.yaml", "image": image.name}  # builder: not recorded
    assert definition["internalParameters"]["contextHash"] == CONTEXT
    assert definition["resolvedDependencies"][0]["digest"] == {"sha256": "b" * 64}
    metadata = predicate["runDetails"]["metadata"]
    assert (metadata["startedOn"], metadata["finishedOn"]) == ("2026-12-07T01:00:33Z", "2026-12-07T01:02:03Z")


def test_an_image_only_ever_skipped_or_unrecorded_has_no_build_times(tmp_path):
    image = make_image()
    with Store.open(tmp_path / "h.sqlite", clock=lambda: WHEN) as store:
        store.record_build(image.name, image.hash, CONTEXT, tag="t", image_id="sha256:e", action="skipped")
        skipped = recorded_provenance(Inspecting({CONTEXT_LABEL: CONTEXT}), store, image, ref="t", spec_path="s")
        unlabelled = recorded_provenance(Inspecting({}), store, image, ref="t", spec_path="s")
    assert set(skipped["runDetails"]["metadata"]) == {"invocationId"}
    assert skipped["buildDefinition"]["internalParameters"]["contextHash"] == CONTEXT
    assert "contextHash" not in unlabelled["buildDefinition"]["internalParameters"]
    assert set(unlabelled["runDetails"]["metadata"]) == {"invocationId"}


def test_documents_are_made_only_when_asked(tmp_path):
    """The signer calls a maker only for a type the image's .att lacks: making the map runs nothing."""
    with Store.open(tmp_path / "h.sqlite") as store:
        made = image_documents(object(), store, make_image(), ref="t", digest="sha256:" + "f" * 64,  # type: ignore[arg-type]
                               spec_path="s")
    assert set(made) == {SBOM_PREDICATE_TYPE, PROVENANCE_PREDICATE_TYPE}
