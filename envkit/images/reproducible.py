"""`envkit build --reproducible`: the environment layers as a pure function of the lock (docs/images.md,
"Reproducible environment layers").

The OS stage is built by the engine, as any build's (``--target os``). Then, in containers of that OS image, uv
installs each layer group into one host directory bind-mounted at the venv's path, with the bytecode compiled
deterministically (``pycompile``); after each group envkit writes what the group added as a layer tar
(``layers.write_layer``), and the payload as one more. The OS image's archive (`docker save`) and these tars become a
docker-archive with the config the rendered Dockerfile's final stage would give (``archive.image_config``), loaded
with `docker load` (where the engine allows, each group's layer as soon as it is written, while the next group
installs: ``load_ahead``). The OS stage is the engine's ``<tag>-os`` when that is of the stage's key, else the
builder's (``os_stage``). Everything is written under one scratch directory, removed however the build ends.

A devel image is that image (tagged ``<tag>-env``, without the build's identity labels) plus its devel steps, which
the builder runs on it (the devel Dockerfile rendered FROM it: ``RenderContext.env_image``); the ``-env`` tag goes
once they are built. So its environment layers are the runtime flavour's, the same bytes.

Where uv and the wheels come from is the install ``Source``: the network (the lock's indexes), or an offline bundle's
files (``Offline``: `envkit bundle build --reproducible`), which give the same layers.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..engine.protocol import BuildEvent, Mount, RunOptions
from ..errors import BuildError, EngineError
from ..lock import Lock, LockedImage
from ..render import installer
from ..render.files import VENV, context_for, layer_packages
from ..support import scratch
from ..support.labels import (
    LAYER_KEYS_LABEL,
    LAYERS_LABEL,
    PAYLOAD_LAYER_LABEL,
    REPRODUCIBLE_LAYERS,
)
from . import archive, layers, os_stage
from .install_source import UV, Offline, Source, offline_source, online_source
from .layer_record import PAYLOAD
from .layer_reuse import find_reusable, group_key, keys_label, lost
from .load_ahead import LoadAhead

if TYPE_CHECKING:
    from ..engine.protocol import Engine

EPOCH = installer.EPOCH  # every file's mtime, the bytecode's SOURCE_DATE_EPOCH, the config's `created`
REQ = "/tmp/envkit-requirements.txt"  # a group's requirements file, mounted in its install container


REPRODUCIBLE = ".envkit-reproducible"  # the name a reproducible build's context hash gives how its layers are made


def reproducible_mark() -> bytes:
    """How the environment layers are made (the installer, the epoch, the bytecode): a build made otherwise is
    another build, so its context hash differs."""
    return f"uv {installer.VERSION}; epoch {EPOCH}\n{installer.compile_program()}".encode()


def made_how(reproducible: bool) -> dict[str, bytes]:
    """What a build's context hash takes beside its rendered files: a reproducible build says so, and how its layers
    are made (``reproducible_mark``), so it is never taken for a builder's build of the same files."""
    return {REPRODUCIBLE: reproducible_mark()} if reproducible else {}


BuilderRun = Callable[[Path, str, dict[str, str]], Iterator[BuildEvent]]  # (context, tag, labels): the builder's build
Say = Callable[[BuildEvent | str], None]


@dataclass(frozen=True)
class Assembled:
    image_id: str
    layers: dict[str, str]  # layer group (and "payload") -> diff_id, lowest first
    seconds: dict[str, float]  # where the time went (``Phases``), in order
    reused: tuple[str, ...] = ()  # the groups whose layers an image on the engine gave (``layer_reuse``)


class Phases:
    """How long each step of the build took, in the order they ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 1)


@dataclass(frozen=True)
class DevelSteps:
    """A devel image's steps above the image envkit assembles: their context (the devel Dockerfile rendered FROM
    ``env_tag(tag)``) and the builder that runs it."""

    files: dict[str, bytes]
    build: BuilderRun


def env_tag(tag: str) -> str:
    """What a devel image's assembled image is tagged while its devel steps are built on it."""
    return f"{tag}-env"


def require_local(engine: Engine) -> None:
    """Refuse a remote engine: the install directory is a directory of this host, bind-mounted."""
    if not engine.local():
        raise BuildError("--reproducible installs into a directory of this host bind-mounted into a container, "
                         "which a remote engine (DOCKER_HOST over tcp or ssh) cannot mount",
                         hint="build on the engine's host, or without --reproducible")


def install_script(first: bool, source: Source, requirements: str = REQ) -> str:
    """What one group's install container runs (as the build's step does, the bytecode compiled by ``pycompile``).
    The first makes the venv (its files are in that layer). With no requirements (/dev/null) it leaves the venv
    as the first group's install leaves it, less any package: uv's own files in it too (its `.lock`)."""
    return "\n".join([
        "set -euo pipefail",
        f"mkdir -p {os.path.dirname(UV)}",
        *source.prelude,
        *([f"python3 -m venv {VENV}"] if first else []),
        f"{UV} pip install --python {VENV}/bin/python {installer.FLAGS}{source.index_flags} -r {requirements}",
        f"{VENV}/bin/python -I -c \"$ENVKIT_COMPILE\" {VENV}/lib",
    ])


def assemble(engine: Engine, lock: Lock, image: LockedImage, files: dict[str, bytes], *, tag: str,
             labels: dict[str, str], build_os: BuilderRun, stage: Callable[[Path, dict[str, bytes]], Path],
             ca_bundle: Path | None, say: Say, netrc: Path | None = None, reuse: bool = True,
             devel: DevelSteps | None = None, offline: Offline | None = None) -> Assembled:
    """Build ``image`` as ``tag`` with reproducible environment layers (see the module doc); ``files`` is its
    rendered context, ``labels`` the identity labels the image gets beside the Dockerfile's; ``devel``: a devel
    image's steps (required for one). The lowest groups an image on the engine already has on the same OS layers are
    reused (``layer_reuse``); should that image's layers go before the load, the build runs again installing every
    group. ``reuse=False``: every group installed. ``offline``: from a bundle's files, no network (``Offline``)."""
    if (devel is None) != (image.flavour == "runtime"):
        raise ValueError(f"{image.name} is a {image.flavour} image: devel steps are for devel images, and required")

    def source(directory: Path, index_flags: str) -> Source:  # (directory: an offline index's pages)
        return online_source(index_flags, ca_bundle, netrc) if offline is None else offline_source(offline, directory)

    args = (engine, lock, image, files, tag, labels, build_os, stage, source, say, devel)
    try:
        return _assemble(*args, reuse=reuse)
    except _ReusedGone as gone:
        say(f"loading with the reused layers failed ({gone}): building again, installing every group")
        return _assemble(*args, reuse=False)


class _ReusedGone(Exception):
    pass


def _assemble(engine: Engine, lock: Lock, image: LockedImage, files: dict[str, bytes], tag: str,
              labels: dict[str, str], build_os: BuilderRun, stage: Callable[[Path, dict[str, bytes]], Path],
              source_in: Callable[[Path, str], Source], say: Say, devel: DevelSteps | None, *,
              reuse: bool) -> Assembled:
    ctx = context_for(lock, image, "", buildkit=False)
    os_tag = os_stage.os_tag(tag)
    phases = Phases()
    os_labels = os_stage.labels(files["Dockerfile"], ctx.stage_labels)
    mark = reproducible_mark()
    keys = {g: group_key(mark, g, files[f"requirements/{g}.txt"]) for g in ctx.layer_groups}
    with scratch.directory(f"repro-{image.name}") as tmp:
        source = source_in(tmp / "index", ctx.uv_index_flags)
        started = time.monotonic()
        if os_stage.take_or_build(engine, os_tag, os_labels,
                                  lambda: build_os(stage(tmp / "context", files), os_tag, os_labels),
                                  base_ref=image.base.ref, reuse=reuse, say=say):
            phases.seconds["os stage"] = round(time.monotonic() - started, 1)
        say(f"saving {os_tag} (its layers go into the image as the engine has them)")
        with phases.timed("save"):
            engine.save(os_tag, tmp / "os.tar")
        saved = archive.read_saved(tmp / "os.tar")
        found = find_reusable(engine, tuple(saved.config["rootfs"]["diff_ids"]), keys) if reuse else None
        if found is not None:
            say(f"reusing the {', '.join(found.layers)} layer{'s' if len(found.layers) > 1 else ''} of image "
                f"{found.image.split(':')[-1][:12]} (the same OS layers, the same packages)")
        # each group's layer goes into the engine while the next installs, where the engine allows (``load_ahead``)
        ahead = LoadAhead(engine, saved, tag, os_labels, EPOCH, say) if engine.loads_known_layers() else None
        try:
            built = _install_groups(engine, image, files, os_tag, tmp, source=source, say=say, phases=phases,
                                    reused=found.layers if found else {}, ahead=ahead)
            scratch.remove(tmp / "venv", strict=False)  # in the layers now: the disk holds the environment once
            payload = {name.split("/", 1)[1]: data for name, data in files.items() if name.startswith("envkit/")}
            layer = layers.write_files_layer(payload, tmp / "payload.tar", epoch=EPOCH, prefix="opt/envkit/")
            # a devel image's identity labels go on it when its devel steps are built: the assembled image is not it
            made = {LAYERS_LABEL: REPRODUCIBLE_LAYERS,  # (verify compares such images)
                    LAYER_KEYS_LABEL: keys_label(keys), PAYLOAD_LAYER_LABEL: layer.diff_id}
            groups = [*ctx.layer_groups, PAYLOAD]
            loaded = env_tag(tag) if devel else tag
            try:
                if ahead is not None:
                    built = ahead.finish(built)
                    phases.seconds.update(ahead.seconds)
                built.append(archive.NewLayer(tmp / "payload.tar", layer.diff_id, "COPY envkit/ /opt/envkit/"))
                digests = {g: x.diff_id for g, x in zip(groups, built)}
                config = archive.image_config(saved.config, built, env=ctx.runtime_env,
                                              labels={**dict(ctx.labels), **({} if devel else labels), **made},
                                              drop_labels=set(os_labels), user=f"{ctx.uid}:{ctx.uid}",
                                              workdir=ctx.workdir, cmd=ctx.cmd, epoch=EPOCH)
                say(f"loading {loaded} into the engine (its archive streamed, not written)")
                with phases.timed("load"):
                    engine.load_stream(lambda out: archive.write_archive(out, saved, built, config, loaded,
                                                                         os_layers=ahead is None),
                                       f"the image archive of {loaded}")
            except EngineError as exc:
                if found is None or not lost(exc.message, found):
                    raise
                raise _ReusedGone(exc.message) from None
        finally:
            if ahead is not None:
                ahead.close()
        image_id = archive.image_id(config)
        if devel is not None:
            image_id = _build_devel(engine, devel, stage(tmp / "devel", devel.files), tag, labels, phases, say)
    say("where the time went: " + ", ".join(f"{k} {v:.0f} s" for k, v in phases.seconds.items()))
    return Assembled(image_id, digests, dict(phases.seconds), tuple(found.layers) if found else ())


def _build_devel(engine: Engine, devel: DevelSteps, context: Path, tag: str, labels: dict[str, str],
                 phases: Phases, say: Say) -> str:
    """The devel steps, built by the builder on the assembled image (``env_tag``), as ``tag`` with the identity
    ``labels`` (the image id the builder said); the assembled image's tag goes however that ends (its layers stay,
    the devel image's lowest)."""
    say(f"building the devel steps on {env_tag(tag)}")
    image_id = ""
    try:
        with phases.timed("devel steps"):
            for event in devel.build(context, tag, labels):
                if event.kind == "done":
                    image_id = event.text
                say(event)
    finally:
        engine.untag(env_tag(tag))
    return image_id


def _install_groups(engine: Engine, image: LockedImage, files: dict[str, bytes], os_tag: str, tmp: Path, *,
                    source: Source, say: Say, phases: Phases, reused: dict[str, str],
                    ahead: LoadAhead | None) -> list[archive.NewLayer]:
    venv = tmp / "venv"
    venv.mkdir(mode=0o755)
    venv.chmod(0o755)
    before: layers.Snapshot = {}
    out = []
    packages = layer_packages(image)
    groups = [g for g, p in packages.items() if p]
    for i, group in enumerate(groups):
        made_by = f"envkit: uv {installer.VERSION} pip install -r {group}.txt"
        if group in reused:  # the engine has it on these layers: named in the archive, not written
            out.append(archive.NewLayer(None, reused[group], made_by))
            continue
        if i and not before:  # the groups below were reused: the venv as the first group's install leaves it,
            # without its packages, under this one, left out of its layer
            with phases.timed("venv"):
                _run_install(engine, os_tag, venv, None, source, install_script(True, source, "/dev/null"), say)
            before = layers.snapshot(venv)
        requirements = tmp / f"{group}.txt"
        requirements.write_bytes(files[f"requirements/{group}.txt"])  # the rendered context's, as a build's
        say(f"installing the {group} layer group ({len(packages[group])} packages) with uv {installer.VERSION}")
        with phases.timed(f"install {group}"):
            _run_install(engine, os_tag, venv, requirements, source, install_script(i == 0, source), say)
        with phases.timed(f"{group} layer"):
            after = layers.snapshot(venv)
            paths = layers.changed(before, after, f"the {group} layer group")
            before = after
            tar = tmp / f"{group}.tar"
            layer = layers.write_layer(venv, paths, tar, epoch=EPOCH, prefix=VENV.lstrip("/") + "/",
                                       done=_writing(group, say))
        say(f"the {group} layer: {layer.entries} entries, {layer.size / 2**20:.0f} MiB, {layer.diff_id}")
        out.append(archive.NewLayer(tar, layer.diff_id, made_by))
        if ahead is not None:
            ahead.add(group, out)
    return out


def _writing(group: str, say: Say) -> layers.BytesDone:
    return lambda n: say(f"writing the {group} layer: {n / 2**30:.2f} GiB")


def _run_install(engine: Engine, ref: str, venv: Path, requirements: Path | None,
                 source: Source, script: str, say: Say) -> None:
    mounts = [Mount(str(venv), VENV, read_only=False), *([Mount(str(requirements), REQ)] if requirements else []),
              *source.mounts]
    lines = _Lines(say)
    env = {**source.env, "SOURCE_DATE_EPOCH": str(EPOCH), "PYTHONHASHSEED": "0", "UV_CACHE_DIR": "/tmp/envkit-uv/cache",
           "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "UV_LINK_MODE": "copy",
           "ENVKIT_COMPILE": installer.compile_program()}
    result = engine.run(ref, ["bash", "-c", script], RunOptions(
        timeout=4 * 3600, mounts=tuple(mounts), env=env, network=source.network, user=f"{os.getuid()}:{os.getgid()}",
        role="build", output=lines.feed))
    lines.flush()
    if result.exit_code != 0 or result.timed_out:
        what = requirements.stem if requirements else "the venv"
        raise BuildError(f"installing {what} into {ref} failed (exit code {result.exit_code})",
                         hint="last output:\n    " + "\n    ".join(lines.tail))


class _Lines:
    """Streamed output as whole lines, each said as a build log event; the last ones kept for an error."""

    def __init__(self, say: Say):
        self.say, self.buf, self.tail = say, b"", list[str]()

    def feed(self, chunk: bytes, _stderr: bool) -> None:
        self.buf += chunk
        *whole, self.buf = self.buf.split(b"\n")
        for line in whole:
            self._line(line)

    def flush(self) -> None:
        if self.buf:
            self._line(self.buf)
            self.buf = b""

    def _line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip()
        self.tail = [*self.tail[-19:], text]
        self.say(BuildEvent("log", text))
