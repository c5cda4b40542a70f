"""A catalog file's bytes as text: UTF-8 only, a byte that is not refused at its line and column."""

from __future__ import annotations

from pathlib import Path

from ..errors import CatalogError, Location


def utf8_text(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[start:exc.start].decode("utf-8", errors="replace")) + 1
        raise CatalogError(f"catalog file {path.name} is not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded",
                           hint="save the file as UTF-8 (YAML files are UTF-8 text)",
                           location=Location(str(path), raw[:exc.start].count(b"\n") + 1, column)) from None
