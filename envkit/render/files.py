"""Lock -> build contexts (dockerfiles/<image>/) and compose/<team>.yaml.

The templates' whole input is a typed ``RenderContext`` built from the lock; nothing is
re-derived. Every value that reaches a template is a lock value (validated when the spec
was loaded) and goes through the ``dq`` filter, which refuses anything that could break
out of a double-quoted Dockerfile or YAML string. Output directories are replaced
atomically: a failed render leaves the previous one intact.

Two render options select Dockerfile features (see docs/images.md): ``buildkit`` (the
installer's download cache in a cache mount, the site CA as a build secret) and ``wheelhouse``
(an offline build from a bundle: Debian packages and wheels from the context, no index).
Online builds install the environment with uv straight into the runtime stage, one layer per
layer group (``LAYER_GROUPS``); offline ones with pip in a builder stage whose venv is copied.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .. import __version__, devel
from ..frameworks import expected, framework, requested_labels
from ..index import login as index_login_
from ..index.urls import DEFAULT_INDEX, uv_index_args
from ..index.wheel_facts import is_cuda_wheel
from ..lock import Lock, LockedImage, Package
from ..payload.contents import PAYLOAD_NAME, payload_expect, payload_files, payload_sha256
from ..support.atomic import replace_all
from ..support.labels import IMAGE_LABEL, LOCK_LABEL, STAGE_LABEL, TEAM_LABEL
from . import installer
from .templates import dq, environment

UID = 1000
USER = "envkit"
VENV = "/opt/venv"
EXTRAS = "/opt/extras"  # the extras' install prefix in the build; merged into the venv at runtime
CA_ARG = "ENVKIT_SITE_CA"  # classic builds: the build argument carrying the site CA's PEM text
CA_PATH = "/etc/envkit/site-ca/ca.pem"  # where the build sees the site CA (a copied file, or a secret mount)
WHEELHOUSE = "/tmp/envkit/wheelhouse"  # the bundle's wheels, inside the build (wheelhouse mode)
# pip installs only offline (wheelhouse) builds, from the bundle's wheels alone (online builds install with uv).
PIP_FLAGS = ("--no-cache-dir --disable-pip-version-check --no-deps --require-hashes --only-binary=:all:"
             f" --no-index --find-links {WHEELHOUSE}")
DEBS = "/tmp/envkit/debs"  # the bundle's Debian packages, inside the build (wheelhouse mode)
UV_DIR = "/tmp/envkit-uv"  # the installer inside an install step (and, classic, its cache and the site CA)
# BuildKit: uv's cache in an install step, on the venv's filesystem (uv hardlinks what it unzipped: the environment
# is written once), removed before the step ends (the classic builder's: in UV_DIR)
UV_CACHE = f"{VENV}/.envkit-uv-cache"
UV_CA = "/tmp/envkit-ca.pem"  # BuildKit: the site CA's secret mount in an install step
# BuildKit, online: the build argument naming the image the stages above the OS stage start FROM (default: the
# Dockerfile's own ``os`` stage; envkit passes the engine's OS stage of its key, ``images.os_stage``)
OS_ARG = "ENVKIT_OS"
# Online builds: /etc/hosts and /etc/resolv.conf (a comment each) in the OS stage, so the engine's mounts over them
# in each RUN find files there and add none (a BuildKit RUN that makes and removes them leaves /etc's mtime, the
# build's time, in its layer); in either builder's render, so both build one OS stage (``images.os_stage``)
ETC_STUBS = ("os/etc/hosts", "os/etc/resolv.conf")
# (a comment, not empty: a layer of empty files has a history size of 0, which reads as no layer at all)
ETC_STUB = b"# envkit: the engine mounts its own file over this one in every container\n"
# Online builds: the environment's layers, lowest first (requirements/<group>.txt each), and what each holds.
LAYER_GROUPS: dict[str, str] = {
    "cuda": "the CUDA libraries' wheels (nvidia-*): images on the same CUDA wheels share this layer",
    "framework": "the rest of the framework closure: images that differ only in extra packages share this layer",
    "extra": "the extra packages",
}
PAYLOAD_DIGEST = "payload.sha256"  # a context's record of its payload: sha256 by the payload's rule, and where it is

def image_tag(team: str, image: LockedImage) -> str:
    """<team>/<image>:<framework-version>-<variant>-py<python>-<lockhash8>"""
    return f"{team}/{image.name}:{image.framework_version}-{image.variant}-py{image.python}-{image.hash8}"


@dataclass(frozen=True)
class RenderContext:
    generated: str
    tag: str
    lock_hash: str
    base_ref: str
    os_packages: tuple[str, ...]
    venv: str
    extras_prefix: str
    labels: tuple[tuple[str, str], ...]
    stage_labels: tuple[tuple[str, str], ...] = ()  # whose a leaf stage's last image is (labels.STAGE_LABEL)
    stage_label: str = STAGE_LABEL
    uid: int = UID
    user: str = USER
    # render options (see the module doc)
    buildkit: bool = False
    wheelhouse: bool = False
    ca_path: str = CA_PATH
    index_login: bool = False  # BuildKit, online, from an index other than PyPI: the uv RUNs mount its netrc secret
    netrc_secret: str = index_login_.SECRET_ID
    netrc_target: str = index_login_.NETRC_TARGET
    wheelhouse_dir: str = WHEELHOUSE
    pip_flags: str = PIP_FLAGS
    debs_dir: str = DEBS
    # the devel flavour
    flavour: str = "runtime"
    python: str = "3"
    devel_apt: tuple[str, ...] = devel.APT
    devel_prefix: str = devel.PREFIX
    cuda_home: str = devel.CUDA_HOME
    nvcc_tools: str = devel.TOOLS
    nvcc_deb_url: str = ""  # CUDA 12: Debian's toolkit .deb the compiler's programs come from ("": CUDA 13+)
    nvcc_deb_sha256: str = ""
    devel_wheels: bool = True  # the lock's devel group is not empty (jax[cuda13]'s closure holds the whole compiler)
    # online builds: uv installs into the runtime stage (``installer``)
    direct: bool = True
    layer_groups: tuple[str, ...] = ()  # the LAYER_GROUPS with packages, lowest first
    group_notes: dict[str, str] = field(default_factory=lambda: dict(LAYER_GROUPS))
    uv_fetch: str = installer.fetch_shell(f"{UV_DIR}/uv")
    uv_dir: str = UV_DIR
    uv_cache: str = UV_CACHE
    uv_ca: str = UV_CA
    ca_arg: str = CA_ARG
    uv_index_flags: str = ""  # ``_uv_index_flags``
    uv_flags: str = ""  # an install step's: installer.FLAGS, the index flags (classic: installer.COMPILE too)
    # BuildKit's install steps make reproducible layers (docs/images.md, "The same bytes from BuildKit"): the
    # bytecode by ``pycompile``, every path the step wrote at ``epoch``
    epoch: int = installer.EPOCH
    pycompile: str = installer.PYCOMPILE
    venv_parent: str = VENV.rsplit("/", 1)[0]
    os_arg: str = OS_ARG
    os_from: str = "os"  # what the stages above the OS stage start FROM: BuildKit online, ``${OS_ARG}``
    # the runtime stage's last instructions (ENV, USER, WORKDIR, CMD): the Dockerfile writes them, and a reproducible
    # build (images.reproducible) writes the same into the image config it assembles
    runtime_env: tuple[tuple[str, str], ...] = ()
    workdir: str = f"/home/{USER}"
    cmd: tuple[str, ...] = ("python3", "/opt/envkit/envkit_check")
    # a devel image built --reproducible: the image envkit assembled (OS, environment and payload layers) that the
    # runtime stage starts FROM, adding only the devel steps ("": the runtime stage builds the environment itself)
    env_image: str = ""


def context_for(lock: Lock, image: LockedImage, spec_name: str, *, buildkit: bool = False,
                wheelhouse: bool = False, env_image: str = "") -> RenderContext:
    base_ref = (
        image.base.ref if not image.base.digest or "@" in image.base.ref else f"{image.base.ref}@{image.base.digest}"
    )
    labels = {
        "org.opencontainers.image.title": f"{lock.team}/{image.name}",
        "org.opencontainers.image.version": image_tag(lock.team, image).split(":", 1)[1],
        "org.opencontainers.image.description": f"{image.framework} {image.framework_version} ({image.variant}) "
                                                f"on {image.base.distro} {image.base.suite}",
        "org.opencontainers.image.vendor": lock.team,
        "org.opencontainers.image.base.name": image.base.ref,
        TEAM_LABEL: lock.team,
        IMAGE_LABEL: image.name,
        LOCK_LABEL: image.hash,
        "io.envkit.framework": f"{image.framework}=={image.framework_version}",
        "io.envkit.variant": image.variant,
        "io.envkit.cuda": image.cuda or "none",
        "io.envkit.cudnn": image.cudnn or "none",
        "io.envkit.nccl": image.nccl or "none",
        "io.envkit.python": image.python,
        "io.envkit.driver-floor": image.driver_floor or "none",
        "io.envkit.envkit-version": __version__,
        **framework(image.framework).labels(image),  # the framework's own pins (torch: the arch list)
        **requested_labels(image),  # the spec's pip: packages with their pins (none: no label)
    }
    index_flags = _uv_index_flags(image)
    if image.flavour != "runtime":  # (runtime images carry no flavour label, as before devel existed)
        labels["io.envkit.flavour"] = image.flavour
    return RenderContext(
        generated=f"generated by envkit {__version__} - do not edit; regenerate with `envkit render {spec_name}`",
        tag=image_tag(lock.team, image),
        lock_hash=image.hash,
        base_ref=base_ref,
        # python3-venv: online builds make the venv in the runtime stage (Debian's pip and setuptools wheels, the
        # venv they made before: `pip check` for verify, setuptools for torch's cpp_extension); offline ones in their
        # builder stage, and a reproducible one in the OS stage's containers, whose packages are the online one's
        os_packages=("python3", "ca-certificates", "python3-venv", *image.apt),
        venv=VENV,
        extras_prefix=EXTRAS,
        labels=tuple(sorted(labels.items())),
        stage_labels=((TEAM_LABEL, lock.team), (IMAGE_LABEL, image.name), (LOCK_LABEL, image.hash)),
        buildkit=buildkit,
        wheelhouse=wheelhouse,
        index_login=buildkit and not wheelhouse and needs_index_login(image),
        flavour=image.flavour,
        python=image.python,
        direct=not wheelhouse,
        layer_groups=tuple(g for g, packages in layer_packages(image).items() if packages),
        uv_index_flags=index_flags,
        uv_flags=f"{installer.FLAGS}{'' if buildkit else ' ' + installer.COMPILE}{index_flags}",
        os_from="${" + OS_ARG + "}" if buildkit and not wheelhouse else "os",
        runtime_env=runtime_env(image),
        env_image=env_image,
        **(_devel_fields(image) if image.flavour == "devel" else {}),
    )


def runtime_env(image: LockedImage) -> tuple[tuple[str, str], ...]:
    """The runtime stage's ENV, in order (``$PATH``: the OS stage's, as the engine expands it)."""
    return (("PATH", f"{VENV}/bin:$PATH"), ("VIRTUAL_ENV", VENV), ("PYTHONUNBUFFERED", "1"),
            ("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
            ("NVIDIA_REQUIRE_CUDA", image.require_cuda or "cuda>=0.0"))


def _devel_fields(image: LockedImage) -> dict:
    wheels = devel.wheels_to_add(image)  # refused here when the lock has no compiler for it
    deb = image.toolkit_deb  # CUDA 12: the .deb the lock pins
    return dict(nvcc_deb_url=deb.url if deb else "", nvcc_deb_sha256=deb.sha256 if deb else "",
                devel_wheels=bool(wheels))


def _uv_index_flags(image: LockedImage) -> str:
    """The indexes the lock's packages come from, asked as the resolver asked them (``index.urls.uv_index_args``:
    the framework's own index first, each package from the first index that has it), so the build finds each
    locked file where the lock found it. None for the default, PyPI, so contexts of images from PyPI name none.
    uv takes an http index as named (its --trusted-host, an alias of --allow-insecure-host, would turn off TLS
    checks: never used); every file is pinned by hash whichever index serves it."""
    if image.index_url == DEFAULT_INDEX and image.extra_index_url in (None, DEFAULT_INDEX):
        return ""
    return "".join(f" {dq(arg)}" for arg in uv_index_args(image.index_url, image.extra_index_url))


def index_urls(image: LockedImage) -> list[str]:
    """The indexes other than PyPI the lock's packages come from (the ones that may ask for a login)."""
    return [u for u in dict.fromkeys((image.index_url, image.extra_index_url)) if u and u != DEFAULT_INDEX]


def needs_index_login(image: LockedImage) -> bool:
    """Whether BuildKit's pip RUNs mount the ``index-netrc`` secret: for any index but PyPI (which never
    asks), so the rendered Dockerfile does not depend on which logins this host happens to hold."""
    return bool(index_urls(image))


def requirements_text(image: LockedImage, group: str) -> str:
    # No image name here: images sharing a framework closure must share this file's bytes
    # (and so the builder's cached layer).
    return _requirements([p for p in image.packages if p.group == group], f"the {group} packages from the lock")


def layer_packages(image: LockedImage) -> dict[str, list[Package]]:
    """The lock's runtime packages by online layer group: the framework group's CUDA wheels apart from the rest
    of it (an nvidia-* wheel only an extra needs stays with the extras: it changes with them)."""
    framework = [p for p in image.packages if p.group == "framework"]
    return {"cuda": [p for p in framework if is_cuda_wheel(p.name)],
            "framework": [p for p in framework if not is_cuda_wheel(p.name)],
            "extra": [p for p in image.packages if p.group == "extra"]}


def _requirements(packages: Iterable[Package], what: str) -> str:
    lines = [f"# generated by envkit - do not edit; {what}, pinned by hash\n"]
    for p in packages:
        hashes = "".join(f" \\\n    --hash={h}" for h in p.hashes)
        lines.append(f"{p.name}=={p.version}{hashes}\n")
    return "".join(lines)


def install_packages(image: LockedImage) -> tuple[Package, ...]:
    """Every package a build of ``image`` installs with pip (the lock's: every group)."""
    return image.packages


def render_files(lock: Lock, image: LockedImage, spec_name: str, *, buildkit: bool = False,
                 wheelhouse: bool = False, env_image: str = "") -> dict[str, bytes]:
    """Every file of one build context, by relative path.

    The site CA is given at build time (the build argument ``ENVKIT_SITE_CA`` for the classic builder,
    a build secret for BuildKit), never in the context; in ``wheelhouse`` mode the bundle adds
    ``wheelhouse/`` and ``debs/``. ``env_image``: a devel image's steps on the image a reproducible build
    assembled (``RenderContext.env_image``).
    """
    if env_image and image.flavour != "devel":
        raise ValueError("env_image: a devel image's steps only")
    ctx = context_for(lock, image, spec_name, buildkit=buildkit, wheelhouse=wheelhouse, env_image=env_image)
    dockerfile = environment().get_template(f"{image.flavour}.Dockerfile.j2").render(**ctx.__dict__)
    files = {
        "Dockerfile": dockerfile.encode(),
        # (offline builds: the whole framework group in framework.txt, as the bundle's wheelhouse holds it)
        **({f"requirements/{g}.txt": _requirements(packages, f"the {g} packages from the lock").encode()
            for g, packages in layer_packages(image).items()} if ctx.direct else
           {"requirements/framework.txt": requirements_text(image, "framework").encode(),
            "requirements/extra.txt": requirements_text(image, "extra").encode()}),
        # what the image's own self-check compares against, in the shape the payload accepts (as the harness mounts it)
        "envkit/expect.json": (json.dumps(payload_expect(expected(image)), indent=2, sort_keys=True) + "\n").encode(),
    }
    # the payload directory (__main__.py + envkit_check_*.py), run in the image as python3 /opt/envkit/envkit_check;
    # its identity beside the Dockerfile (not copied into the image): what a committed example context keeps of it
    files.update({f"envkit/{PAYLOAD_NAME}/{name}": data for name, data in payload_files().items()})
    files[PAYLOAD_DIGEST] = f"{payload_sha256()}  envkit/{PAYLOAD_NAME}\n".encode()
    if ctx.direct:  # the OS stage's /etc files (``ETC_STUBS``; either builder's: one OS stage), BuildKit's bytecode
        files.update({name: ETC_STUB for name in ETC_STUBS})
        if buildkit:
            files[installer.PYCOMPILE] = installer.compile_program().encode()
    if image.flavour == "devel":
        files["requirements/devel.txt"] = requirements_text(image, devel.GROUP).encode()
    return files


GENERATED = b"# generated by envkit "  # how a Dockerfile's first line starts: it names the spec as it was typed


def context_hash(files: dict[str, bytes]) -> str:
    """A build context's identity: every file by name and bytes, except a Dockerfile's first line, which says
    `regenerate with envkit render SPEC` with the spec as it was typed (team.yaml, ./team.yaml, a CI checkout's
    absolute path): how the spec was named decides nothing built, so it must not make a built image look stale."""
    h = hashlib.sha256()
    for name in sorted(files):
        data = files[name]
        if (name == "Dockerfile" or name.endswith(".Dockerfile")) and data.startswith(GENERATED):
            data = data.partition(b"\n")[2]
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return "sha256:" + h.hexdigest()


def render_compose(lock: Lock, spec_name: str) -> bytes:
    services = [{"name": i.name, "tag": image_tag(lock.team, i), "lock_hash": i.hash} for i in lock.images]
    text = environment().get_template("compose.yaml.j2").render(
        generated=f"generated by envkit {__version__} - do not edit; regenerate with `envkit render {spec_name}`",
        team=lock.team, services=services, uid=UID)
    return text.encode()


@dataclass
class Rendered:
    contexts: dict[str, Path] = field(default_factory=dict)
    compose: Path | None = None
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # per image, what was written (and is built)


def render(lock: Lock, out_root: Path, spec_name: str, only: list[str] | None = None, *,
           buildkit: bool = False) -> Rendered:
    """Write the lock's build contexts, rendered for the classic builder or (``buildkit``) for BuildKit, and the
    compose file; the files written come back in ``Rendered.files``, for the build to take as they are."""
    # Render everything in memory first: a template error leaves no file touched.
    trees = {i.name: render_files(lock, i, spec_name, buildkit=buildkit)
             for i in lock.images if not only or i.name in only}
    compose = render_compose(lock, spec_name)
    # Then write it all beside where it goes, and only then rename it into place: a file in the way, an unwritable
    # or immutable target, a disk that fills up on the second image leave every tree and the compose file as they were.
    compose_path = out_root / "compose" / f"{lock.team}.yaml"
    result = Rendered(contexts={name: out_root / "dockerfiles" / name for name in trees}, compose=compose_path,
                      files=trees)
    replace_all({result.contexts[name]: files for name, files in trees.items()}, {compose_path: compose})
    return result
