"""Offline bundles: everything a rebuild of one locked image needs, built with no network.

A bundle directory holds (docs/images.md):

    manifest.json          what it is, and the sha256 of every other file in it
    envkit.lock            the lock, cut down to this image (its hash still checks)
    base.tar               ``docker save`` of the base image the Dockerfile starts FROM
    context/               the build context, rendered in wheelhouse mode
      Dockerfile             for the classic builder
      buildkit.Dockerfile    for BuildKit (bind mounts instead of copies)
      requirements/ envkit/  as in an online build
      wheelhouse/            every wheel pip installs, sha256-checked against the lock
      debs/<stage>/          the Debian packages each stage installs, resolved against the base

``make_bundle`` needs the network (the package index and the Debian mirror);
``build_from_bundle`` does not: it checks every file against the manifest, loads the base
and builds with the network cut off inside the build.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import ConfigDict, Field, StrictInt, StrictStr, ValidationError

from .. import __version__
from ..support import procs, scratch
from .base import ensure_base
from .builder import BASE_LABEL, CONTEXT_LABEL, LOCK_LABEL, Outcome, require_builder, run_build
from ..payload.harness import run_payload
from ..engine.protocol import Mount, RunOptions
from ..engine.space import host_full, host_out_of_space, low_space, says_no_space
from ..errors import BuildError, EnvkitError
from ..index.urls import trusted_hosts
from ..index.login import keyring_logins, login_hint, refused_index
from ..support.atomic import write_atomic
from ..lock import Lock, LockedImage, Package, load_lock
from ..resolve.devel import APT as DEVEL_APT
from ..resolve.devel import fetch_toolkit_deb, toolkit_deb
from ..render.files import context_for, context_hash, image_tag, install_packages, render_files
from ..frameworks import expected
from ..support.progress import Progress
from ..support.models import Strict


BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
LOCK_FILE = "envkit.lock"
BASE_ARCHIVE = "base.tar"
CONTEXT = "context"
DOCKERFILES = {"classic": "Dockerfile", "buildkit": "buildkit.Dockerfile"}
BUNDLE_LABEL = "io.envkit.bundle"  # the manifest's sha256, on images built from a bundle
DOWNLOADS = 4  # pip downloads at once when a bundle is made

_Digest = Field(pattern=r"^sha256:[0-9a-f]{64}$")


class _ManifestBase(Strict):
    ref: StrictStr = Field(min_length=1)
    id: StrictStr = _Digest


class Manifest(Strict):
    """manifest.json's shape (what ``make_bundle`` writes), checked before any of it is used; a key it does not
    know is ignored (a newer envkit's manifest)."""

    model_config = ConfigDict(extra="ignore")
    version: StrictInt
    image: StrictStr = Field(min_length=1)
    tag: StrictStr = Field(min_length=1)
    lock_hash: StrictStr = Field(min_length=1)
    base: _ManifestBase
    # builder -> the Dockerfile's name in context/
    dockerfiles: dict[StrictStr, StrictStr] = Field(min_length=1)
    # every other file of the bundle (relative path) -> its sha256
    files: dict[StrictStr, Annotated[StrictStr, _Digest]] = Field(min_length=1)
    team: StrictStr | None = None
    flavour: StrictStr | None = None
    generated: StrictStr | None = None


_REMAKE_HOW = "make the bundle again with `envkit bundle make SPEC --out DIR`"
_REMAKE = f"the manifest is damaged or was edited: {_REMAKE_HOW}"


def _shape_error(path: Path, exc: ValidationError) -> BuildError:
    """The first problem of a manifest that does not have make_bundle's shape: its field and value."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return BuildError(f"{path}: the manifest has no {field!r}", hint=_REMAKE)
    return BuildError(f"{path}: manifest field {field!r} is {_shown(err.get('input'))}: {err['msg']}", hint=_REMAKE)


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Fetches each stage's Debian packages (and what they pull in) against the base's own state:
# os first (then installed), then builder and devel, each relative to the os stage.
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
fetch builder $BUILDER_PACKAGES
if [ -n "$DEVEL_PACKAGES" ]; then fetch devel $DEVEL_PACKAGES; fi
"""


def make_bundle(engine, lock: Lock, image_name: str, out_dir: Path, *, ca_bundle: Path | None,
                spec_name: str = "team.yaml", extra_index_url: str | None = None,
                progress: Progress = lambda _: None) -> Path:
    """Export what an offline rebuild of ``image_name`` needs into ``out_dir`` (replaced atomically).

    Wheels come from the lock's index, then ``extra_index_url`` (the spec's index, where the resolver
    found the extras of a framework on an index of its own, e.g. a PyTorch variant's); every file is
    checked against the lock's hashes, whichever index served it.

    The bundle is made in a directory beside ``out_dir`` and renamed into place only when whole;
    an existing ``out_dir`` is replaced only when it is empty or an envkit bundle.
    """
    image = lock.image(image_name)
    out_dir = Path(out_dir).absolute()
    check_replaceable(out_dir)
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
        base = ensure_base(engine, image.base, progress)
        write_atomic(staging / LOCK_FILE, lock.to_bytes())
        context = staging / CONTEXT
        for rel, data in render_files(lock, image, spec_name, wheelhouse=True).items():
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            (context / rel).write_bytes(data)
        (context / DOCKERFILES["buildkit"]).write_bytes(
            render_files(lock, image, spec_name, buildkit=True, wheelhouse=True)["Dockerfile"])
        progress(f"downloading {len(install_packages(image))} wheel(s) from "
                 + " then ".join(_indexes(image, extra_index_url)))
        download_wheels(image, context / "wheelhouse", ca_bundle=ca_bundle, extra_index_url=extra_index_url)
        progress(f"fetching Debian packages against {image.base.ref}")
        fetch_debs(engine, lock, image, context / "debs")
        if image.flavour == "devel" and toolkit_deb(image):  # CUDA 12: the compiler's programs
            progress("downloading the CUDA compiler's Debian package")
            fetch_toolkit_deb(image, context / "debs" / "nvcc")
        progress(f"saving {image.base.ref}")
        save_image(engine, image.base.ref, staging / BASE_ARCHIVE)
        manifest = {
            "generated": f"generated by envkit {__version__} - do not edit; regenerate with `envkit bundle make`",
            "version": BUNDLE_VERSION, "team": lock.team, "image": image.name, "tag": image_tag(lock.team, image),
            "lock_hash": image.hash, "flavour": image.flavour,
            "base": {"ref": image.base.ref, "id": base.id}, "dockerfiles": DOCKERFILES,
            "files": file_hashes(staging),
        }
        write_atomic(staging / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
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
    if any(out_dir.iterdir()) and not _is_bundle(out_dir):
        raise EnvkitError(f"{out_dir} exists and is not an envkit bundle; refusing to replace it",
                          hint="choose a new directory for --out, or remove this one first")


def _is_bundle(path: Path) -> bool:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "version" in manifest and "files" in manifest


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


def build_from_bundle(engine, bundle_dir: Path, *, builder: str = "classic", verify: bool = True,
                      no_cache: bool = False, progress: Progress = lambda _: None) -> Outcome:
    """Check the bundle, load its base and build its image with no network inside the build.

    ``no_cache`` runs every step again (the builders' caches do not key on the network mode).
    """
    require_builder(engine, builder)
    bundle_dir = Path(bundle_dir)
    manifest = verify_bundle(bundle_dir)
    dockerfile = manifest["dockerfiles"].get(builder)
    if dockerfile is None or f"{CONTEXT}/{dockerfile}" not in manifest["files"]:
        where = (f"names {CONTEXT}/{dockerfile}, which is not among its files" if dockerfile is not None
                 else f"names no Dockerfile for it (dockerfiles: {', '.join(sorted(manifest['dockerfiles']))})")
        raise BuildError(f"{bundle_dir / MANIFEST}: the {builder} builder was asked for, but the manifest {where}",
                         hint=f"choose a builder the bundle has, or {_REMAKE_HOW}")
    lock = load_lock(bundle_dir / LOCK_FILE)
    image = lock.image(manifest["image"])
    if image.hash != manifest["lock_hash"]:
        raise BuildError(f"{bundle_dir}: the lock's image hash differs from the manifest's")
    started = time.monotonic()
    if (warning := low_space(engine)) is not None:
        progress(warning)
    progress(f"loading {manifest['base']['ref']} from {BASE_ARCHIVE}")
    load_image(engine, bundle_dir / BASE_ARCHIVE, manifest["base"]["id"], manifest["base"]["ref"])
    context = bundle_dir / CONTEXT
    labels = {LOCK_LABEL: image.hash, CONTEXT_LABEL: context_hash(_rendered(context, dockerfile)),
              BASE_LABEL: manifest["base"]["id"],
              BUNDLE_LABEL: "sha256:" + _sha256(bundle_dir / MANIFEST)}
    tag = manifest["tag"]
    image_id = ""
    for event in run_build(engine, context, tag, labels, builder=builder, dockerfile=dockerfile, network=False,
                           no_cache=no_cache):
        if event.kind == "done":
            image_id = event.text
        progress(event.text if event.kind != "step" else f"step {event.step}/{event.total}: {event.text}")
    info = engine.inspect(tag)
    outcome = Outcome(image.name, tag, "built", info.id if info else image_id, info.size if info else 0,
                      time.monotonic() - started, labels=labels)
    if verify:
        outcome.verification = run_payload(engine, tag, expected(image))
    return outcome


def verify_bundle(bundle_dir: Path) -> dict:
    """The manifest, once every file is present, unchanged, and no file was added."""
    path = Path(bundle_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8
        raise BuildError(f"{bundle_dir} is not an envkit bundle: {exc}",
                         hint="make one with `envkit bundle make SPEC --out DIR`") from None
    if not isinstance(manifest, dict):
        kind = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
            type(manifest), "null")
        raise BuildError(f"{path}: the manifest is {kind} ({_shown(manifest)}), not a JSON object",
                         hint=_REMAKE)
    if manifest.get("version") != BUNDLE_VERSION:
        raise BuildError(f"{path}: unsupported bundle version {manifest.get('version')!r}",
                         hint=f"this envkit reads bundle version {BUNDLE_VERSION}; {_REMAKE_HOW}")
    try:
        Manifest.model_validate(manifest)
    except ValidationError as exc:
        raise _shape_error(path, exc) from None
    expected, found = manifest["files"], file_hashes(Path(bundle_dir))
    problems = [f"{name}: changed" for name in sorted(expected) if name in found and found[name] != expected[name]]
    problems += [f"{name}: missing" for name in sorted(set(expected) - set(found))]
    problems += [f"{name}: not in the manifest" for name in sorted(set(found) - set(expected))]
    if problems:
        raise BuildError(f"{bundle_dir} does not match its manifest ({len(problems)} file(s))",
                         hint="\n    ".join(problems[:20]) + "\n    make the bundle again")
    return manifest


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (but the manifest), by relative path."""
    return {str(p.relative_to(root)): "sha256:" + _sha256(p) for p in sorted(root.rglob("*"))
            if p.is_file() and str(p.relative_to(root)) != MANIFEST}


# --- wheels --------------------------------------------------------------------------

CA_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")  # what overrides pip's `--cert` (observed with pip 26.3)


def _indexes(image: LockedImage, extra_index_url: str | None) -> list[str]:
    """The lock's index, then the index the resolver took the rest from (the lock says, since it records
    it; ``extra_index_url``, the spec's, for locks made before)."""
    extra = image.extra_index_url or extra_index_url
    return [image.index_url, *([extra] if extra and extra != image.index_url else [])]


def download_wheels(image: LockedImage, dest: Path, *, ca_bundle: Path | None,
                    extra_index_url: str | None = None) -> list[Path]:
    """Every wheel pip will install, for the image's Python and platform, checked against the lock.

    Downloaded on this host by pip for the image's interpreter and glibc (``--platform`` for
    every manylinux tag the image accepts), ``--require-hashes`` then a second sha256 check here;
    ``DOWNLOADS`` pip processes at once, the packages dealt among them (a framework's closure is a
    few files of hundreds of MB: one stream at a time leaves most of the bandwidth unused).
    """
    dest.mkdir(parents=True, exist_ok=True)
    packages = install_packages(image)
    indexes = _indexes(image, extra_index_url)
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
           "--require-hashes", "--only-binary=:all:", "--implementation", "cp", "--python-version", image.python,
           *[arg for tag in manylinux_tags(image.platform) for arg in ("--platform", tag)], "-d", str(dest),
           "--index-url", indexes[0], *[a for url in indexes[1:] for a in ("--extra-index-url", url)],
           *[a for host in trusted_hosts(indexes) for a in ("--trusted-host", host)],
           *(["--cert", str(ca_bundle)] if ca_bundle is not None else [])]
    # Only the lock's indexes: no pip.conf, no PIP_* (find-links, extra indexes, constraints) from here. And
    # with a CA bundle, no REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE: pip's requests lets them win over `--cert`.
    dropped = CA_ENV if ca_bundle is not None else ()
    with keyring_logins(indexes), scratch.directory("wheels") as tmp:  # $NETRC: a login only the keyring holds
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in dropped} \
            | {"PIP_CONFIG_FILE": os.devnull}
        files = []
        for n in range(min(DOWNLOADS, len(packages))):
            files.append(Path(tmp) / f"requirements-{n}.txt")
            files[-1].write_text("".join(f"{p.name}=={p.version} " + " ".join(f"--hash={h}" for h in p.hashes) + "\n"
                                         for p in packages[n::DOWNLOADS]))
        # stdin from /dev/null (run_all): a 401 makes pip prompt for a login, which must fail, not wait unseen
        done = procs.run_all([[*cmd, "-r", str(f)] for f in files], env=env)
    for proc in done:
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            tail = "\n    ".join(output.strip().splitlines()[-10:])
            if says_no_space(output):
                raise host_full(f"downloading the wheels of {image.name} failed", dest, kind=BuildError,
                                hint="a CUDA framework's wheels take GBs (TensorFlow 2.20's: 3.66 GB): free space "
                                     f"there, or give --out a larger disk\n    {tail}")
            refused = refused_index(output, indexes)
            hint = login_hint(refused) if refused else f"is {' and '.join(indexes)} reachable (and the CA bundle right)?"
            raise BuildError(f"downloading the wheels of {image.name} failed (pip exit {proc.returncode})",
                             hint=f"{hint}\n    {tail}")
    return check_wheels(packages, dest)


def check_wheels(packages: tuple[Package, ...] | list[Package], wheelhouse: Path) -> list[Path]:
    """One wheel per package, each with a sha256 the lock lists; nothing else in ``wheelhouse``."""
    by_name = {p.name: p for p in packages}
    found: dict[str, Path] = {}
    for path in sorted(wheelhouse.glob("*")):
        name, version = _wheel_name_version(path.name)
        package = by_name.get(name)
        if package is None or Version(package.version) != Version(version):
            raise BuildError(f"{path.name} is not in the lock", hint="remove it, or make the bundle again")
        digest = "sha256:" + _sha256(path)
        if digest not in package.hashes:
            raise BuildError(f"{path.name} has sha256 {digest[7:19]}..., which the lock does not list for "
                             f"{name}=={version}", hint="the index served another file: make the bundle again")
        found[name] = path
    missing = sorted(set(by_name) - set(found))
    if missing:
        raise BuildError(f"the wheelhouse lacks {', '.join(missing)}")
    return [found[n] for n in sorted(found)]


def manylinux_tags(platform: str) -> list[str]:
    """``x86_64-manylinux_2_36`` -> every manylinux tag a glibc 2.36 x86_64 system accepts, newest first."""
    m = re.fullmatch(r"([a-z0-9_]+)-manylinux_(\d+)_(\d+)", platform)
    if not m:
        raise EnvkitError(f"cannot download wheels for platform {platform!r}", hint="expected ARCH-manylinux_X_Y")
    arch, major, minor = m.group(1), int(m.group(2)), int(m.group(3))
    tags = [f"manylinux_{major}_{n}_{arch}" for n in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + [f"{legacy[n]}_{arch}" for n in legacy if n <= minor]


def _wheel_name_version(filename: str) -> tuple[str, str]:
    if not filename.endswith(".whl") or filename.count("-") < 4:
        raise BuildError(f"{filename} in the wheelhouse is not a wheel")
    name, version = filename.split("-")[:2]
    try:
        Version(version)
    except InvalidVersion:
        raise BuildError(f"{filename} in the wheelhouse has no valid version") from None
    return canonicalize_name(name), version


# --- Debian packages and images ------------------------------------------------------

def fetch_debs(engine, lock: Lock, image: LockedImage, dest: Path) -> None:
    """Download, in a throwaway container of the base, the .debs each stage installs."""
    ctx = context_for(lock, image, "bundle")
    dest.mkdir(parents=True, exist_ok=True)
    env = {"OS_PACKAGES": " ".join(ctx.os_packages), "BUILDER_PACKAGES": " ".join(ctx.builder_packages),
           "DEVEL_PACKAGES": " ".join(DEVEL_APT) if image.flavour == "devel" else ""}
    options = RunOptions(timeout=900, network=True, env=env, user="0", role="fetch-debs",
                         mounts=(Mount(str(dest.resolve()), "/out", read_only=False),))
    result = engine.run(image.base.ref, ["bash", "-c", _FETCH_DEBS], options)
    if result.exit_code != 0:
        tail = "\n    ".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise BuildError(f"fetching the Debian packages of {image.name} failed (exit {result.exit_code})",
                         hint=f"is the base's mirror reachable?\n    {tail}")


def save_image(engine, ref: str, path: Path) -> None:
    """``docker save`` ``ref`` (with its tag) into ``path`` (``Engine.save``)."""
    engine.save(ref, path)


def load_image(engine, path: Path, expected_id: str, ref: str) -> None:
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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bundle_size(bundle_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(bundle_dir).rglob("*") if p.is_file())

