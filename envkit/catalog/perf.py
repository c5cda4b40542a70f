"""Performance floors per GPU model (``perf.yaml`` beside the catalog), which the host judges when it
certifies: a measured rate below its model's floor fails the certificate.

Kept apart from the resolver's catalog (``load_catalog``): floors judge certification, never what is
resolved or built, so they are not part of the catalog digest a lock records. A team's catalog copy
(``$ENVKIT_CATALOG``) may hold its own ``perf.yaml``; without one, the packaged floors apply.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator

from ..errors import CatalogError
from ..support.models import Frozen
from .files import perf_path
from .models import Verified

# the payload's measured keys a floor may name (its matmul probe; see perf.yaml on why copies are not here)
KEYS = ("bf16_matmul_tflops", "fp16_matmul_tflops")


def _positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"a floor must be a positive, finite number, not {value!r}")
    return value


Floor = Annotated[float, AfterValidator(_positive)]


class ModelFloors(Frozen):
    models: tuple[Annotated[str, Field(min_length=1)], ...] = Field(min_length=1)
    bf16_matmul_tflops: Floor | None = None
    fp16_matmul_tflops: Floor | None = None
    verified: Verified
    sources: tuple[str, ...] = Field(min_length=1)
    note: str | None = None

    def floors(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}


class PerfFile(Frozen):
    version: int = Field(ge=1, le=1)
    sources: dict[str, str]
    floors: tuple[ModelFloors, ...]

    @model_validator(mode="after")
    def _known(self) -> "PerfFile":
        unknown = sorted({s for f in self.floors for s in f.sources} - set(self.sources))
        if unknown:
            raise ValueError(f"floors name unknown sources: {', '.join(unknown)} (add them under 'sources')")
        seen: set[str] = set()
        for f in self.floors:
            for model in f.models:
                if model_key(model) in seen:
                    raise ValueError(f"model {model!r} has floors twice")
                seen.add(model_key(model))
        return self


def model_key(name: str) -> str:
    """'NVIDIA H200' and 'nvidia h200 ' are the same model (the run gate compares names the same way)."""
    name = " ".join(str(name).split()).lower()
    return name[len("nvidia "):] if name.startswith("nvidia ") else name


def load_perf(path: str | Path | None = None) -> PerfFile:
    """The floors at ``path`` (default ``perf_path()``), checked."""
    path = Path(path) if path is not None else perf_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return PerfFile.model_validate(data)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read the performance floors {path}: {exc}"[:400],
                           hint="fix the file, or remove it from the team catalog to use envkit's own") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        msg = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
        raise CatalogError(f"{path}: {where}: {msg}"[:400],
                           hint="fix the entry (a floor is a positive number under a known source)") from None


@lru_cache(maxsize=None)
def _floors_at(path: str) -> dict[str, tuple[dict[str, float], tuple[str, ...]]]:
    perf = load_perf(path)
    return {model_key(m): (f.floors(), f.sources) for f in perf.floors for m in f.models}


def floors_for(gpu_name: str) -> tuple[dict[str, float], tuple[str, ...]]:
    """(floors, sources) for the GPU model nvidia-smi names ``gpu_name``; ({}, ()) for a model with none."""
    return _floors_at(str(perf_path())).get(model_key(gpu_name), ({}, ()))
