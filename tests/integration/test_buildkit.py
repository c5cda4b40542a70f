"""The BuildKit builder: plain-progress parsing, failures, pip's cache mount, the CA as a build
secret (never in a layer), and switching builders rebuilds.

The images here are the example lock's image with its packages swapped for a small closure
(numpy + typing-extensions), so a build takes well under a minute.
"""

import functools
import io
import os
import re
import tarfile
import uuid
from pathlib import Path

import pytest

from envkit.images.builder import CONTEXT_LABEL, build_image, run_build, stage_context
from envkit.engine.protocol import BuildEvent, RunOptions
from envkit.engine.buildkit import BuildKitBuilder, PlainProgress
from envkit.errors import BuildError
from envkit.support.labels import IMAGE_LABEL, LOCK_LABEL, OS_KEY_LABEL, STAGE_LABEL, TEAM_LABEL
from envkit.lock import Package, load_lock, sealed
from envkit.render.files import render_files
from tests import buildcache
from tests.integration.conftest import ROOT

PLAIN = """\
#1 [internal] load build definition from Dockerfile
#1 sha256:b6ec8353447aeb467832ee46da8ef89fbd37067de62d06b495f7b3b34f9bbfa8
#1 transferring dockerfile: 288B done
#1 DONE 0.0s

#6 [os 1/2] FROM docker.io/envkit-base/debian:bookworm-minbase-e70052fe766d
#6 CACHED

#9 [builder 3/3] RUN /opt/venv/bin/pip install -r /tmp/envkit/framework.txt
#9 0.851 Collecting numpy==2.1.3
#10 [extras 1/2] COPY requirements/extra.txt /tmp/envkit/extra.txt
#10 DONE 0.1s
#9 4.120 Successfully installed numpy-2.1.3
#9 DONE 4.8s

#11 [3/3] RUN echo out; exit 3
#11 0.101 out
#11 ERROR: executor failed running [/bin/sh -c echo out; exit 3]: exit code: 3
------
 > [3/3] RUN echo out; exit 3:
------
executor failed running [/bin/sh -c echo out; exit 3]: exit code: 3
"""


def test_plain_progress_becomes_build_events():
    parser = PlainProgress()
    events = [e for line in PLAIN.splitlines() for e in parser.feed(line)]
    steps = [e for e in events if e.kind == "step"]
    assert [(e.text, e.step, e.total) for e in steps] == [
        ("[os] FROM docker.io/envkit-base/debian:bookworm-minbase-e70052fe766d", 1, 2),
        ("[builder] RUN /opt/venv/bin/pip install -r /tmp/envkit/framework.txt", 3, 3),
        ("[extras] COPY requirements/extra.txt /tmp/envkit/extra.txt", 1, 2),
        ("RUN echo out; exit 3", 3, 3)]
    logs = [e.text for e in events if e.kind == "log"]
    assert "Collecting numpy==2.1.3" in logs and "Successfully installed numpy-2.1.3" in logs  # interleaved
    assert any(t.endswith(": cached") and "[os 1/2]" in t for t in logs)
    assert any(t.endswith("done in 4.8s") and "[builder 3/3]" in t for t in logs)
    assert not any("sha256:b6ec" in t for t in logs)
    errors = [e for e in events if e.kind == "error"]
    assert len(errors) == 1 and "exit code: 3" in errors[0].text
    assert parser.errors == [errors[0].text]


def test_command_line():
    cmd = BuildKitBuilder(cli="/usr/bin/docker").command(
        Path("/ctx"), "t/x:1", {"a": "1 2"}, secrets={"site-ca": Path("/etc/ca.pem")}, network=False,
        no_cache=True, dockerfile="buildkit.Dockerfile")
    assert cmd[:4] == ["/usr/bin/docker", "build", "--progress=plain", "-t"]
    assert ["--label", "a=1 2"] == cmd[5:7]
    assert "id=site-ca,src=/etc/ca.pem" in cmd and "--network=none" in cmd and "--no-cache" in cmd
    assert cmd[-1] == "/ctx" and "/ctx/buildkit.Dockerfile" in cmd
    with pytest.raises(BuildError, match="comma"):
        BuildKitBuilder().command(Path("/ctx"), "t", {}, secrets={"site-ca": Path("/a,b.pem")})


# --- against the engine ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _small_packages() -> tuple[Package, ...]:
    from envkit.index.closure import compile_closure

    pins = compile_closure(["numpy==2.1.*", "typing-extensions"], python="3.11", glibc="2.36",
                           index_url="https://pypi.org/simple")
    return tuple(Package(name=p.name, version=p.version, hashes=p.hashes,
                         group="framework" if p.name == "numpy" else "extra") for p in pins)


def small_lock(name: str):
    """The example lock, its image renamed and its packages a small closure (framework fields kept)."""
    lock = load_lock(ROOT / "examples" / "team.lock")
    image = sealed(lock.images[0].model_copy(update={"name": name, "packages": _small_packages()}))
    return lock.model_copy(update={"images": (image,)}), image


def ca_bundle():
    value = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    return Path(value) if value and Path(value).is_file() else None


def collect_created(made: list[str]):
    """A build_from_bundle progress callback recording the images a classic build created (not cache hits)."""
    cached = False

    def progress(said: BuildEvent | str) -> None:
        nonlocal cached
        if not isinstance(said, BuildEvent):  # envkit's own lines (and a build's plan)
            return
        if said.kind == "step":
            cached = said.text.lstrip().startswith("FROM ")  # a FROM step names an image; it makes none
        elif "Using cache" in said.text:
            cached = True
        elif not cached and (m := re.match(r"^ ---> ([0-9a-f]{12})$", said.text)):
            made.append(m.group(1))

    return progress


def remove_images(engine, *refs, created: tuple[str, ...] | list[str] = ()):
    """Remove ``refs`` (forced: they are tags or ids of images a test made), then ``created``
    intermediate images, newest first, and the classic builder's stage images of the removed
    builds (same team, image and lock hash labels), unforced: one still in use by another image
    stays. A lock whose hash changes every run (a test server's random port) would otherwise
    leave its stage images behind on every run."""
    stages: list[str] = []
    for ref in refs:
        try:
            labels = engine.client.images.get(ref).labels or {}
            if all(labels.get(k) for k in (TEAM_LABEL, IMAGE_LABEL, LOCK_LABEL)):
                stages += [i.id for i in engine.client.images.list(filters={"label": [
                    STAGE_LABEL, *(f"{k}={labels[k]}" for k in (TEAM_LABEL, IMAGE_LABEL, LOCK_LABEL))]})]
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass
        try:
            engine.client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass
    for ref in [*reversed(list(created)), *stages]:
        try:
            engine.client.images.remove(ref)
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass


@pytest.fixture(scope="module")
def buildkit(engine):
    bk = BuildKitBuilder(engine)
    if not bk.available():
        pytest.skip(f"BuildKit is not available through {bk.cli}")
    return bk


@pytest.mark.integration
def test_available(buildkit):
    assert buildkit.available()
    assert not BuildKitBuilder(cli="/nonexistent/docker").available()


@pytest.mark.integration
def test_failure_raises_with_the_log_tail(engine, buildkit, tmp_path):
    from envkit.images.base import ensure_base

    base = load_lock(ROOT / "examples" / "team.lock").images[0].base
    ensure_base(engine, base)
    (tmp_path / "Dockerfile").write_text(f"FROM {base.ref}\nRUN echo envkit-was-here; exit 3\n")
    events = []
    with pytest.raises(BuildError) as err:
        for event in buildkit.build(tmp_path, "envkit-test/bk-fail:1", {}):
            events.append(event)
    assert "exit code: 3" in err.value.message
    assert "envkit-was-here" in err.value.hint
    assert any(e.kind == "error" for e in events)


@pytest.mark.integration
@pytest.mark.network
def test_buildkit_build_switch_and_secret(engine, buildkit):
    lock, image = small_lock("bk-small")
    seen: list[BuildEvent | str] = []
    ca = ca_bundle()
    made: list[str] = []
    try:
        built = build_image(engine, lock, image, "team.yaml", ca_bundle=ca, progress=lambda _, e: seen.append(e),
                            verify=False, builder="buildkit")
        made.append(built.image_id)
        assert built.action == "built" and built.image_id.startswith("sha256:")
        steps = [e for e in seen if isinstance(e, BuildEvent) and e.kind == "step"]
        assert any(e.text.startswith("[runtime] RUN") for e in steps)
        numpy = [p.version for p in image.packages if p.name == "numpy"][0]
        run = engine.run(built.tag, ["python3", "-c", "import numpy, typing_extensions; print(numpy.__version__)"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0 and run.stdout.strip() == numpy, run.stderr
        assert not _files_in_layers(engine, built.tag, "site-ca"), "the CA reached a layer"
        # nothing of the installer (uv, its cache mount's mount point, the CA's): only /tmp's own entry
        assert not _files_in_layers(engine, built.tag, "envkit-uv"), "the installer reached a layer"
        assert not _files_in_layers(engine, built.tag, "envkit-ca"), "the CA reached a layer"

        # same lock, same builder: skipped; the other builder: a different context, so a rebuild
        again = build_image(engine, lock, image, "team.yaml", ca_bundle=ca, progress=lambda *_: None, verify=False,
                            builder="buildkit")
        assert again.action == "skipped" and again.image_id == built.image_id
        classic = build_image(engine, lock, image, "team.yaml", ca_bundle=ca, progress=lambda *_: None,
                              verify=False, builder="classic")
        made.append(classic.image_id)
        assert classic.action == "built" and classic.image_id != built.image_id
        # the classic builder gets the CA as a build argument and fetches uv in each step: neither stays
        assert not _files_in_layers(engine, classic.tag, "envkit-uv"), "the installer reached a layer"
        assert not _files_in_layers(engine, classic.tag, "ca.pem"), "the CA reached a layer"
        labels = {i: engine.inspect(i).labels[CONTEXT_LABEL] for i in (built.image_id, classic.image_id)}
        assert len(set(labels.values())) == 2
    finally:
        remove_images(engine, *made)


@pytest.mark.integration
@pytest.mark.network
def test_two_cold_builds_give_the_same_environment_layers(engine, buildkit):
    """BuildKit's install steps make the environment layers from the files alone (docs/images.md, "The same bytes
    from BuildKit"): the same lock built twice from nothing (the image and its OS stage removed, no cache) gives the
    same diff_id for each group's layer and the payload's, while the OS stage's apt layer is the build's own. The
    nightly's build (``keep_os_stage``) keeps ``<tag>-os`` (its OS stage, labelled with its key): the same chain as
    the image's (``--no-cache``: it stands on it; without: on its own os stage, the same layers); any build
    that finds it there builds on it, as a nightly does with the stage it restored: every layer the same chain."""
    lock, image = small_lock("bk-same-bytes")
    built: list[list[str]] = []
    tag = ""
    records = buildcache.records() or set()
    try:
        for _ in range(2):
            outcome = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), progress=lambda *_: None,
                                  verify=False, builder="buildkit", no_cache=True, keep_os_stage=True)  # (nightly's)
            tag = outcome.tag
            assert outcome.action == "built"
            info, os_info = engine.inspect(tag), engine.inspect(f"{tag}-os")
            assert os_info.labels[STAGE_LABEL] == "os" and os_info.labels[OS_KEY_LABEL].startswith("sha256:")
            assert info.layers[:len(os_info.layers)] == os_info.layers and not info.labels.get(STAGE_LABEL)
            built.append(list(info.layers))
            remove_images(engine, tag)  # (and its OS stage: a stage image of the same build)
            assert engine.inspect(f"{tag}-os") is None
        first, second = built
        # framework, extra, payload (and WORKDIR's empty layer) above the OS stage: the same bytes
        assert first[-4:] == second[-4:]
        assert len(first) == len(second) and first[:-4] != second[:-4]  # the apt layer: not the same, yet the same env

        # the nightly's build from nothing but the base: the cache of the two rounds' steps goes too. They stood on
        # <tag>-os (an image); this build's steps stand on its own os stage, other cache keys: from the rounds' cache
        # its os stage would be theirs and its steps would make their layers again, which Docker 20.10 never frees
        buildcache.prune((buildcache.records() or set()) - records)
        said: list[str] = []
        records = buildcache.records() or set()
        outcome = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                              builder="buildkit", keep_os_stage=True,
                              progress=lambda _, e: said.append(str(getattr(e, "text", e))))
        os_id = engine.inspect(f"{tag}-os").id
        engine.client.images.remove(tag, force=True)  # the image gone, its OS stage kept (or restored)
        # and the cache of its steps, as on a runner that restored <tag>-os: BuildKit's records keep the layers, and
        # the steps run again on <tag>-os would make them again, which Docker 20.10 never frees (docs/images.md,
        # "Where Docker 20.10 loses disk space to BuildKit")
        buildcache.prune((buildcache.records() or set()) - records)
        again = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                            builder="buildkit", progress=lambda _, e: said.append(str(getattr(e, "text", e))))
        assert again.action == "built" and any("is on the engine" in s and "not built again" in s for s in said)
        assert engine.inspect(f"{tag}-os").id == os_id and again.diff_ids == outcome.diff_ids
    finally:
        if tag:
            remove_images(engine, tag)


@pytest.mark.integration
@pytest.mark.network
def test_a_nightly_after_a_build_of_the_same_lock_runs_no_step_again(engine, buildkit):
    """`envkit build`, then the nightly's build of the same lock on the same engine (the image gone, as when a test
    or gc removed it): the nightly keeps ``<tag>-os`` for its mirror but builds on its own os stage, so every RUN
    step is BuildKit's cached one; the image always stands on the layers of ``<tag>-os``. Standing on ``<tag>-os``
    ran every step above it again, each making a layer the engine held already, which Docker 20.10 never frees
    (docs/images.md, "Where Docker 20.10 loses disk space to BuildKit")."""
    lock, image = small_lock("bk-then-nightly")
    tag = ""
    try:
        first = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                            builder="buildkit", progress=lambda *_: None)
        tag = first.tag
        engine.client.images.remove(tag, force=True)
        said: list[str] = []
        again = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                            builder="buildkit", keep_os_stage=True,
                            progress=lambda _, e: said.append(str(getattr(e, "text", e))))
        os_info = engine.inspect(f"{tag}-os")
        assert again.action == "built" and os_info is not None
        assert again.diff_ids[:len(os_info.layers)] == os_info.layers  # what the nightly mirrors is under it
        ran = [s for s in said if "] RUN " in s and ": done in " in s]
        if any("other layers than" in s for s in said):
            # BuildKit's cache held two results of the os stage's steps (another test's --no-cache builds) and gave
            # `--target os` one, the image's own stage the other: built again on <tag>-os (its steps may be cached
            # too, from an earlier build on an OS stage of those layers); the environment layers are the same bytes
            assert again.diff_ids[-4:] == first.diff_ids[-4:]
        else:
            assert ran == [] and again.diff_ids == first.diff_ids, ran
    finally:
        if tag:
            remove_images(engine, tag)


def _files_in_layers(engine, ref: str, needle: str) -> list[str]:
    """Paths containing ``needle`` in any layer of ``ref`` (from `docker save`)."""
    data = io.BytesIO(b"".join(engine.client.api.get_image(ref)))
    found = []
    with tarfile.open(fileobj=data) as outer:
        for member in outer.getmembers():
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=outer.extractfile(member)) as layer:
                    found += [n for n in layer.getnames() if needle in n]
    return found
