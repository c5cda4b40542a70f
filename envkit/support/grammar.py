"""String grammars of the documents people write (team.yaml): checked after the type and published in the JSON
Schema, so an editor validating team.yaml with `envkit schema` refuses what the loader refuses."""

from __future__ import annotations

import re
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

MAX_VALUE = 200  # the longest string value a grammar admits
# a name (team, image): 1 to 63 lowercase letters, digits and '-', starting with a letter or digit (an image tag's part)
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def short(value: str) -> str:
    """``value`` cut to 60 characters for an error message."""
    return value if len(value) <= 60 else value[:57] + "..."


def specifier(value: str) -> str:
    """``value`` when it is a PEP 440 version specifier; else a ValueError naming it (team.yaml's and the catalog's
    version ranges alike)."""
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{short(value)!r} is not a PEP 440 version specifier (e.g. '>=12.4,<13')") from None
    return value


class Grammar:
    """A string grammar: checked after the type (a ValueError naming what was expected) and published in the JSON
    Schema as its pattern and length."""

    def __init__(self, regex: re.Pattern[str], what: str, max_length: int = MAX_VALUE):
        self.regex, self.what, self.max_length = regex, what, max_length

    def check(self, value: str) -> str:
        if len(value) > self.max_length or not self.regex.fullmatch(value):
            raise ValueError(f"{short(value)!r} is not a valid {self.what}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> Any:
        out = handler(schema)
        out.update(pattern=self.regex.pattern, maxLength=self.max_length)
        return out
