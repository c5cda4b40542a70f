"""The provenance of a published image from the history store's record of its build (``app.image_attestations``):
the record's facts, and none it does not hold (a real sqlite store; the engine only answers ``inspect``)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from envkit import __version__
from envkit.app.image_attestations import image_documents, recorded_provenance
from envkit.engine.protocol import ImageInfo
from envkit.store.history import Store
from envkit.store.migrations import MIGRATIONS, migrate
from envkit.support.labels import BASE_LABEL, CONTEXT_LABEL
from envkit.trust.provenance import PROVENANCE_PREDICATE_TYPE
from envkit.trust.sbom import SBOM_PREDICATE_TYPE
from tests.speccheck import check_provenance
from tests.unit.lockfixtures import make_image

CONTEXT = "sha256:" + "9" * 64
BASE_ID = "sha256:" + "b" * 64
WHEN = datetime.fromisoformat("2026-12-07T01:02:03.000000Z")


class Inspecting:
    def __init__(self, labels: dict[str, str]):
        self.labels = labels

    def inspect(self, ref: str) -> ImageInfo:
        return ImageInfo(id="sha256:" + "e" * 64, tags=(ref,), size=1, labels=self.labels, env={}, user="")


def test_a_built_record_gives_the_context_hash_the_build_times_and_the_builder(tmp_path):
    image = make_image()
    with Store.open(tmp_path / "h.sqlite", clock=lambda: WHEN) as store:
        store.record_build(image.name, image.hash, CONTEXT, tag="vision/torch25:x", image_id="sha256:e", seconds=90,
                           builder="buildkit", envkit_version="0.7.0")
        predicate = recorded_provenance(Inspecting({CONTEXT_LABEL: CONTEXT, BASE_LABEL: BASE_ID}), store, image,
                                        ref="vision/torch25:x", spec_path="team.yaml")
    check_provenance(predicate)
    definition = predicate["buildDefinition"]
    assert definition["externalParameters"] == {"spec": "team.yaml", "image": image.name}
    assert definition["internalParameters"]["contextHash"] == CONTEXT
    assert definition["resolvedDependencies"][0]["digest"] == {"sha256": "b" * 64}
    assert predicate["runDetails"]["builder"]["version"] == {"envkit": "0.7.0", "imageBuilder": "buildkit"}
    metadata = predicate["runDetails"]["metadata"]
    assert (metadata["startedOn"], metadata["finishedOn"]) == ("2026-12-07T01:00:33Z", "2026-12-07T01:02:03Z")


def test_a_record_made_before_the_store_kept_the_builder_says_unknown(tmp_path):
    """A store written by an older envkit (migrations 001-003): its build row has no builder column; opening it
    migrates, and the provenance made from that row says "unknown" for the builder and envkit version."""
    image = make_image()
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    migrate(db, MIGRATIONS[:3])
    db.execute("INSERT INTO builds (name, lock_hash, context_hash, tag, image_id, seconds, action, created_at) "
               "VALUES (?, ?, ?, 't', 'sha256:e', 90, 'built', '2026-12-07T01:02:03.000000Z')",
               (image.name, image.hash, CONTEXT))
    db.close()
    with Store.open(path) as store:
        predicate = recorded_provenance(Inspecting({CONTEXT_LABEL: CONTEXT}), store, image, ref="t", spec_path="s")
    check_provenance(predicate)
    assert predicate["runDetails"]["builder"]["version"] == {"envkit": "unknown", "imageBuilder": "unknown"}
    assert predicate["runDetails"]["metadata"]["finishedOn"] == "2026-12-07T01:02:03Z"


def test_an_image_only_ever_skipped_or_unrecorded_has_no_build_times(tmp_path):
    image = make_image()
    with Store.open(tmp_path / "h.sqlite", clock=lambda: WHEN) as store:
        store.record_build(image.name, image.hash, CONTEXT, tag="t", image_id="sha256:e", action="skipped")
        skipped = recorded_provenance(Inspecting({CONTEXT_LABEL: CONTEXT}), store, image, ref="t", spec_path="s")
        unlabelled = recorded_provenance(Inspecting({}), store, image, ref="t", spec_path="s")
    assert skipped["runDetails"]["builder"]["version"]["imageBuilder"] == "unknown"  # skipped: no builder ran
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


def test_envkit_builds_record_the_builder_its_provenance_names(tmp_path):
    """``envkit build`` records the outcome's builder (``app.build.record_build``), and the provenance made from
    that record names it: buildkit here, and reproducible when envkit wrote the environment layers."""
    from envkit.app.build import record_build
    from envkit.images.builder import Outcome

    image = make_image()
    for layers, kind in (({}, "buildkit"), ({"env": "sha256:" + "a" * 64}, "reproducible")):
        store_path = tmp_path / f"{kind}.sqlite"
        record_build(str(store_path), image, Outcome(name=image.name, tag="t", action="built", image_id="sha256:e",
                                                     seconds=5, builder="buildkit", context_hash=CONTEXT,
                                                     layers=layers))
        with Store.open(store_path) as store:
            predicate = recorded_provenance(Inspecting({CONTEXT_LABEL: CONTEXT}), store, image, ref="t",
                                            spec_path="s")
        assert predicate["runDetails"]["builder"]["version"] == {"envkit": __version__, "imageBuilder": kind}
