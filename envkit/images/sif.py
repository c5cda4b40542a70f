"""A built image as a SIF file, for sites that run images with Apptainer (``envkit export sif``).

Assembled with Debian's tools, never with Apptainer (which has no Debian package, so nothing here runs the file):
``skopeo copy docker-daemon:IMAGE oci:DIR:envkit`` takes the image out of the engine as an OCI layout, ``umoci
unpack`` lays its root file system out, envkit adds the ``/.singularity.d`` files Apptainer reads (the image's
labels, its environment, its entry point, the action scripts), ``mksquashfs`` packs it, and ``siftool new``/``add``
write the SIF: a definition file, the labels as JSON, and the squashfs as the primary system partition. Everything
is made in a scratch directory and the SIF renamed onto its path only when complete.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.protocol import Engine, ImageInfo
from ..errors import EngineError, EnvkitError
from ..support import procs, scratch
from ..support.progress import Progress

# each tool envkit runs -> the Debian package that installs it
TOOLS = {"skopeo": "skopeo", "umoci": "umoci", "mksquashfs": "squashfs-tools", "siftool": "siftool"}
ARCHES = {"x86_64": 2, "amd64": 2, "aarch64": 4, "arm64": 4, "ppc64le": 6, "s390x": 11}  # siftool's --partarch
TAG = "envkit"  # the OCI layout's one tag
ACTION = """#!/bin/sh
for script in /.singularity.d/env/*.sh; do
    if [ -f "$script" ]; then
        . "$script"
    fi
done
"""
ACTIONS = {"exec": 'exec "$@"\n', "run": 'exec /.singularity.d/runscript "$@"\n',
           "shell": 'exec /bin/sh "$@"\n', "test": "exit 0\n"}


@dataclass
class SifExport:
    """What ``export_sif`` wrote: the file, and what it holds."""

    path: Path
    image: str
    image_id: str
    size: int
    labels: dict[str, str]
    objects: list[dict[str, str]] = field(default_factory=list)  # `siftool list`'s rows (list_objects)

    def to_json(self) -> dict:
        return {"path": str(self.path), "image": self.image, "image_id": self.image_id, "size": self.size,
                "labels": self.labels, "objects": self.objects}


def require_tools() -> dict[str, str]:
    """Each tool's path; a missing one is named with the Debian package that installs it (exit 6)."""
    found = {tool: shutil.which(tool) or (f"/usr/sbin/{tool}" if os.access(f"/usr/sbin/{tool}", os.X_OK) else "")
             for tool in TOOLS}
    missing = [tool for tool, path in found.items() if not path]
    if missing:
        packages = " ".join(sorted({TOOLS[t] for t in missing}))
        raise EngineError(f"{', '.join(missing)} not installed: envkit assembles a SIF with skopeo, umoci, "
                          "squashfs-tools and siftool", hint=f"install them: apt-get install {packages} "
                                                             "(or ./scripts/ensure-sif-tools.sh)")
    return found


def export_sif(engine: Engine, image: str, out: Path, *, progress: Progress = lambda _: None) -> SifExport:
    """Write ``image`` (a local image of the engine) as a SIF at ``out``: all of it, or nothing."""
    tools = require_tools()
    info = engine.inspect(image)
    if info is None:
        raise EngineError(f"no image {image!r} in the engine", hint="build it with `envkit build SPEC`, or pull it")
    arch = ARCHES.get(platform.machine())
    if arch is None:
        raise EnvkitError(f"no SIF architecture for this host's {platform.machine()!r}",
                          hint=f"export on one of: {', '.join(sorted(ARCHES))}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with scratch.directory("sif") as work:
        rootfs = _unpack(tools, image, info, work, progress)
        _singularity_files(rootfs, image, info)
        progress("packing the root file system with mksquashfs")
        squash = work / "rootfs.squashfs"
        _call([tools["mksquashfs"], str(rootfs), str(squash), "-noappend", "-comp", "gzip", "-no-progress"],
              "mksquashfs")
        progress("writing the SIF with siftool")
        objects = _write_sif(tools["siftool"], work, squash, image, info, arch, out)
    return SifExport(out, image, info.id, out.stat().st_size, dict(info.labels), objects)


def _unpack(tools: dict[str, str], image: str, info: ImageInfo, work: Path, progress: Progress) -> Path:
    """The image's root file system, unpacked under ``work`` (skopeo, then umoci)."""
    progress(f"copying {image} out of the engine with skopeo (OCI layout)")
    layout = work / "oci"
    _call([tools["skopeo"], "copy", "--quiet", f"docker-daemon:{info.id}", f"oci:{layout}:{TAG}"], "skopeo copy")
    progress("unpacking its layers with umoci")
    bundle = work / "bundle"
    rootless = [] if os.geteuid() == 0 else ["--rootless"]
    _call([tools["umoci"], "unpack", *rootless, "--image", f"{layout}:{TAG}", str(bundle)], "umoci unpack")
    shutil.rmtree(layout)  # the layers are unpacked: free their room before the squashfs is made
    return bundle / "rootfs"


def _singularity_files(rootfs: Path, image: str, info: ImageInfo) -> None:
    """``/.singularity.d``: the labels (labels.json), the environment, the runscript and the action scripts, as
    Apptainer's own conversion of a Docker image writes them."""
    base = rootfs / ".singularity.d"
    for sub in ("env", "actions", "libs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "labels.json").write_text(json.dumps(dict(info.labels), indent=2, sort_keys=True) + "\n")
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(info.env.items()))
    _script(base / "env" / "10-docker2singularity.sh", "#!/bin/sh\n" + exports)
    _script(base / "runscript", f"#!/bin/sh\n# from {image} ({info.id})\nexec \"$@\"\n")
    for name, tail in ACTIONS.items():
        _script(base / "actions" / name, ACTION + tail)
    for link, target in ((".exec", ".singularity.d/actions/exec"), (".run", ".singularity.d/actions/run"),
                         (".shell", ".singularity.d/actions/shell"), ("singularity", ".singularity.d/runscript")):
        path = rootfs / link
        if not path.exists() and not path.is_symlink():
            path.symlink_to(target)


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _write_sif(siftool: str, work: Path, squash: Path, image: str, info: ImageInfo, arch: int,
               out: Path) -> list[dict[str, str]]:
    """The SIF (definition, labels JSON, squashfs) written beside ``out``, then renamed onto it; its objects."""
    definition = work / "envkit.def"
    definition.write_text(f"Bootstrap: docker-daemon\nFrom: {image}\n\n%labels\n"
                          + "".join(f"    {k} {v}\n" for k, v in sorted(info.labels.items())))
    labels = work / "labels.json"
    labels.write_text(json.dumps(dict(info.labels), indent=2, sort_keys=True) + "\n")
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        tmp.unlink()  # siftool new refuses nothing, but makes the file itself
        _call([siftool, "new", str(tmp)], "siftool new")
        _call([siftool, "add", str(tmp), str(definition), "--datatype", "1", "--groupid", "1"], "siftool add")
        _call([siftool, "add", str(tmp), str(labels), "--datatype", "6", "--groupid", "1"], "siftool add")
        _call([siftool, "add", str(tmp), str(squash), "--datatype", "4", "--parttype", "2", "--partfs", "1",
               "--partarch", str(arch), "--groupid", "1"], "siftool add")
        objects = list_objects(_call([siftool, "list", str(tmp)], "siftool list"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return objects


def list_objects(text: str) -> list[dict[str, str]]:
    """`siftool list`'s table as rows (its header and rules left out)."""
    keys = ("id", "group", "link", "position", "type")
    rows = [[cell.strip() for cell in line.split("|")] for line in text.splitlines() if "|" in line]
    return [dict(zip(keys, row)) for row in rows if len(row) == len(keys) and row[0].isdigit()]


def _call(cmd: list[str], what: str) -> str:
    """Run one tool; its stdout, or an error with the end of what it said."""
    proc = procs.run(cmd)
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise EngineError(f"{what} failed (exit {proc.returncode}): " + " | ".join(said),
                          hint="the SIF was not written; the tool's own words above say why")
    return str(proc.stdout)
