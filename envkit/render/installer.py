"""The installer online builds use: uv, one pinned release, fetched inside the build and checked by sha256.

uv downloads and unpacks the lock's wheels in parallel and installs them into the image's venv where they run
(no builder stage, no 5 GB ``COPY --from``); nothing of it stays in the image. With BuildKit it is fetched once,
in a stage of its own that the install steps mount; the classic builder has no mounts, so each install step
fetches it into /tmp and removes it before the step ends. Offline (bundle) builds keep pip, the installer the
bundle's Debian packages carry. Bumping uv: the version and both wheels' sha256 from
https://pypi.org/pypi/uv/<version>/json.
"""

from __future__ import annotations

from pathlib import Path

VERSION = "0.13.9"
_FILES = "https://files.pythonhosted.org/packages"
# `uname -m` inside the build -> (the manylinux wheel's URL, its sha256)
WHEELS: dict[str, tuple[str, str]] = {
    "x86_64": ((f"{_FILES}/3d/aa/26d64642d808de4a652579ef950d7cd2d37f080a8babf9c67c6b75fc4c3f/"
                f"uv-{VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
               "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"),
    "aarch64": ((f"{_FILES}/fe/2f/51a5de367c602592c018a42a23d57fba5f2689fe6c3bf025dcf043b39c61/"
                 f"uv-{VERSION}-py3-none-manylinux_2_28_aarch64.whl"),
                "ecb6028d79dc96fbeafffe5c8af62a7099487ebc05a701e76714eebcffd06375"),
}
# What an install step runs (python3 is in the OS layer; no curl there): fetch the wheel, refuse it unless its
# sha256 is the pinned one, write the uv program from it. Arguments: URL, sha256, destination.
# (No single quote in it: the Dockerfile passes it single-quoted.)
_CHECK_AND_WRITE = ("got = hashlib.sha256(data).hexdigest(); "
                    "sys.exit(f\"uv wheel {url}: sha256 {got}, expected {sha}\") if got != sha else None; "
                    "z = zipfile.ZipFile(io.BytesIO(data)); "
                    "open(dest, \"wb\").write("
                    "z.read(next(n for n in z.namelist() if n.endswith(\".data/scripts/uv\"))))")
FETCH = ("import hashlib, io, sys, urllib.request, zipfile; url, sha, dest = sys.argv[1:]; "
         "data = urllib.request.urlopen(url, timeout=300).read(); " + _CHECK_AND_WRITE)
# The same from a wheel file at hand (an offline bundle's: images.reproducible). Arguments: path, sha256, destination.
EXTRACT = ("import hashlib, io, sys, zipfile; url, sha, dest = sys.argv[1:]; "
           "data = open(url, \"rb\").read(); " + _CHECK_AND_WRITE)
# Flags of every `uv pip install` (the index flags follow, as the resolver gave them: index.urls.uv_index_args):
# the lock's exact files, nothing resolved, wheels only, no uv.toml of the build's own.
FLAGS = "--no-config --no-deps --require-hashes --only-binary :all:"
# The classic builder's install steps compile the bytecode as pip does. BuildKit's and a reproducible build's
# compile it with ``pycompile`` (fixed inputs: no mtime in a pyc, one order), so they leave this out.
COMPILE = "--compile-bytecode"
# Every environment file's mtime in a reproducible layer (BuildKit's install steps set it; ``images.layers`` writes
# it), the bytecode's SOURCE_DATE_EPOCH and an assembled image's `created`: 1980-01-01T00:00:00Z, the earliest time
# a zip file can hold. Not derived from the lock: images of different locks on the same CUDA wheels must get the same
# bytes for that layer, so nothing of a lock but a group's own packages may reach it.
EPOCH = 315532800
PYCOMPILE = "envkit-pycompile.py"  # ``pycompile``'s text in a BuildKit context, mounted into each install step


def compile_program() -> str:
    """The bytecode step's program: ``pycompile``'s text, run by the image's interpreter."""
    return Path(__file__).with_name("pycompile.py").read_text()


def fetch_shell(dest: str) -> str:
    """The shell an install step runs to get uv: the wheel for `uname -m`, refused unless its sha256 is the pinned
    one, the program written to ``dest``. Its lines end in backslashes, as a Dockerfile's RUN continues them (bash
    reads a script of them the same); the rendered Dockerfiles and ``images.reproducible`` both run this text."""
    return _uv_shell(FETCH, '"$u"', dest)


def extract_shell(wheel: str, dest: str) -> str:
    """The shell that writes uv to ``dest`` from the wheel file ``wheel`` (an offline bundle's), refused unless its
    sha256 is the pinned one for `uname -m`."""
    return _uv_shell(EXTRACT, wheel, dest)


def _uv_shell(program: str, source: str, dest: str) -> str:
    """`uname -m`'s pinned wheel (``$u``, its URL) and sha256 (``$s``), then ``program`` run on ``source``."""
    wheels = "".join(f'{arch}) u="{url}"; s="{sha}";; ' for arch, (url, sha) in WHEELS.items())
    return (f'case "$(uname -m)" in {wheels}*) echo "no uv wheel for $(uname -m)" >&2; exit 1;; esac \\\n'
            f" && python3 -c '{program}' {source} \"$s\" {dest} \\\n"
            f" && chmod 755 {dest}")


def wheel_name(arch: str) -> str:
    """The file name of the pinned uv wheel for ``arch`` (`uname -m`)."""
    return WHEELS[arch][0].rsplit("/", 1)[1]
