"""app.build.build_spec in one pass (issue 33, item 1): the builder is picked once, the contexts are rendered once
for it, dockerfiles/ holds what is built, the store records the outcome's context hash (nothing read back from the
engine), and --no-cache builds an image again even when one of the same lock and context is on the engine. The
engine's side of a build is tested in tests/integration; here the build itself is replaced."""

import json
import shutil
from pathlib import Path

import pytest

from envkit.app import build as building
from envkit.engine.protocol import BuildEvent, ImageInfo
from envkit.images import builder as builder_mod
from envkit.images.os_stage import os_key
from envkit.lock import load_lock
from envkit.render.files import render_files
from envkit.store.history import Store
from envkit.support.labels import OS_KEY_LABEL

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def example(tmp_path):
    """examples/team.yaml and its committed lock, copied (the lock matches: nothing is resolved)."""
    for name in ("team.yaml", "team.lock"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    return tmp_path / "team.yaml"


class Engine:
    """An engine holding the images ``build`` made; asks for the API version as BuildKit's check does."""

    def __init__(self, existing: ImageInfo | None = None):
        self.existing = existing
        self.built: list[tuple[str, dict]] = []
        self.os_built: list[tuple[str, str]] = []  # BuildKit's OS stage, built first (images.os_stage): (tag, key)
        self.build_args: list[dict | None] = []
        self.inspected: list[str] = []

    def version(self):
        return {"engine": "docker", "version": "20.10.24", "api": "1.41"}

    def find_image(self, labels):
        return self.existing

    def data_root(self):
        return None

    def tag(self, image_id, tag):
        pass

    def inspect(self, ref):
        self.inspected.append(ref)
        return ImageInfo("sha256:new", (ref,), 7, {}, {}, "1000")

    def layer_chains(self):
        return set()

    def layer_sizes(self, ref):
        return None


def _replace_build(monkeypatch, engine: Engine, picks: list[str], renders: list[bool]):
    """The builder's build, the base and the pick, recorded; ``render_files`` counted."""
    def pick(eng, name):
        picks.append(name)
        return "buildkit"

    def run_build(eng, ctx, tag, labels, **kwargs):
        if kwargs.get("target") == "os":
            engine.os_built.append((tag, labels[OS_KEY_LABEL]))
        else:
            engine.build_args.append(kwargs.get("build_args"))
            engine.built.append((kwargs["builder"], {p.name: p.read_bytes() for p in [ctx / "Dockerfile"]}))
        yield BuildEvent("done", "sha256:new")

    def counted(*args, **kwargs):
        renders.append(kwargs.get("buildkit", False))
        return render_files(*args, **kwargs)

    monkeypatch.setattr(building, "pick_builder", pick)  # a builder named
    monkeypatch.setattr(builder_mod, "pick_builder", pick)  # auto, decided by images.builder.picked
    monkeypatch.setattr(builder_mod, "run_build", run_build)
    monkeypatch.setattr(builder_mod, "ensure_base", lambda *a, **k: ImageInfo("sha256:base", (), 1, {}, {}, ""))
    monkeypatch.setattr(builder_mod, "render_files", counted)
    monkeypatch.setattr("envkit.render.files.render_files", counted)


def test_build_picks_once_renders_once_and_dockerfiles_holds_what_was_built(example, tmp_path, monkeypatch):
    engine, picks, renders = Engine(), [], []
    _replace_build(monkeypatch, engine, picks, renders)
    store = f"sqlite:///{tmp_path / 'history.db'}"
    _, outcomes = building.build_spec(example, tmp_path / "out", engine, verify=False, store_url=store)
    assert picks == ["auto"] and renders == [True]  # one pick, one render (for BuildKit)
    written = (tmp_path / "out" / "dockerfiles" / "torch25" / "Dockerfile").read_bytes()
    assert engine.built == [("buildkit", {"Dockerfile": written})]  # what was built is what dockerfiles/ shows
    # no OS stage image of its key on the engine: the Dockerfile's own os stage (BuildKit's cache shares it)
    assert engine.os_built == [] and engine.build_args == [None]
    assert b"--mount=type=secret" in written
    lock = load_lock(example.with_suffix(".lock"))
    expected = builder_mod.context_hash(render_files(lock, lock.images[0], "team.yaml", buildkit=True))
    assert outcomes[0].context_hash == expected and outcomes[0].to_json()["context_hash"] == expected
    # the OS stage looked for (not of its key), the build's own inspect: recording reads nothing back
    assert engine.inspected == [f"{outcomes[0].tag}-os", outcomes[0].tag]
    with Store.open(store) as s:
        assert s.find_build("torch25", lock.images[0].hash, expected) is not None


def test_an_identical_image_is_kept_unless_no_cache(example, tmp_path, monkeypatch):
    existing = ImageInfo("sha256:old", ("vision/torch25:old",), 5, {}, {}, "1000")
    engine, picks, renders = Engine(existing), [], []
    _replace_build(monkeypatch, engine, picks, renders)
    _, kept = building.build_spec(example, tmp_path / "out", engine, verify=False, record=False)
    assert kept[0].action == "skipped" and engine.built == [] and kept[0].context_hash
    assert "rebuilt" not in kept[0].to_json()
    _, again = building.build_spec(example, tmp_path / "out", engine, verify=False, record=False, no_cache=True)
    assert again[0].action == "built" and again[0].rebuilt and len(engine.built) == 1
    assert again[0].to_json()["rebuilt"] is True and again[0].context_hash == kept[0].context_hash


def test_build_no_cache_says_so_in_json(example, monkeypatch):
    from click.testing import CliRunner

    from envkit.cli import main

    seen = {}

    def build_spec(spec, out_root, engine, **kwargs):
        seen.update(kwargs)
        lock = load_lock(example.with_suffix(".lock"))
        from envkit.app.resolve import Resolved
        from envkit.spec import load_spec
        return Resolved(load_spec(example), lock, example.with_suffix(".lock"), True), []

    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: Engine())
    monkeypatch.setattr(building, "build_spec", build_spec)
    result = CliRunner().invoke(main, ["build", str(example), "--no-cache", "--json"])
    assert result.exit_code == 0, result.output
    assert seen["no_cache"] is True and json.loads(result.stdout)["no_cache"] is True


@pytest.mark.parametrize("args, mount", [([], True), (["--builder", "classic"], False), (["--builder", "buildkit"], True)])
def test_render_writes_the_contexts_of_the_builder_named(example, tmp_path, args, mount):
    """`envkit render`: BuildKit's contexts by default (what `envkit build` builds wherever BuildKit can build, and
    what dockerfiles/ holds), the classic builder's with --builder classic."""
    from click.testing import CliRunner

    from envkit.cli import main

    result = CliRunner().invoke(main, ["render", str(example), "--out", str(tmp_path / "out"), "--json", *args])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "dockerfiles" / "torch25" / "Dockerfile").read_text()
    assert ("--mount=type=secret" in text) is mount and ("ARG ENVKIT_SITE_CA" in text) is not mount
    assert json.loads(result.stdout)["builder"] == ("classic" if not mount else "buildkit")
