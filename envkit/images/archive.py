"""A docker-archive (what `docker save` writes and `docker load` reads) assembled from an OS image's archive and
layer tars envkit wrote: ``manifest.json``, the image config, each layer as ``<dir>/layer.tar``.

The config is the OS image's (its architecture, its Env, Shell and labels), then what the rendered Dockerfile's
final stage adds, from the one place the template takes it (``render.files.RenderContext``: runtime_env, labels,
user, workdir, cmd); ``created`` and every history entry's time are ``epoch``. The OS image's own ``container``,
``container_config`` and ``docker_version`` fields (which build made it) are not carried over, nor the history
entries of the OS stage's own labels: the same OS layers and the same lock give the same config, so the same
image id.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import BuildError

VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class SavedImage:
    """An image as `docker save` wrote it: its config, and each layer's member in the archive (lowest first)."""

    path: Path
    config: dict[str, Any]
    layers: tuple[str, ...]


@dataclass(frozen=True)
class NewLayer:
    """A layer envkit wrote: its tar on disk, its diff_id, and what the history says made it. No path: a layer the
    engine has on these same layers below it (``images.layer_reuse``), named in the archive's manifest, left out."""

    path: Path | None
    diff_id: str
    created_by: str


def read_saved(path: Path) -> SavedImage:
    """The one image of a `docker save` archive."""
    with tarfile.open(path, "r:") as tar:
        manifest = json.load(_member(tar, "manifest.json", path))
        if len(manifest) != 1:
            raise BuildError(f"{path} holds {len(manifest)} images; expected the one saved")
        config = json.load(_member(tar, manifest[0]["Config"], path))
    layers = tuple(manifest[0]["Layers"])
    if len(layers) != len(config.get("rootfs", {}).get("diff_ids", ())):
        raise BuildError(f"{path}: its manifest names {len(layers)} layers, its config {len(config['rootfs'])}")
    return SavedImage(path, config, layers)


def _member(tar: tarfile.TarFile, name: str, path: Path) -> io.BufferedReader:
    fh = tar.extractfile(name)
    if fh is None:
        raise BuildError(f"{path} has no file {name}; it is not an image archive `docker save` wrote")
    return fh  # type: ignore[return-value]


def expand(value: str, env: dict[str, str]) -> str:
    """``$VAR`` and ``${VAR}`` in an ENV value, from the environment so far, as the engine expands them."""
    return VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_config(base: dict[str, Any], layers: list[NewLayer], *, env: tuple[tuple[str, str], ...],
                 labels: dict[str, str], drop_labels: set[str], user: str, workdir: str, cmd: tuple[str, ...],
                 epoch: int) -> dict[str, Any]:
    """The config of ``base`` (a saved image's) with ``layers`` on top and the final stage's instructions."""
    cfg = dict(base.get("config") or {})
    environ = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
    for key, value in env:
        environ[key] = expand(value, environ)
    cfg["Env"] = [f"{k}={v}" for k, v in environ.items()]
    cfg["Labels"] = dict(sorted({**{k: v for k, v in (cfg.get("Labels") or {}).items() if k not in drop_labels},
                                 **labels}.items()))
    cfg.update(User=user, WorkingDir=workdir, Cmd=list(cmd))
    cfg.pop("Image", None)  # the builder's note of the parent image id: which build made the OS stage
    # every history entry at ``epoch`` too (the OS stage's steps carry the time of its build), less the steps that
    # set the stage's own labels (gone from this image)
    history = [*({**h, "created": iso(epoch)} for h in base.get("history") or [] if not _sets(h, drop_labels)),
               *({"created": iso(epoch), "created_by": layer.created_by} for layer in layers)]
    doc: dict[str, Any] = {
        "architecture": base.get("architecture", "amd64"), "os": base.get("os", "linux"),
        **({"variant": base["variant"]} if base.get("variant") else {}),
        "config": cfg, "created": iso(epoch), "history": history,
        "rootfs": {"type": "layers", "diff_ids": [*base["rootfs"]["diff_ids"], *(x.diff_id for x in layers)]},
    }
    return doc


def _sets(entry: dict[str, Any], labels: set[str]) -> bool:
    """Whether a history entry is an empty-layer LABEL step setting one of ``labels``."""
    text = str(entry.get("created_by", ""))
    return bool(entry.get("empty_layer")) and "LABEL " in text and any(f" {k}=" in text for k in labels)


def config_bytes(config: dict[str, Any]) -> bytes:
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def image_id(config: dict[str, Any]) -> str:
    """The id the engine gives the image of ``config``: the sha256 of its bytes."""
    return "sha256:" + hashlib.sha256(config_bytes(config)).hexdigest()


def write_archive(out: BinaryIO, saved: SavedImage, layers: list[NewLayer], config: dict[str, Any], tag: str, *,
                  os_layers: bool = True) -> None:
    """The docker-archive, written as a stream to ``out``: the saved image's layers (read from its archive;
    ``os_layers=False``: named only, for an engine that has them and takes known layers by chain), ``layers`` (those
    without a path named only), ``config`` tagged ``tag``; each layer tar is removed once written (a 5 GB layer is on
    disk once)."""
    data = config_bytes(config)
    names = [*saved.layers, *(f"{x.diff_id.split(':', 1)[1]}/layer.tar" for x in layers)]
    config_name = f"{image_id(config).split(':', 1)[1]}.json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": names}]
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        with tarfile.open(saved.path, "r:") as src:
            for name in saved.layers if os_layers else ():
                member = src.getmember(name)
                tar.addfile(_file_info(name, member.size), src.extractfile(member))
        for name, layer in zip(names[len(saved.layers):], layers):
            if layer.path is None:
                continue
            with open(layer.path, "rb") as fh:
                tar.addfile(_file_info(name, layer.path.stat().st_size), fh)
            layer.path.unlink()
        for entry, blob in ((config_name, data), ("manifest.json", json.dumps(manifest).encode())):
            tar.addfile(_file_info(entry, len(blob)), io.BytesIO(blob))


def _file_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    return info
