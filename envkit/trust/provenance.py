"""SLSA provenance v1 (https://slsa.dev/spec/v1.0/provenance) of an image envkit built: the predicate of an in-toto
Statement whose subject is the image's manifest digest (the signer, ``attest``, wraps and signs it).

What a build knows, each from its owner: the lock (``LockedImage``: the image's name, its lock hash, its base image
and digest), the build's outcome (``images.builder.Outcome``: which builder ran, the context hash, how long it
took) and envkit's version. ``runDetails.builder`` names envkit (``BUILDER_ID``) with, in its ``version`` map,
the envkit that built the image and the image builder it drove (classic | buildkit | reproducible).
``provenance_for`` takes those objects; ``build_provenance`` the same facts one by one, for a caller that has them
from elsewhere (the history store's record of a build, whose builder may be unknown: "unknown").
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from .. import __version__
from ..errors import EnvkitError
from ..images.builder import Outcome
from ..lock import LockedImage

PROVENANCE_PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://envkit.dev/build/image/v1"  # what the parameters below mean: an envkit image build
BUILDER_ID = "https://envkit.dev/builder/v1"  # envkit on the team's build host (nightly runner, CI, a workstation)
LOCK_FILE = "team.lock"
BUILDER_KINDS = ("classic", "buildkit", "reproducible")  # ``images.builder.Outcome.made_by``, as the store records it
UNKNOWN = "unknown"  # a builder.version value no record holds (a build recorded before envkit kept it)


def timestamp(when: datetime) -> str:
    """RFC 3339 in UTC with a Z, as SLSA's ``#Timestamp`` writes it (``2026-12-07T00:35:00Z``)."""
    if when.tzinfo is None:
        raise ValueError(f"{when!r} has no time zone: provenance times are UTC")
    return when.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _sha256(digest: str) -> dict[str, str]:
    """A DigestSet (``{"sha256": hex}``) of ``sha256:<hex>``."""
    algorithm, _, value = digest.partition(":")
    if algorithm != "sha256" or not value:
        raise ValueError(f"{digest!r} is not a sha256 digest")
    return {"sha256": value}


def builder_of(kind: str | None, envkit_version: str | None) -> dict:
    """``runDetails.builder``: envkit (``BUILDER_ID``) and its ``version`` map: the envkit that built the image and
    which image builder it drove (``BUILDER_KINDS``); either "unknown" when the caller does not know it (a history
    record made before envkit kept them), never guessed from this run's."""
    if kind and kind not in BUILDER_KINDS:
        raise ValueError(f"{kind!r} is not an image builder ({' | '.join(BUILDER_KINDS)})")
    return {"id": BUILDER_ID, "version": {"envkit": envkit_version or UNKNOWN, "imageBuilder": kind or UNKNOWN}}


def build_provenance(image: LockedImage, *, spec_path: str, builder: str | None, envkit_version: str | None,
                     context_hash: str | None, started_on: datetime | None, finished_on: datetime | None,
                     base_id: str | None = None, invocation_id: str | None = None, lock_path: str = LOCK_FILE) -> dict:
    """The SLSA v1 predicate of the image built from ``image``. ``spec_path``: the team.yaml it was resolved from;
    ``builder``: classic | buildkit | reproducible and ``envkit_version``: the envkit that built it (both in
    ``runDetails.builder.version``, "unknown" when None); ``context_hash``: the build context's (its
    ``io.envkit.context-hash`` label); ``base_id``: the engine's id of the base it was built on (its
    ``io.envkit.base-id`` label), when the lock has no digest for it; ``invocation_id``: this build's id (a new
    UUID when not given). The other facts the caller does not know (``None``: an image only ever skipped has no
    build times) are left out, never guessed: the context hash from ``internalParameters``,
    ``startedOn``/``finishedOn`` from the metadata (each optional in SLSA v1)."""
    base = {"name": image.base.ref, "annotations": {"distro": image.base.distro, "suite": image.base.suite}}
    base_digest = image.base.digest or base_id
    if base_digest:
        base["digest"] = _sha256(base_digest)
    else:
        base["uri"] = f"docker-image:{image.base.ref}"  # a descriptor needs a uri or a digest: the local tag
    lock = {"name": f"{lock_path}#{image.name}", "uri": lock_path, "digest": _sha256(image.hash),
            "annotations": {"hashOf": "the image's entry in the lock (its io.envkit.lock-hash label)"}}
    internal = {"lockHash": image.hash, **({"contextHash": context_hash} if context_hash else {}),
                "framework": image.framework, "frameworkVersion": image.framework_version, "flavour": image.flavour}
    metadata = {"invocationId": invocation_id or str(uuid.uuid4())}
    if started_on is not None:
        metadata["startedOn"] = timestamp(started_on)
    if finished_on is not None:
        metadata["finishedOn"] = timestamp(finished_on)
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"spec": spec_path, "image": image.name},
            "internalParameters": internal,
            "resolvedDependencies": [base, lock],
        },
        "runDetails": {"builder": builder_of(builder, envkit_version), "metadata": metadata},
    }


def provenance_for(image: LockedImage, outcome: Outcome, *, spec_path: str, finished_on: datetime,
                   base_id: str | None = None, invocation_id: str | None = None, lock_path: str = LOCK_FILE) -> dict:
    """``build_provenance`` from a build's ``outcome`` (``images.builder.build_image``'s): its builder, context hash
    and time; it started ``outcome.seconds`` before ``finished_on`` (when the build returned, UTC). An outcome that
    built nothing (``skipped``: an identical image was on the engine) describes no build, and is refused."""
    if outcome.action != "built" or not outcome.builder:
        raise EnvkitError(f"{outcome.tag} was not built by this run ({outcome.action}): its provenance is its own "
                          "build's", hint="make provenance when the image is built, or from the history store's "
                                          "record of that build (build_provenance)")
    return build_provenance(image, spec_path=spec_path, builder=outcome.made_by, envkit_version=__version__,
                            context_hash=outcome.context_hash, finished_on=finished_on,
                            started_on=finished_on - timedelta(seconds=outcome.seconds),
                            base_id=base_id, invocation_id=invocation_id, lock_path=lock_path)
