"""The strict pydantic bases every document envkit reads or writes stands on (one owner of the config).

``Frozen``: an unknown key is refused and an instance never changes (the lock, the catalog's files, certificates,
performance floors, exclusions, a bundle's manifest). ``Strict``: frozen, and no value is coerced to the declared
type (team.yaml: ``python: 3.10`` is refused as a number rather than read as "3.1"). ``fields_at``: the keys a
model allows at a path (for "unknown key ...: allowed keys" and "did you mean").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Strict(Frozen):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def fields_at(model: type[BaseModel], loc: tuple) -> set[str]:
    """The allowed keys of the model found by walking ``loc`` from ``model``."""
    current: Any = model
    keyed = False  # the last field was a mapping of models: the next part is its key (dispatch.gpus.H100)
    for part in loc:
        if isinstance(part, int) or keyed:
            keyed = False
            continue
        field = current.model_fields.get(part) if isinstance(current, type) and issubclass(current, BaseModel) \
            else None
        if field is None:
            return set()
        keyed = _is_mapping(field.annotation)
        current = _model_in(field.annotation)
    return set(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else set()


def _is_mapping(annotation: Any) -> bool:
    if getattr(annotation, "__origin__", None) is dict:
        return True
    return any(_is_mapping(arg) for arg in getattr(annotation, "__args__", ()) or ())


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None
