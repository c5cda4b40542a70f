"""export: a built image in the form another runtime reads (``envkit export sif``: a SIF for Apptainer sites)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EnvkitError
from ..images.sif import SifExport, export_sif, require_tools
from ..support.progress import Progress

if TYPE_CHECKING:
    from ..engine.protocol import Engine


def default_sif_path(image: str) -> Path:
    """``<repository's last part>_<tag>.sif`` in the working directory (``team/pytorch:2.4`` -> pytorch_2.4.sif)."""
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{name.rsplit('/', 1)[-1]}_{tag}").strip("_.") or "image"
    return Path(f"{stem}.sif")


def export_image_sif(engine: Engine, image: str, out: Path | None = None, *,
                     progress: Progress = lambda _: None) -> SifExport:
    """``image`` as a SIF at ``out`` (default: ``default_sif_path``); the tools are checked before anything."""
    require_tools()
    path = out or default_sif_path(image)
    if path.is_dir():
        raise EnvkitError(f"{path} is a directory", hint="give --sif a file path, e.g. image.sif")
    return export_sif(engine, image, path, progress=progress)
