"""The spec's trip through ``envkit build`` and the nightly, in order (issue 33: one pass through the pipeline): each
loads the spec once, resolves once, then per image renders once, for the builder picked, and builds what was rendered,
with either builder.

Pure logic: the resolver answers with the committed lock of examples/frameworks.yaml (three images: PyTorch, JAX,
TensorFlow), the builder's build and the payload are replaced, and every call of the stages is written down in the
order it happens. The builds themselves are tested in tests/integration."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envkit.app import build as building
from envkit.app import nightly
from envkit.app import resolve as resolving
from envkit.engine.protocol import BuildEvent, ImageInfo
from envkit.errors import VerificationError
from envkit.images import builder as builder_mod
from envkit.lock import load_lock
from envkit.render import files as render_mod
from envkit.store.history import Store

ROOT = Path(__file__).resolve().parents[3]
NAMES = ["torch", "jax", "tf"]


class Engine:
    """An engine that holds the bases and what was built; the builder's build is replaced (``trip``)."""

    def __init__(self):
        self.images: dict[str, ImageInfo] = {}

    def version(self):
        return {"engine": "docker", "version": "20.10.24", "api": "1.41"}

    def find_image(self, labels):
        return None

    def data_root(self):
        return None

    def tag(self, image_id, tag):
        pass

    def inspect(self, ref):
        if ref.startswith("envkit-base/"):
            return ImageInfo("sha256:base", (ref,), 1, {}, {}, "")
        return self.images.get(ref)

    def layer_chains(self):  # (a build's report of its layers)
        return set()

    def layer_sizes(self, ref):
        return None


@pytest.fixture
def trip(tmp_path, monkeypatch):
    """examples/frameworks.yaml without its lock, in ``tmp_path``; returns (spec path, the calls made, the picker's
    answer to set, the Dockerfiles built by tag)."""
    spec_path = tmp_path / "frameworks.yaml"
    shutil.copy(ROOT / "examples" / "frameworks.yaml", spec_path)
    lock = load_lock(ROOT / "examples" / "frameworks.lock")
    calls: list[tuple] = []
    pick = {"builder": "buildkit"}
    built: dict[str, bytes] = {}

    real_load_spec, real_render_files = resolving.load_spec, render_mod.render_files

    def load_spec(path):
        calls.append(("load spec",))
        return real_load_spec(path)

    def resolve(spec, catalog, index, **kwargs):
        calls.append(("resolve",))
        return lock

    def render_files(lock, image, spec_name, **kwargs):
        calls.append(("render", image.name, "buildkit" if kwargs.get("buildkit") else "classic"))
        return real_render_files(lock, image, spec_name, **kwargs)

    def pick_builder(engine, name):
        calls.append(("pick", name))
        return pick["builder"] if name == "auto" else name

    def run_build(engine, ctx, tag, labels, **kwargs):
        os_stage = kwargs.get("target") == "os"  # BuildKit's OS stage, built first (images.os_stage)
        calls.append(("os stage" if os_stage else "build", tag.split("/")[1].split(":")[0], kwargs["builder"]))
        if not os_stage:
            built[tag] = (ctx / "Dockerfile").read_bytes()
        engine.images[tag] = ImageInfo("sha256:" + tag.split(":")[0][-3:], (tag,), 7, dict(labels), {}, "1000")
        yield BuildEvent("done", engine.images[tag].id)

    monkeypatch.setattr(resolving, "load_spec", load_spec)
    monkeypatch.setattr(resolving, "resolve", resolve)
    monkeypatch.setattr(render_mod, "render_files", render_files)
    monkeypatch.setattr(builder_mod, "render_files", render_files)
    for module in (building, builder_mod, nightly):
        monkeypatch.setattr(module, "pick_builder", pick_builder, raising=False)
    monkeypatch.setattr(builder_mod, "run_build", run_build)
    monkeypatch.setattr(builder_mod, "ensure_base", lambda *a, **k: ImageInfo("sha256:base", (), 1, {}, {}, ""))
    monkeypatch.setattr(nightly, "certify_image", lambda *a, **k: (_ for _ in ()).throw(VerificationError("no payload")))
    return spec_path, calls, pick, built


def _one_pass(builder: str, named: bool = False, nightly: bool = False) -> list[tuple]:
    """The spec loaded once, the lock resolved once, the builder picked once (auto: once the lock is known; a name:
    before anything), then per image: rendered once for that builder, and built with it (the nightly's BuildKit
    builds: their OS stage first, which it mirrors)."""
    pick = ("pick", builder if named else "auto")
    steps = ["os stage", "build"] if builder == "buildkit" and nightly else ["build"]
    return [*([pick] if named else []), ("load spec",), ("resolve",), *([] if named else [pick]),
            *[("render", name, builder) for name in NAMES],
            *[(step, name, builder) for name in NAMES for step in steps]]


def _built_is_rendered(built: dict[str, bytes], out: Path) -> None:
    """Each Dockerfile built is the one dockerfiles/ holds."""
    assert len(built) == len(NAMES)
    for tag, dockerfile in built.items():
        assert (out / "dockerfiles" / tag.split("/")[1].split(":")[0] / "Dockerfile").read_bytes() == dockerfile


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_envkit_build_loads_resolves_and_renders_once_and_builds_what_it_rendered(trip, tmp_path, builder):
    spec_path, calls, pick, built = trip
    pick["builder"] = builder
    _, outcomes = building.build_spec(spec_path, tmp_path / "out", Engine(), verify=False, record=False,
                                      space_check=False)
    assert [o.name for o in outcomes] == NAMES and {o.action for o in outcomes} == {"built"}
    assert calls == _one_pass(builder)
    _built_is_rendered(built, tmp_path / "out")


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_the_nightly_loads_resolves_and_renders_once_and_builds_what_it_rendered(trip, tmp_path, builder):
    spec_path, calls, pick, built = trip
    pick["builder"] = builder
    with Store.open(tmp_path / "history.sqlite") as store:
        result = nightly.run_nightly(spec_path, Engine(), store, out_root=tmp_path / "out",
                                     reports_dir=tmp_path / "reports", gpus=False)
    assert [r.build for r in result.images] == ["built"] * 3  # (then failed verification: the payload is replaced)
    assert calls == _one_pass(builder, nightly=True)
    _built_is_rendered(built, tmp_path / "out")


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_a_builder_named_is_picked_before_the_spec_is_read_and_only_once(trip, tmp_path, builder):
    """``--builder NAME``: checked before anything (BuildKit named where its CLI is missing fails at once), never
    asked again; the rest of the trip as with auto."""
    spec_path, calls, _, built = trip
    with Store.open(tmp_path / "history.sqlite") as store:
        nightly.run_nightly(spec_path, Engine(), store, out_root=tmp_path / "out", reports_dir=tmp_path / "reports",
                            gpus=False, builder=builder)
    assert calls == _one_pass(builder, named=True, nightly=True)
    _built_is_rendered(built, tmp_path / "out")
    calls.clear()
    built.clear()
    spec_path.with_suffix(".lock").unlink()  # (the nightly wrote it: the build would reuse it, resolving nothing)
    building.build_spec(spec_path, tmp_path / "out2", Engine(), verify=False, record=False, space_check=False,
                        builder=builder)
    assert calls == _one_pass(builder, named=True)
    _built_is_rendered(built, tmp_path / "out2")
