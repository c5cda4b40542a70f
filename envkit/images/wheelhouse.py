"""A bundle's wheelhouse: every wheel pip will install for an image, downloaded on this host for the image's
Python and platform from the lock's indexes only (several pip processes side by side), each checked against the
lock's hashes."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..engine.space import host_full, says_no_space
from ..errors import BuildError, EnvkitError
from ..index.login import keyring_logins, login_hint, refused_index
from ..index.urls import trusted_hosts
from ..lock import LockedImage, Package
from ..render.files import install_packages
from ..support import procs, scratch
from .bundle_manifest import sha256_of

DOWNLOADS = 4  # pip downloads at once when a bundle is made
CA_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")  # what overrides pip's `--cert` (observed with pip 26.3)


def lock_indexes(image: LockedImage, extra_index_url: str | None) -> list[str]:
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
    indexes = lock_indexes(image, extra_index_url)
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
            hint = (
                login_hint(refused) if refused else f"is {' and '.join(indexes)} reachable (and the CA bundle right)?"
            )
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
        digest = "sha256:" + sha256_of(path)
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
