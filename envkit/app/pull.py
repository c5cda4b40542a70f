"""What a researcher does with a published image: name it (a bare repository means its newest tag), read where it
stands (``envkit show``'s summary), and pull it by digest after the same certification gate as ``envkit run``
(``envkit pull``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..certify.gate import Verdict
from ..engine.protocol import ImageInfo
from ..errors import EngineError, EnvkitError, VerificationError
from ..registry.publish import pull_layers
from ..registry.remote import list_registry
from ..registry.remote_parse import parse_ref
from ..spec import load_spec
from ..support.labels import IMAGE_LABEL, TEAM_LABEL
from ..support.layer_moves import LayerMoves
from ..support.progress import Progress, Transfer
from .researchers import envkit_tag, gate_of, show_image
from .standing import Standing, on_model, stack_facts, standings

RUN_EXAMPLE = "python3 train.py"  # the command shown in the `envkit run` line show prints


def bare(ref: str) -> bool:
    """A repository named without a tag or digest (``vision/torch25``, ``host:5000/vision/torch25``)."""
    return "@" not in ref and ":" not in ref.rpartition("/")[2]


def newest_ref(engine: Any, ref: str, **read: Any) -> str:
    """``ref`` itself, or for a bare repository its newest tag: in the registry (by build time), or here (the newest
    envkit image of that team/image, when the engine has no ``:latest`` of it)."""
    if not bare(ref):
        return ref
    remote = parse_ref(ref)
    if remote is not None:
        rows = [r for r in list_registry(engine, f"{remote.registry}/{remote.repository}", **read).rows
                if r["repository"] == remote.repo]
        if not rows:
            raise EngineError(f"registry {remote.registry} holds no envkit image in {remote.repository}",
                              hint=f"`envkit ls --registry {remote.registry}` lists what it holds")
        return max(rows, key=lambda r: (r.get("created") or "", r["tag"]))["tag"]
    if engine is None or engine.inspect(ref) is not None:
        return ref  # a local :latest, as docker reads a bare name
    team, _, image = ref.rpartition("/")
    found = engine.find_image({TEAM_LABEL: team, IMAGE_LABEL: image}) if team else None
    tag = envkit_tag(found.labels, found.tags) if found is not None else None
    return tag or ref  # (nothing found: show and run say there is no such image)


TEAM_SPEC = Path("team.yaml")  # the team's spec, when the working directory holds it (as doctor reads it)


def fleet_models(spec_path: Path = TEAM_SPEC) -> tuple[tuple[str, ...], str | None]:
    """The GPU models of the team's fleet (``fleet.gpus`` of ./team.yaml; compute capabilities left out), and why
    none could be read (None when there is no such file, or it was read)."""
    if not spec_path.is_file():
        return (), None
    try:
        spec = load_spec(spec_path)
    except EnvkitError as exc:
        return (), f"{spec_path} was not read for the fleet's GPU models: {exc.message}"
    return tuple(g for g in spec.fleet.gpus if not CAPABILITY.fullmatch(g)), None


CAPABILITY = re.compile(r"\d+\.\d+")


def summarize(doc: dict[str, Any], gpus: tuple[str, ...] = ()) -> dict[str, Any]:
    """``show_image``'s document with the answer first: framework, CUDA, driver floor, where it stands per GPU model
    (and on each of ``gpus``, certified or not), the exact commands to get and run it, and what to do next when
    nothing certifies it."""
    found = standings(doc["certificates"])
    facts = stack_facts(doc.get("labels"), doc["certificates"])
    wanted = [{"gpu_model": g, "state": on_model(found, g)[0]} for g in gpus]
    ref = doc["image"]
    local = doc.get("source") == "local"
    steps = ([] if local else [f"envkit pull {ref}"]) + [f"envkit run {ref} -- {RUN_EXAMPLE}"]
    return {**doc, **facts, "standing": [s.to_json() for s in found], "gpus": wanted, "commands": steps,
            "next": next_step(found)}


def next_step(found: list[Standing]) -> str | None:
    """What to do when no GPU model certifies the image (None when one does)."""
    if any(s.status == "certified" and not s.cpu_only for s in found):
        return None
    elsewhere = "or pick an image that is certified (`envkit ls --certified`)"
    if not found:
        return (f"no certificate yet: certify it on a GPU host of the fleet (`envkit certify IMAGE --gpus` there, or "
                f"the team's nightly run), {elsewhere}")
    failed = [s.short for s in found if s.status == "failed"]
    if failed:
        return f"it failed on {', '.join(failed)}: `envkit show --all IMAGE` gives the reasons; {elsewhere}"
    return f"verified without a GPU only: certify it on a GPU host (`envkit certify IMAGE --gpus`), {elsewhere}"


@dataclass(frozen=True)
class Pulled:
    ref: str  # what was asked for (a bare repository: its newest tag)
    pinned: str  # registry/repo@sha256:...: what was pulled
    info: ImageInfo
    verdict: Verdict
    layers: LayerMoves | None = None  # per layer: pulled, or already present, with the registry's bytes

    def to_json(self) -> dict[str, Any]:
        return {"image": self.ref, "pinned": self.pinned, "id": self.info.id, "size": self.info.size,
                "gate": self.verdict.to_json(), "run": f"envkit run {self.ref} -- {RUN_EXAMPLE}",
                "layers_pulled": self.layers.to_json() if self.layers is not None else None}


def pull_image(engine: Any, ref: str, *, store_url: str | None, require_certified: bool = False,
               gpus: bool | None = None, warn: Callable[[str], None] = lambda _: None,
               progress: Progress | None = None, transfer: Transfer | None = None,
               trusted_keys: str | None = None) -> Pulled:
    """Pull ``ref`` (a registry reference; a bare repository: its newest tag) by its digest, after the gate
    ``envkit run`` applies on this host (``gpus``: as run's --gpus; None: when the engine has the NVIDIA runtime):
    an image not certified here is pulled with ``warn(message)``, or (``require_certified``) refused, exit 8,
    nothing pulled. The tag is read as its digest once, the registry's certificates count only when they verify with
    a trusted key (``trusted_keys``, else ``$ENVKIT_TRUSTED_KEYS``) for that digest, and that digest is what is
    pulled. The tag is then set on the pulled image, so ``envkit run REF`` runs this copy."""
    if parse_ref(ref) is None:
        raise EngineError(f"{ref} names no registry: envkit pulls from the team registry",
                          hint="give host[:port]/team/image[:tag]; `envkit ls --registry HOST` lists what it holds")
    ref = newest_ref(engine, ref)
    doc = show_image(engine, ref, store_url, trusted_keys=trusted_keys)
    registry = doc.get("registry") or {}
    if not registry.get("pinned"):
        raise EngineError(f"cannot read {ref} from its registry: {registry.get('error') or 'no digest'}",
                          hint=registry.get("hint") or "check the reference and that the registry answers")
    on_gpus = engine.nvidia_runtime() if gpus is None else gpus
    verdict = gate_of(doc, ref, on_gpus=on_gpus)
    if not verdict.passed:
        if require_certified:
            raise VerificationError(f"refusing to pull it: {verdict.message}", hint=verdict.hint + " (or drop "
                                    "--require-certified / ENVKIT_REQUIRE_CERTIFIED to pull it anyway, with a warning)")
        warn(f"warning: {verdict.message}\n  hint: {verdict.hint}")
    info, layers = pull_layers(engine, registry["pinned"], progress=progress, transfer=transfer)
    if not bare(ref) and "@" not in ref:
        engine.tag(info.id, ref)
    return Pulled(ref, registry["pinned"], info, verdict, layers)
