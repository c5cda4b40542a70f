"""Offline bundles: everything a rebuild of one locked image needs, built with no network.

A bundle directory holds (docs/images.md):

    manifest.json          what it is, and the sha256 of every other file in it
    envkit.lock            the lock, cut down to this image (its hash still checks)
    envkit.layers.json     the lock's layer record for this image, when it has one (``verify --lock`` reads it)
    base.tar               ``docker save`` of the base image the Dockerfile starts FROM
    context/               the build context, rendered in wheelhouse mode
      Dockerfile             for the classic builder
      buildkit.Dockerfile    for BuildKit (bind mounts instead of copies)
      requirements/ envkit/  as in an online build
      wheelhouse/            every wheel pip installs, sha256-checked against the lock
      debs/<stage>/          the Debian packages each stage installs, resolved against the base
    installer/             the pinned uv wheel for the image's machine (``--reproducible`` installs with it)
    attestations/          the signed documents of the image, when given: DSSE envelopes (certificates, SBOM,
                           provenance) and signatures, as their signer made them (``bundle_attestations`` reads them)
      bundle.intoto.json     signed by the team key: manifest.json's sha256 (after the manifest; ``trust.bundle``)

``make_bundle`` needs the network (the package index and the Debian mirror);
``build_from_bundle`` does not: it checks every file against the manifest, loads the base
and builds with the network cut off inside the build, or (``reproducible``) builds the OS stage so and
installs the environment as ``envkit build --reproducible`` does, from the bundle's files.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from .. import __version__
from ..devel import APT as DEVEL_APT
from ..devel import fetch_toolkit_deb
from ..engine.protocol import AUTO, BuildEvent, Mount, RunOptions
from ..engine.space import host_out_of_space, low_space
from ..errors import BuildError, EnvkitError
from ..lock import Lock, LockedImage, load_lock
from ..render import installer
from ..render.files import context_for, context_hash, image_tag, install_packages, render_files
from ..support import scratch
from ..support.atomic import write_atomic
from ..support.download import fetch_pinned
from ..support.progress import Progress, phase_lines
from .base import ensure_base
from .builder import (
    BASE_LABEL,
    CONTEXT_LABEL,
    LOCK_LABEL,
    Outcome,
    assembled_outcome,
    pick_builder,
    require_builder,
    run_build,
    stage_context,
    verified,
)
from .bundle_manifest import (
    ATTESTATIONS,
    BASE_ARCHIVE,
    BUNDLE_LABEL,
    BUNDLE_VERSION,
    CONTEXT,
    DOCKERFILES,
    INSTALLER,
    LOCK_FILE,
    MANIFEST,
    REMAKE_HOW,
    SIGNATURE,
    check_attestation_name,
    file_hashes,
    is_bundle,
    sha256_of,
    verify_bundle,
)
from .install_source import Offline
from .layer_record import Recorded, write_record
from .reproducible import DevelSteps, assemble, env_tag, made_how, require_local
from .wheelhouse import download_wheels, lock_indexes

if TYPE_CHECKING:
    from ..engine.protocol import Engine


# Fetches each stage's Debian packages (and what they pull in) against the base's own state:
# os first (then installed), then devel's, relative to the os stage.
_FETCH_DEBS = r"""
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
fetch() {
  local group=$1; shift
  mkdir -p "/out/$group"
  apt-get install -y -qq --download-only --no-install-recommends "$@" >/dev/null
  find /var/cache/apt/archives -maxdepth 1 -name '*.deb' -exec mv -t "/out/$group/" {} +
}
apt-get update -qq
fetch os $OS_PACKAGES
apt-get install -y -qq --no-install-recommends /out/os/*.deb >/dev/null
if [ -n "$DEVEL_PACKAGES" ]; then fetch devel $DEVEL_PACKAGES; fi
"""


def make_bundle(engine: Engine, lock: Lock, image_name: str, out_dir: Path, *, ca_bundle: Path | None,
                spec_name: str = "team.yaml", extra_index_url: str | None = None, record: Recorded | None = None,
                attestations: Mapping[str, bytes] | None = None, seal: Callable[[bytes], bytes] | None = None,
                progress: Progress = lambda _: None) -> Path:
    """Export what an offline rebuild of ``image_name`` needs into ``out_dir`` (replaced atomically).

    Wheels come from the lock's index, then ``extra_index_url`` (the spec's index, where the resolver
    found the extras of a framework on an index of its own, e.g. a PyTorch variant's); every file is
    checked against the lock's hashes, whichever index served it. ``record``: the image's entry of the lock's layer
    record, carried beside the bundle's lock. ``attestations``: signed documents of the image (file name -> bytes, as
    the signer made them), carried in ``attestations/`` and hashed into the manifest. ``seal``: the manifest's bytes
    -> the signed statement about them (``trust.bundle.bundle_sealer``), written as ``SIGNATURE`` after it.

    The bundle is made in a directory beside ``out_dir`` and renamed into place only when whole;
    an existing ``out_dir`` is replaced only when it is empty or an envkit bundle.
    """
    image = lock.image(image_name)
    out_dir = Path(out_dir).absolute()
    check_replaceable(out_dir)
    carried = {check_attestation_name(name): data for name, data in (attestations or {}).items()}
    lock = lock.model_copy(update={"images": (image,)})
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        for stale in stale_staging(out_dir):
            progress(f"removing {stale.name}, left by an envkit that was killed while making this bundle")
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=_staging_prefix(out_dir)))
    except OSError as exc:
        raise EnvkitError(f"cannot create the bundle beside {out_dir}: {exc}",
                          hint="choose an --out whose parent directory is writable") from None
    try:
        base = ensure_base(engine, image.base, progress, phases=phase_lines(progress))
        write_atomic(staging / LOCK_FILE, lock.to_bytes())
        if record is not None:
            write_record(staging / LOCK_FILE, [record])
        write_attestations(staging, carried)
        context = staging / CONTEXT
        for rel, data in render_files(lock, image, spec_name, wheelhouse=True).items():
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            (context / rel).write_bytes(data)
        (context / DOCKERFILES["buildkit"]).write_bytes(
            render_files(lock, image, spec_name, buildkit=True, wheelhouse=True)["Dockerfile"])
        progress(f"downloading {len(install_packages(image))} wheel(s) from "
                 + " then ".join(lock_indexes(image, extra_index_url)))
        download_wheels(image, context / "wheelhouse", ca_bundle=ca_bundle, extra_index_url=extra_index_url)
        if image.arch in installer.WHEELS:
            progress(f"downloading uv {installer.VERSION}'s wheel (what `bundle build --reproducible` installs with)")
            url, sha = installer.WHEELS[image.arch]
            fetch_pinned(url, sha, staging / INSTALLER / installer.wheel_name(image.arch), ca_bundle=ca_bundle,
                         hint="is PyPI's file host reachable (and the CA bundle right)?")
        progress(f"fetching Debian packages against {image.base.ref}")
        fetch_debs(engine, lock, image, context / "debs")
        if image.flavour == "devel" and image.toolkit_deb:  # CUDA 12: the compiler's programs (the lock's .deb)
            progress("downloading the CUDA compiler's Debian package")
            fetch_toolkit_deb(image, context / "debs" / "nvcc")
        progress(f"saving {image.base.ref}")
        save_image(engine, image.base.ref, staging / BASE_ARCHIVE)
        write_manifest(staging, lock, image, base.id, seal)
        _replace_dir(staging, out_dir)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        full = host_out_of_space(exc, f"making the bundle {out_dir} failed", measure=out_dir.parent,
                                 hint=f"nothing was written to {out_dir}; ")
        if full is not None:
            raise full from None
        raise EnvkitError(f"making the bundle {out_dir} failed: {exc}",
                          hint=f"nothing was written to {out_dir}; check the free space and permissions of "
                               f"{out_dir.parent}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


def write_manifest(bundle_dir: Path, lock: Lock, image: LockedImage, base_id: str,
                   seal: Callable[[bytes], bytes] | None) -> None:
    """The manifest over every file written so far, then (``seal``) the signed statement about the manifest."""
    manifest = {
        "generated": f"generated by envkit {__version__} - do not edit; regenerate with `envkit bundle make`",
        "version": BUNDLE_VERSION, "team": lock.team, "image": image.name, "tag": image_tag(lock.team, image),
        "lock_hash": image.hash, "flavour": image.flavour,
        "base": {"ref": image.base.ref, "id": base_id}, "dockerfiles": DOCKERFILES,
        "files": file_hashes(bundle_dir),
    }
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    write_atomic(bundle_dir / MANIFEST, manifest_bytes)
    if seal is not None:
        (bundle_dir / SIGNATURE).parent.mkdir(exist_ok=True)
        write_atomic(bundle_dir / SIGNATURE, seal(manifest_bytes))


def write_attestations(bundle_dir: Path, attestations: Mapping[str, bytes]) -> None:
    """Each signed document into ``attestations/`` (none: no directory), before the manifest hashes the bundle."""
    for name, data in attestations.items():
        (bundle_dir / ATTESTATIONS).mkdir(exist_ok=True)
        write_atomic(bundle_dir / ATTESTATIONS / check_attestation_name(name), data)


def _staging_prefix(out_dir: Path, pid: int | None = None) -> str:
    """``.<bundle>.envkit-<host>-<pid>-``: a staging directory says whose it is, so that a later run can tell
    one whose maker was killed (SIGKILL, a lost runner: no clean-up ran, GBs of wheels stay) from one
    another run on this or another host is still filling."""
    return f".{out_dir.name}.envkit-{scratch.owner(pid)}"


def stale_staging(out_dir: Path) -> list[Path]:
    """The staging directories beside ``out_dir`` made on this host by an envkit no longer running."""
    mine = re.compile(re.escape(f".{out_dir.name}.envkit-") + scratch.owner_pattern() + r"[^/]+")
    stale = []
    for path in sorted(out_dir.parent.glob(f".{glob.escape(out_dir.name)}.envkit-*")):
        m = mine.fullmatch(path.name)
        if m and path.is_dir() and not path.is_symlink() and not scratch.running(int(m.group("pid"))):
            stale.append(path)
    return stale


def check_replaceable(out_dir: Path) -> None:
    """``out_dir`` may be (re)written: absent, an empty directory, or an envkit bundle."""
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if out_dir.is_symlink() or not out_dir.is_dir():
        raise EnvkitError(f"{out_dir} exists and is not a directory; a bundle is a directory",
                          hint="choose another --out")
    here, real = Path.cwd().resolve(), out_dir.resolve()
    if real == here or real in here.parents:
        raise EnvkitError(f"{out_dir} is the working directory (or holds it); refusing to replace it with a bundle",
                          hint="choose a new directory for --out, e.g. out/<image>.bundle")
    if any(out_dir.iterdir()) and not is_bundle(out_dir):
        raise EnvkitError(f"{out_dir} exists and is not an envkit bundle; refusing to replace it",
                          hint="choose a new directory for --out, or remove this one first")


def _replace_dir(new: Path, target: Path) -> None:
    """Put the finished directory ``new`` at ``target``; an old ``target`` is moved aside first and
    removed only once ``new`` is in place (restored if the rename fails)."""
    if not target.exists():
        new.rename(target)
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=_staging_prefix(target) + "old-")) / target.name
    target.rename(old)
    try:
        new.rename(target)
    except BaseException:
        old.rename(target)
        old.parent.rmdir()
        raise
    shutil.rmtree(old.parent, ignore_errors=True)


BundleProgress = Callable[[BuildEvent | str], None]  # the builder's steps and log lines, and envkit's own lines


def build_from_bundle(engine: Engine, bundle_dir: Path, *, builder: str = AUTO, verify: bool = True,
                      no_cache: bool = False, reproducible: bool = False, signed_manifest: str | None = None,
                      progress: BundleProgress = lambda _: None) -> Outcome:
    """Check the bundle, load its base and build its image with no network inside the build.

    ``no_cache`` runs every step again (the builders' caches do not key on the network mode).
    ``reproducible``: the builder builds the OS stage (no network), then envkit installs the environment from the
    bundle's wheels with its uv in containers with no network and writes the layers (``reproducible.assemble``,
    ``Offline``): the lock's environment layers, as an online ``envkit build --reproducible`` writes them.
    ``signed_manifest``: the manifest digest whose signature was verified (``trust.bundle``); it must still be it.
    """
    require_builder(engine, builder)
    if reproducible:
        require_local(engine)
    bundle_dir = Path(bundle_dir)
    manifest = verify_bundle(bundle_dir)
    manifest_digest = "sha256:" + sha256_of(bundle_dir / MANIFEST)
    if signed_manifest is not None and manifest_digest != signed_manifest:
        raise BuildError(f"{bundle_dir / MANIFEST} changed after its signature was verified ({signed_manifest} "
                         f"-> {manifest_digest})", hint="nothing was built; check who writes to the bundle")
    builder = pick_builder(engine, builder)
    dockerfile = manifest["dockerfiles"].get(builder)
    if dockerfile is None or f"{CONTEXT}/{dockerfile}" not in manifest["files"]:
        where = (f"names {CONTEXT}/{dockerfile}, which is not among its files" if dockerfile is not None
                 else f"names no Dockerfile for it (dockerfiles: {', '.join(sorted(manifest['dockerfiles']))})")
        raise BuildError(f"{bundle_dir / MANIFEST}: the {builder} builder was asked for, but the manifest {where}",
                         hint=f"choose a builder the bundle has, or {REMAKE_HOW}")
    lock = load_lock(bundle_dir / LOCK_FILE)
    image = lock.image(manifest["image"])
    if image.hash != manifest["lock_hash"]:
        raise BuildError(f"{bundle_dir}: the lock's image hash differs from the manifest's")
    uv_wheel = _uv_wheel(bundle_dir, manifest, image) if reproducible else None
    started = time.monotonic()
    if (warning := low_space(engine)) is not None:
        progress(warning)
    progress(f"loading {manifest['base']['ref']} from {BASE_ARCHIVE}")
    load_image(engine, bundle_dir / BASE_ARCHIVE, manifest["base"]["id"], manifest["base"]["ref"])
    context = bundle_dir / CONTEXT
    rendered = _rendered(context, dockerfile)
    labels = {LOCK_LABEL: image.hash, CONTEXT_LABEL: context_hash({**rendered, **made_how(reproducible)}),
              BASE_LABEL: manifest["base"]["id"],
              BUNDLE_LABEL: manifest_digest}
    tag = manifest["tag"]
    if uv_wheel is not None:
        outcome = _assemble_offline(engine, lock, image, context, dockerfile, rendered, tag, labels, uv_wheel,
                                    builder, no_cache, progress)
    else:
        image_id = ""
        for event in run_build(engine, context, tag, labels, builder=builder, dockerfile=dockerfile, network=False,
                               no_cache=no_cache):
            if event.kind == "done":
                image_id = event.text
            progress(event)
        info = engine.inspect(tag)
        outcome = Outcome(image.name, tag, "built", info.id if info else image_id, info.size if info else 0,
                          builder=builder)
    outcome.seconds, outcome.labels = time.monotonic() - started, labels
    return verified(engine, image, outcome, verify, lambda _name, said: progress(str(said)))


def _uv_wheel(bundle_dir: Path, manifest: dict, image: LockedImage) -> Path:
    """The bundle's uv wheel for ``--reproducible`` (checked with the bundle's files; its sha256 against the pin
    in the install container)."""
    rel = f"{INSTALLER}/{installer.wheel_name(image.arch)}" if image.arch in installer.WHEELS else None
    if rel is None or rel not in manifest["files"]:
        raise BuildError(f"{bundle_dir} holds no uv {installer.VERSION} wheel for {image.arch}, which "
                         "--reproducible installs with (bundles made before envkit carried it have none)",
                         hint=f"build it without --reproducible, or {REMAKE_HOW}")
    return bundle_dir / rel


def _assemble_offline(engine: Engine, lock: Lock, image: LockedImage, context: Path, dockerfile: str,
                      rendered: dict[str, bytes], tag: str, labels: dict[str, str], uv_wheel: Path, builder: str,
                      no_cache: bool, progress: BundleProgress) -> Outcome:
    """``envkit build --reproducible`` from the bundle: its context's OS stage, then the layer groups' requirements
    as an online build renders them (the lock's), from its wheelhouse, and its payload. A devel image's steps are
    rendered for the assembled image (``env_image``) in wheelhouse mode and built from the bundle's context (its
    devel wheels and packages), that Dockerfile staged beside it."""
    files = {**{k: v for k, v in render_files(lock, image, "bundle").items() if k.startswith("requirements/")},
             **{k: v for k, v in rendered.items() if k.startswith("envkit/") or k == "Dockerfile"}}

    def build_os(_staged: Path, os_tag: str, os_labels: dict[str, str]) -> Iterator[BuildEvent]:
        return run_build(engine, context, os_tag, os_labels, builder=builder, dockerfile=dockerfile, network=False,
                         no_cache=no_cache, target="os")

    def build_devel(staged: Path, devel_tag: str, devel_labels: dict[str, str]) -> Iterator[BuildEvent]:
        return run_build(engine, context, devel_tag, devel_labels, builder=builder, network=False, no_cache=no_cache,
                         dockerfile=str((staged / "Dockerfile").resolve()))

    devel = None if image.flavour == "runtime" else DevelSteps(
        {"Dockerfile": render_files(lock, image, "bundle", buildkit=builder == "buildkit", wheelhouse=True,
                                    env_image=env_tag(tag))["Dockerfile"]}, build_devel)
    made = assemble(engine, lock, image, files, tag=tag, labels=labels, build_os=build_os, stage=stage_context,
                    ca_bundle=None, say=progress, reuse=not no_cache, devel=devel,
                    offline=Offline(context / "wheelhouse", uv_wheel))
    return assembled_outcome(engine, image, tag, made, builder)


# --- Debian packages and images ------------------------------------------------------

def fetch_debs(engine: Engine, lock: Lock, image: LockedImage, dest: Path) -> None:
    """Download, in a throwaway container of the base, the .debs each stage installs."""
    ctx = context_for(lock, image, "bundle", wheelhouse=True)  # the offline build's stages
    dest.mkdir(parents=True, exist_ok=True)
    env = {"OS_PACKAGES": " ".join(ctx.os_packages),
           "DEVEL_PACKAGES": " ".join(DEVEL_APT) if image.flavour == "devel" else ""}
    options = RunOptions(timeout=900, network=True, env=env, user="0", role="fetch-debs",
                         mounts=(Mount(str(dest.resolve()), "/out", read_only=False),))
    result = engine.run(image.base.ref, ["bash", "-c", _FETCH_DEBS], options)
    if result.exit_code != 0:
        tail = "\n    ".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise BuildError(f"fetching the Debian packages of {image.name} failed (exit {result.exit_code})",
                         hint=f"is the base's mirror reachable?\n    {tail}")


def save_image(engine: Engine, ref: str, path: Path) -> None:
    """``docker save`` ``ref`` (with its tag) into ``path`` (``Engine.save``)."""
    engine.save(ref, path)


def load_image(engine: Engine, path: Path, expected_id: str, ref: str) -> None:
    """``docker load`` ``path``; the loaded image must be ``expected_id``. Nothing to do when ``ref``
    already names that image (a load writes the whole archive to the engine's disk first, even then)."""
    if (here := engine.inspect(ref)) is not None and here.id == expected_id:
        return
    loaded = engine.load(path)
    if expected_id not in loaded:
        raise BuildError(f"{path} holds {', '.join(i[:19] for i in loaded) or 'no image'}, "
                         f"not the base {expected_id[:19]} the manifest names")


def _rendered(context: Path, dockerfile: str) -> dict[str, bytes]:
    """The rendered files of the chosen variant, as build_image hashes them (without wheels, debs)."""
    files = {"Dockerfile": (context / dockerfile).read_bytes()}
    for sub in ("requirements", "envkit"):
        for p in sorted((context / sub).rglob("*")):
            if p.is_file():
                files[str(p.relative_to(context))] = p.read_bytes()
    return files
