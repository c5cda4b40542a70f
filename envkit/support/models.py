"""The strict pydantic bases every document envkit reads or writes stands on (one owner of the config).

``Frozen``: an unknown key is refused and an instance never changes (the lock, the catalog's files, certificates,
performance floors, exclusions, a bundle's manifest). ``Strict``: frozen, and no value is coerced to the declared
type (team.yaml: ``python: 3.10`` is refused as a number rather than read as "3.1").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Strict(Frozen):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
