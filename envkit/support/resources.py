"""Where envkit's own files are: ``templates/`` (the Jinja templates of the build contexts, compose files and the
HTML report), packaged with envkit or, in a source checkout, at the repository's root."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def templates_dir() -> Path:
    packaged = Path(str(resources.files("envkit"))) / "templates"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "templates"
