"""Bytecode for a reproducible build's layers, run inside the image by its own interpreter (stdlib only: this file's
text is what the install container runs, ``python -I -c``, with the directory to compile as its argument).

Each .py file under the directory that has no bytecode yet (the layer groups installed before compiled theirs) is
compiled in one process, in path order, with no mtime in the pyc (``UNCHECKED_HASH``: the image is immutable, and
the interpreter does not hash each source at import as ``CHECKED_HASH`` makes it); the container sets
PYTHONHASHSEED=0, so a frozenset constant's order is the same in every build. A file that does not compile keeps
no bytecode, as with uv's and pip's compileall.
"""

import importlib.util
import os
import py_compile
import sys


def pending(root: str) -> list[str]:
    """The .py files under ``root`` without a pyc, sorted."""
    found = []
    for directory, _, files in os.walk(root):
        found += [os.path.join(directory, f) for f in files if f.endswith(".py")]
    return sorted(p for p in found if not os.path.exists(importlib.util.cache_from_source(p)))


def main(root: str) -> int:
    for path in pending(root):
        try:
            py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        except py_compile.PyCompileError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
