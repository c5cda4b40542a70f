"""A small team registry as nightly leaves it, for what researchers read (`envkit show` / `envkit ls`).

Two envkit "stacks" of team vision (label-only images on the local envkit base: no new
layer, nothing large is pushed), one promoted ``:certified``; certificate artifacts attached
the way nightly attaches them; a base mirror; an image envkit did not build; and a repository
whose certificate artifact is not a certificate. Each published image is signed with a test key and its
certificates attached as signed attestations (``sign``), as a nightly with ``--signing-key`` does; the old unsigned
artifacts stay beside them (a registry in migration) and read as "unsigned". The ``team`` fixture trusts the test
key (``$ENVKIT_TRUSTED_KEYS``) for its module. Used by tests/integration/test_remote.py and by
tests/unit/data/registry/record.py (which records the registry's answers for unit tests).
"""

from __future__ import annotations

import atexit
import functools
import io
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker.errors
import pytest

from envkit.engine.docker_engine import as_engine
from envkit.certify.certificate import Certificate
from envkit.registry.artifacts import attach_certificate
from envkit.registry.publish import mirror_base, promote, push
from envkit.registry.signing import sign_published
from envkit.trust.keys import TRUSTED_KEYS_ENV, SigningKey, generate_keys, load_signing_key

STACK_A = "2.5.1-cu124-py3.11-aaaaaaaa"
STACK_B = "2.5.1-cu124-py3.11-bbbbbbbb"
LOCK_A = "sha256:" + "a" * 64
LOCK_B = "sha256:" + "b" * 64
NO_WAIT = dict(sleep=lambda s: None)


def labels_for(lock_hash: str, stack: str) -> dict[str, str]:
    return {"io.envkit.team": "vision", "io.envkit.image": "torch25", "io.envkit.lock-hash": lock_hash,
            "io.envkit.framework": "torch==2.5.1", "io.envkit.variant": "cu124", "io.envkit.cuda": "12.4.127",
            "io.envkit.python": "3.11", "io.envkit.driver-floor": "525.60.13",
            "org.opencontainers.image.version": stack}


def label_image(dc, base: str, ref: str, labels: dict[str, str], env: dict[str, str]) -> str:
    """``FROM base`` + labels + env: a distinct image id that shares every layer with the base."""
    lines = [f"FROM {base}", *(f'LABEL {k}="{v}"' for k, v in labels.items()),
             *(f'ENV {k}="{v}"' for k, v in env.items())]
    image, _ = dc.images.build(fileobj=io.BytesIO("\n".join(lines).encode()), tag=ref, pull=False, rm=True)
    return image.id


def certificate(image: str, image_id: str, lock_hash: str, gpu: str, status: str, created_at: str,
                reasons: tuple[str, ...] = ()) -> Certificate:
    return Certificate(image=image, image_id=image_id, lock_hash=lock_hash, gpu_model=gpu,
                       driver="570.124.06" if gpu != "none" else "none", status=status, reasons=reasons,
                       mode="certify" if gpu != "none" else "verify", gpu_count=8 if gpu != "none" else 0,
                       payload_version="test", payload_sha256="", envkit_version="test", created_at=created_at)


def keypair(name: str = "team") -> tuple[SigningKey, Path]:
    """A key pair made once per test process and name (unencrypted): the signing key and its public key file, in a
    directory removed when the process ends."""
    return _keypair(name)


@functools.cache
def _keypair(name: str) -> tuple[SigningKey, Path]:
    directory = tempfile.mkdtemp(prefix=f"envkit-test-key-{name}-")
    atexit.register(shutil.rmtree, directory, True)
    made = generate_keys(Path(directory))
    key = load_signing_key(made["private_key"])
    assert key is not None
    return key, Path(made["public_key"])


def sign(dc, repo: str, digest: str, certs: list[Certificate], key: str = "team") -> None:
    """What a nightly with --signing-key does after pushing: the image's cosign signature, each certificate as a
    signed attestation about ``digest``."""
    engine = as_engine(dc)  # (envkit.registry takes the Engine)
    sign_published(engine, repo, digest, keypair(key)[0], certs, **NO_WAIT)


@dataclass
class Team:
    host: str
    image_a: str  # local image ids
    image_b: str
    digest_a: str = ""  # manifest digests in the registry
    digest_b: str = ""
    local: list[str] = field(default_factory=list)  # local tags this scenario made

    def ref(self, stack: str, repo: str = "vision/torch25") -> str:
        return f"{self.host}/{repo}:{stack}"


def publish_team(dc, base: str, host: str) -> Team:
    engine = as_engine(dc)  # (envkit.registry takes the Engine)
    env = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    local_a, local_b = "envkit-test/remote-a:1", "envkit-test/remote-b:1"
    team = Team(host, label_image(dc, base, local_a, labels_for(LOCK_A, STACK_A), env),
                label_image(dc, base, local_b, labels_for(LOCK_B, STACK_B), env), local=[local_a, local_b])
    repo = f"{host}/vision/torch25"
    team.digest_a = promote(engine, repo, STACK_A, certified=True, image=local_a, **NO_WAIT).digest
    certs = []
    for gpu, slug, status, when in (("NVIDIA H200", "nvidia-h200", "certified", "2026-12-01T03:00:00Z"),
                                    ("none", "none", "verified", "2026-11-30T22:00:00Z")):
        cert = certificate(f"vision/torch25:{STACK_A}", team.image_a, LOCK_A, gpu, status, when)
        attach_certificate(engine, repo, STACK_A, cert.to_bytes(), gpu_slug=slug, status=status, **NO_WAIT)
        certs.append(cert)
    sign(dc, repo, team.digest_a, certs)
    team.digest_b = promote(engine, repo, STACK_B, certified=False, image=local_b, **NO_WAIT).digest
    cert = certificate(f"vision/torch25:{STACK_B}", team.image_b, LOCK_B, "none", "verified", "2026-12-02T01:00:00Z")
    attach_certificate(engine, repo, STACK_B, cert.to_bytes(), gpu_slug="none", status="verified", **NO_WAIT)
    sign(dc, repo, team.digest_b, [cert])
    mirror_base(engine, base, f"{host}/vision/base-debian-bookworm", **NO_WAIT)
    push(engine, base, f"{host}/tools/debian", "bookworm", **NO_WAIT)  # not an envkit image
    broken = f"{host}/broken/torch25"
    promote(engine, broken, STACK_A, certified=False, image=local_a, **NO_WAIT)
    attach_certificate(engine, broken, STACK_A, b"this is not a certificate", gpu_slug="nvidia-h200",
                       status="certified", **NO_WAIT)
    untag_registry_refs(dc, host)
    return team


def untag_registry_refs(dc, host: str) -> None:
    """Remove every local tag and digest reference into ``host`` (the images stay under their own tags).
    One listing call (`docker images`), not `dc.images.list()`, which inspects each image it listed and
    fails on one the other test worker removed in between."""
    for summary in dc.api.images():
        for ref in [*(summary.get("RepoTags") or ()), *(summary.get("RepoDigests") or ())]:
            if ref.startswith(host + "/"):
                try:
                    dc.images.remove(ref)
                except docker.errors.APIError:
                    pass


def remove_local(dc, team: Team) -> None:
    untag_registry_refs(dc, team.host)
    for ref in team.local:
        try:
            dc.images.remove(ref, force=True)
        except docker.errors.APIError:
            pass


@pytest.fixture(scope="module")
def team(dc, base, registry) -> Iterator[Team]:
    """The team published to the test registry (``publish_team``), its local copies removed after the module;
    a test module imports it with the ``registry`` fixture. The test key is trusted ($ENVKIT_TRUSTED_KEYS) while
    the module runs."""
    published = publish_team(dc, base, registry.host)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TRUSTED_KEYS_ENV, str(keypair()[1]))
        yield published
    remove_local(dc, published)
