"""Load YAML documents strictly, remembering where every value came from.

Anchors and aliases are refused (they are how "billion laughs" documents blow up),
so are duplicate keys and non-string keys. Each value's position is kept by its
path of keys and indices so that a model's validation error can name file:line:col.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import EnvkitError, Location, SpecError

MAX_BYTES = 1 << 20  # a team.yaml is a page or two; refuse anything absurd
Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Document:
    """A parsed YAML document and the source position of every value in it."""

    path: str
    data: Any
    positions: dict[Path_, tuple[int, int]] = field(repr=False)

    def locate(self, loc: Path_) -> Location:
        """The position of the deepest known prefix of ``loc``."""
        loc = tuple(loc)
        while loc and loc not in self.positions:
            loc = loc[:-1]
        line, col = self.positions.get(loc, (None, None))
        return Location(self.path, line, col)


def load_yaml(path: str | Path, *, error: type[SpecError] = SpecError) -> Document:
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)  # never more: /dev/zero is a path too
    except OSError as exc:
        raise error(f"cannot read {p}: {exc.strerror}", hint="check the path") from None
    if len(raw) > MAX_BYTES:
        raise error(f"over the limit of {MAX_BYTES} bytes", hint="is this the spec? team.yaml files are a few KB",
                    location=Location(str(p)))
    return parse_yaml(utf8_text(raw, p, error=error), str(p), error=error)


def utf8_text(raw: bytes, path: Path, *, error: type[EnvkitError] = SpecError, what: str = "") -> str:
    """``raw`` as UTF-8 text, or ``error`` at the line and column of the first byte that is not (``what``: how the
    message names the file, e.g. "catalog file gpus.yaml is ")."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[start:exc.start].decode("utf-8", errors="replace")) + 1
        raise error(f"{what}not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded",
                    hint="save the file as UTF-8 (YAML files are UTF-8 text)",
                    location=Location(str(path), raw[:exc.start].count(b"\n") + 1, column)) from None


def parse_yaml(text: str, name: str, *, error: type[EnvkitError] = SpecError) -> Document:
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses characters YAML does not allow, here already
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = Location(name, mark.line + 1, mark.column + 1) if mark else Location(name)
        started = ""  # where the construct began: an unclosed bracket or quote is found only lines later
        if exc.context and exc.context_mark and exc.problem_mark and exc.context_mark.line != exc.problem_mark.line:
            cause = ("is a bracket or quote there left open?" if "flow" in exc.context or "quoted" in exc.context
                     else "check the indentation of the lines after it")
            started = (f" ({exc.context}, which starts at line {exc.context_mark.line + 1}, column "
                       f"{exc.context_mark.column + 1}: {cause})")
        raise error(f"not valid YAML: {exc.problem or exc}{started}", location=loc) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a NUL, a terminal escape)
        before = text[:exc.position]
        loc = Location(name, before.count("\n") + 1, len(before) - before.rfind("\n"))
        raise error(f"not valid YAML: character U+{exc.character:04X} is not allowed in a YAML file",
                    hint="remove it (control characters, such as a pasted terminal colour code, cannot appear)",
                    location=loc) from None
    except yaml.YAMLError as exc:
        raise error(f"not valid YAML: {exc}", location=Location(name)) from None
    finally:
        if loader is not None:
            loader.dispose()
    positions: dict[Path_, tuple[int, int]] = {}
    if node is None:
        return Document(name, None, positions)
    data = _convert(node, (), positions, loader, name, error, set())
    return Document(name, data, positions)


def _convert(node: yaml.Node, path: tuple, positions: dict[tuple, tuple[int, int]], loader: yaml.SafeLoader, name: str,
             error: type[EnvkitError], seen: set[int]) -> Any:
    pos = (node.start_mark.line + 1, node.start_mark.column + 1)
    positions[path] = pos
    if id(node) in seen:
        raise error(
            "YAML anchors and aliases are not allowed",
            location=Location(name, *pos),
            hint="write the value out in full",
        )
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise error("YAML merge keys (<<) are not allowed", location=Location(name, *pos))
            key = loader.construct_object(key_node, deep=True)
            kpos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if not isinstance(key, str):
                raise error(f"keys must be strings, got {key!r}", location=Location(name, *kpos))
            if key in out:
                raise error(f"duplicate key {key!r}", location=Location(name, *kpos))
            out[key] = _convert(value_node, path + (key,), positions, loader, name, error, seen)
            positions[path + (key,)] = kpos
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _convert(child, path + (i,), positions, loader, name, error, seen)
            for i, child in enumerate(node.value)
        ]
    return loader.construct_object(node, deep=True)
