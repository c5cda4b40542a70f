"""`envkit nightly` on the real engine and a real registry: builds only what changed,
verifies, pushes, promotes only certified images, remembers, and survives SIGKILL.

The nightly spec is the example team with a different extra package, locked from the
committed example lock (same framework closure), so its image shares the framework layer
with the example image and builds in a fraction of a cold build.
"""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import docker.errors
import pytest

from envkit.catalog.files import load_catalog
from envkit.index.closure import Pin, compile_closure
from envkit.support.labels import CONTAINER_LABEL, CONTEXT_LABEL, TEAM_LABEL
from envkit.lock import Package, load_lock, sealed, write_lock
from envkit.render.files import image_tag
from envkit.resolve.plan import spec_digest
from envkit.spec import load_spec
from envkit.registry.artifacts import read_certificate
from envkit.store.history import Store
from tests.integration.conftest import ROOT
from tests.integration.published import untag_registry_refs
from tests.integration.registry import registry  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

SPEC = """\
version: 1
team: nightly
fleet:
  min_driver: "550.54.15"
  gpus: [A100, H100, L40S]
  policy: minor
defaults:
  base:
    bootstrap: {suite: bookworm, mirror: "http://deb.debian.org/debian"}
images:
  - name: torch25
    framework: "torch==2.5.*"
    pip: ["numpy==2.0.*"]
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, example_build, engine):
    """A spec + a current lock for it (the example's framework closure, numpy 2.0)."""
    root = tmp_path_factory.mktemp("nightly")
    spec_path = root / "team.yaml"
    spec_path.write_text(SPEC)
    example = load_lock(ROOT / "examples" / "team.lock").images[0]
    framework = [p for p in example.packages if p.group == "framework"]
    pins = compile_closure([f"torch=={example.framework_version}", "numpy==2.0.*"], python="3.11", glibc="2.36",
                           index_url=example.index_url, constraints=[Pin(p.name, p.version, p.hashes) for p in framework])
    extras = [Package(name=p.name, version=p.version, hashes=p.hashes, group="extra")
              for p in pins if p.name not in {f.name for f in framework}]
    image = sealed(example.model_copy(update={"packages": tuple(framework + extras), "decisions": ()}))
    spec = load_spec(spec_path)
    lock = load_lock(ROOT / "examples" / "team.lock").model_copy(update={
        "team": "nightly", "spec_digest": spec_digest(spec), "catalog_digest": load_catalog().digest,
        "images": (image,)})
    write_lock(lock, root / "team.lock")
    yield root, image_tag("nightly", image)
    # the certification containers the SIGKILL tests' runs left (`envkit gc` would remove them once stopped), and
    # the image the last test built (left behind after every run before)
    remove_image(engine, image_tag("nightly", image))


def nightly(root: Path, store: str, *extra, check_code=None, background=False):
    """``envkit nightly`` as a user runs it; ``store`` is a file under ``root`` or a database URL."""
    where = store if "://" in store else str(root / store)
    reports = root / f"reports-{store.rsplit('/', 1)[-1]}"
    args = [sys.executable, "-m", "envkit.cli", "nightly", str(root / "team.yaml"), "--locked", "--no-gpus",
            "--store", where, "--reports", str(reports), "--out", str(root / "out"),
            "--json", *map(str, extra)]
    if background:  # killed: its temporary directories (no clean-up runs) stay under root, not in /tmp
        (root / "tmp").mkdir(exist_ok=True)
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, TMPDIR=str(root / "tmp")))
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if check_code is not None:
        assert proc.returncode == check_code, proc.stderr[-3000:]
    return proc


def remove_image(engine, tag):
    """The build gone, as on a fresh runner: its tag and its OS stage (``<tag>-os``), and every untagged build of
    team 'nightly' (a container from a killed run keeps a force-removed image, untagged; its layers would make the
    next build a cache hit so short that no test could stop it midway). The OS stage goes too: a nightly that finds
    it stands on it, so its steps would not be the ones BuildKit cached for the example image, and their layers,
    the example's again, would be lost to the engine (docs/images.md, "Where Docker 20.10 loses disk space to
    BuildKit"); one that does not rebuilds it from BuildKit's cache in a second."""
    client = engine.client
    for c in client.containers.list(all=True, filters={"label": [CONTAINER_LABEL, f"{TEAM_LABEL}=nightly"]}):
        c.remove(force=True)
    for ref in (tag, f"{tag}-os"):
        try:
            client.images.remove(ref, force=True)
        except docker.errors.ImageNotFound:
            pass
    for image in client.images.list(filters={"label": [f"{TEAM_LABEL}=nightly", CONTEXT_LABEL], "dangling": True}):
        try:
            client.images.remove(image.id, force=True)
        except docker.errors.APIError:
            pass  # gone meanwhile


def test_nightly_builds_verifies_and_then_has_nothing_to_do(workspace, engine):
    root, tag = workspace
    remove_image(engine, tag)
    first = nightly(root, "a.sqlite", check_code=0)
    doc = json.loads(first.stdout)
    [img] = doc["images"]
    assert img["build"] == "built" and img["status"] == "verified"
    for kind in ("json", "junit", "html"):
        assert Path(doc["reports"][kind]).is_file()

    started = time.monotonic()
    second = nightly(root, "a.sqlite", check_code=10)
    elapsed = time.monotonic() - started
    doc2 = json.loads(second.stdout)
    assert doc2["outcome"] == "nothing to do"
    assert doc2["images"][0]["build"] == "skipped" and not doc2["images"][0]["worked"]
    made, kept = img["layers_built"], doc2["images"][0]["layers_built"]  # (the build's: the builder's cache decides)
    assert made["layers"] and made["built"] + made["present"] == len(made["layers"])
    assert {x["outcome"] for x in kept["layers"]} == {"reused"} and kept["built_bytes"] == 0
    assert elapsed < 30, f"an unchanged nightly took {elapsed:.1f}s"
    with Store.open(root / "a.sqlite") as store:
        snap = store.snapshot()
    assert len(snap["builds"]) == 1 and len(snap["certificates"]) == 1 and snap["pushes"] == []



def test_nightly_gc_reclaims_older_builds_of_the_team_and_never_the_lock_it_ran(workspace, engine, tmp_path):
    """`--gc --keep 1`: two older builds of team nightly's image (small stand-ins with envkit's build labels,
    made after the real one, so newer by creation time) are judged as `envkit gc` judges them, except that
    the build of the lock the nightly just ran is kept whatever its age."""
    from envkit.support.labels import IMAGE_LABEL, LOCK_LABEL

    root, tag = workspace
    nightly(root, "gc.sqlite")  # the lock's build exists (built here if no earlier test left it), before the others
    client = engine.client
    base = next(t for i in client.images.list(name="envkit-base/debian") for t in i.tags)
    stand_ins = []
    for n in (1, 2):
        ctx = tmp_path / f"old-{n}"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text(f"FROM {base}\nRUN echo nightly-gc-{n}-{time.time_ns()} > /id\n")
        labels = {TEAM_LABEL: "nightly", IMAGE_LABEL: "torch25", LOCK_LABEL: f"sha256:{n:064x}",
                  CONTEXT_LABEL: f"sha256:{n + 1000:064x}"}
        for _ in engine.build(ctx, f"nightly/torch25:gc-stand-in-{n}", labels):
            pass
        stand_ins.append(engine.inspect(f"nightly/torch25:gc-stand-in-{n}").id)
        time.sleep(1.1)  # creation times a second apart: the second is the newest build
    try:
        proc = nightly(root, "gc.sqlite", "--gc", "--keep", "1")
        assert proc.returncode in (0, 10), proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        current = engine.inspect(tag)
        assert current is not None  # the lock's build: kept although two builds are newer
        kept = {d["id"]: d["reasons"] for d in doc["gc"]["images"] if d["keep"]}
        assert f"the build of the lock this nightly ran ({tag})" in kept[current.id]
        assert kept[stand_ins[1]][0].startswith("one of the 1 newest builds of ")
        assert stand_ins[0] in doc["gc"]["removed"] and engine.inspect(stand_ins[0]) is None
        # (with any untagged build of team nightly an earlier run left: gc's rules, on this engine)
        assert re.search(r"gc: removed [1-9]\d* image\(s\) of team nightly, [\d.]+ (B|kB|MB|GB)", proc.stderr), proc.stderr
    finally:
        for ref in stand_ins:
            try:
                client.images.remove(ref, force=True)
            except docker.errors.ImageNotFound:
                pass

def test_publish_step_pushes_stack_and_promotes_only_certified(tmp_path, engine, registry):  # noqa: F811
    """nightly's publish step against the real registry, on the small base image (a CUDA
    image would take minutes to compress and push; the step is the same code)."""
    from envkit.app.nightly import ImageReport
    from envkit.app.nightly_publish import _publish

    base = load_lock(ROOT / "examples" / "team.lock").images[0].base.ref
    info = engine.inspect(base)
    lock = load_lock(ROOT / "examples" / "team.lock").model_copy(update={"team": "pubtest"})
    image = lock.images[0]
    local = "pubtest/base:stack1"
    engine.tag(info.id, local)
    with Store.open(tmp_path / "s.sqlite") as store:
        run_id = store.start_run("sha256:test")
        report = ImageReport(image.name, local, status="verified")
        _publish(engine, store, run_id, lock, image, report, info, registry.host, lambda _: None)
        assert report.publish_error is None and len(report.pushed) == 2  # the stack tag and the base mirror
        pushed = report.to_json()["layers_pushed"]  # a fresh registry: every layer uploaded, with its bytes
        assert [(x["diff_id"], x["outcome"]) for x in pushed["layers"]] == [(d, "uploaded") for d in info.layers]
        assert pushed["pushed_bytes"] == sum(x["bytes"] for x in pushed["layers"]) > 0 and pushed["present"] == 0
        [mirror] = store.mirrors_for(image.base.ref)
        assert "@sha256:" in mirror and mirror.startswith(registry.host)
        repo = f"pubtest/{image.name}"
        assert registry.manifest_digest(repo, "stack1") is not None
        assert registry.manifest_digest(repo, "certified") is None  # verified is not certified
        report = ImageReport(image.name, local, status="certified")
        cert = _certificate(local, info.id)
        _publish(engine, store, run_id, lock, image, report, info, registry.host, lambda _: None, cert)
        again = report.layers_pushed  # the stack tag holds the image already: nothing sent, every layer present
        assert again is not None and again["pushed_bytes"] == 0 and again["present_bytes"] == pushed["pushed_bytes"]
        assert [x["outcome"] for x in again["layers"]] == ["present"] * len(info.layers)
        assert registry.manifest_digest(repo, "certified") == registry.manifest_digest(repo, "stack1")
        attached = read_certificate(engine, f"{registry.host}/{repo}", "stack1", "nvidia-h200")
        assert json.loads(attached) == json.loads(cert.to_bytes())
        kinds = sorted(p.tag_kind for p in store.pushes_for(info.id))
        assert kinds == ["certified", "stack"]
        report = ImageReport(image.name, local, status="certified")
        _publish(engine, store, run_id, lock, image, report, info, registry.host, lambda _: None)
        assert report.pushed == []  # already published: nothing to do
    engine.client.images.remove(local)
    untag_registry_refs(engine.client, registry.host)


def test_stopped_registry_fails_clearly_and_records_no_push(workspace, engine, registry):  # noqa: F811
    root, tag = workspace
    registry.stop()
    try:
        proc = nightly(root, "b.sqlite", "--registry", registry.host, check_code=14)
    finally:
        registry.start()
    doc = json.loads(proc.stdout)
    error = doc["images"][0]["publish_error"]
    assert registry.host in error and ("unpushed" in error or "unpromoted" in error)
    assert engine.inspect(tag) is not None  # the image is still local
    with Store.open(root / "b.sqlite") as store:
        assert store.snapshot()["pushes"] == []


def test_publish_step_signs_with_a_signing_key_and_signs_what_it_published_unsigned(tmp_path, engine,
                                                                                      registry):  # noqa: F811
    """nightly --signing-key: the pushed image's cosign signature and its certificate as a signed attestation, checked
    by the spec verifier; an image published unsigned by an earlier run is signed by the first signing run
    (migration), and a further run adds nothing."""
    import requests

    from envkit.app.nightly import ImageReport
    from envkit.app.nightly_publish import _publish
    from envkit.registry.signatures import att_tag, sig_tag
    from tests import speccheck
    from tests.integration.published import keypair

    base = load_lock(ROOT / "examples" / "team.lock").images[0].base.ref
    info = engine.inspect(base)
    lock = load_lock(ROOT / "examples" / "team.lock").model_copy(update={"team": "signtest"})
    image = lock.images[0]
    local = "signtest/base:stack1"
    engine.tag(info.id, local)
    key, public = keypair()
    repo = f"signtest/{image.name}"
    with Store.open(tmp_path / "s.sqlite") as store:
        run_id = store.start_run("sha256:test")
        cert = _certificate(local, info.id)
        _publish(engine, store, run_id, lock, image, ImageReport(image.name, local, status="certified"), info,
                 registry.host, lambda _: None, cert)  # an earlier, unsigned run
        digest = registry.manifest_digest(repo, "stack1")
        assert digest and registry.manifest_digest(repo, sig_tag(digest)) is None
        report = ImageReport(image.name, local, status="certified")
        _publish(engine, store, run_id, lock, image, report, info, registry.host, lambda _: None, cert, None, key)
        assert report.publish_error is None and len(report.pushed) == 2  # the .sig and the .att manifests
        url, accept = f"http://{registry.host}/v2/{repo}", {"Accept": "application/vnd.oci.image.manifest.v1+json"}
        sig = requests.get(f"{url}/manifests/{sig_tag(digest)}", headers=accept, timeout=10).json()
        layer = sig["layers"][0]
        speccheck.check_signature_layer(sig, requests.get(f"{url}/blobs/{layer['digest']}", timeout=10).content,
                                        layer, public.read_bytes(), digest)
        att = requests.get(f"{url}/manifests/{att_tag(digest)}", headers=accept, timeout=10).json()
        envelope = requests.get(f"{url}/blobs/{att['layers'][0]['digest']}", timeout=10).content
        statement = speccheck.check_envelope(envelope, public.read_bytes(), digest)
        assert statement["predicate"] == json.loads(cert.to_bytes())
        report = ImageReport(image.name, local, status="certified")
        _publish(engine, store, run_id, lock, image, report, info, registry.host, lambda _: None, cert, None, key)
        assert report.pushed == [] and report.publish_error is None  # signed already: nothing added
        again = requests.get(f"{url}/manifests/{att_tag(digest)}", headers=accept, timeout=10).json()
        assert len(again["layers"]) == 1
    engine.client.images.remove(local)
    untag_registry_refs(engine.client, registry.host)


def _certificate(tag: str, image_id: str):
    """A certificate built from faked device facts (only its round trip through the registry matters here)."""
    from envkit.certify.certificate import certificate_from

    checks = [{"name": n, "status": "passed", "value": None, "message": "ok"}
              for n in ("cuda_available", "arch_covered", "cuda_train_step")]
    facts = {"gpus": [{"index": 0, "name": "NVIDIA H200", "cc": "9.0"}], "driver": "570.124.06"}
    doc = {"schema": "envkit.payload/1", "status": "certified", "facts": facts, "checks": checks}
    return certificate_from(doc, {"arch_list": ["sm_90"], "driver_floor": "525.60.13"}, image=tag,
                            image_id=image_id, lock_hash="sha256:x", gpu_requested=True,
                            created_at="2026-12-02T00:00:00Z", envkit_version="test")


def _normalized(path: Path) -> dict:
    with Store.open(path) as store:
        snap = store.snapshot()
    for row in snap["builds"]:
        row.pop("image_id"), row.pop("size")
    certs = []
    for c in snap["certificates"]:
        doc = c["document"]
        certs.append({"status": c["status"], "gpu_model": c["gpu_model"], "driver": c["driver"],
                      "reasons": doc["reasons"], "checks": sorted((k["name"], k["status"]) for k in doc["checks"])})
    snap["certificates"] = certs
    snap["runs"] = [{k: v for k, v in r.items() if k in ("status", "exit_code")} for r in snap.get("runs", [])]
    return snap


def _step_is(db: Path, step: str, state: str) -> bool:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        return conn.execute("SELECT 1 FROM steps WHERE step = ? AND state = ?", (step, state)).fetchone() is not None


def _wait_for_step(db: Path, step: str, proc, timeout=900, *, run_may_end=False) -> bool:
    """Wait until ``step`` has started (or, being quick, already finished). False when the run ended
    first and ``run_may_end``: a build the engine's cache answers at once can start and finish, and the
    whole run with it, between two looks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = proc.poll() is not None
        if db.exists():
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                    if conn.execute("SELECT 1 FROM steps WHERE step = ? AND state IN ('started', 'done')",
                                    (step,)).fetchone():
                        return not ended
            except sqlite3.OperationalError:
                pass
        if ended:
            assert run_may_end, f"nightly ended before step {step}: {proc.stderr.read()[-2000:]}"
            return False
        time.sleep(0.05)
    raise AssertionError(f"step {step} never started")


def test_sigkill_during_build_and_certification_then_rerun_matches_uninterrupted(workspace, engine):
    root, tag = workspace
    # the uninterrupted reference
    remove_image(engine, tag)
    nightly(root, "ref.sqlite", check_code=0)
    # killed during the build, then during certification, then left to finish
    db = root / "killed.sqlite"
    for attempt in range(3):
        remove_image(engine, tag)
        db.unlink(missing_ok=True)
        proc = nightly(root, "killed.sqlite", background=True)
        # at once: on an engine that has built this image before, the build takes about a second (BuildKit's
        # cache keeps every step, whatever `remove_image` removed) and the CPU verification two more
        if _wait_for_step(db, "build", proc, run_may_end=True):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if not _step_is(db, "certify", "done"):
            break  # the kill came before the certificate: the resume has certification to do
    else:
        pytest.fail("three runs finished their certification before the kill that followed the build's start")
    proc = nightly(root, "killed.sqlite", background=True)
    _wait_for_step(db, "certify", proc)
    time.sleep(1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    final = nightly(root, "killed.sqlite", check_code=0)
    assert json.loads(final.stdout)["resumed"] is True
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert _normalized(db) == _normalized(root / "ref.sqlite")


def test_sigterm_during_certification_exits_143_and_the_next_run_resumes(workspace, engine):
    """A cancelled CI job (SIGTERM): the nightly unwinds (its certification container removed, no
    certificate recorded), exits 143 with an error document, and the next run finishes its work."""
    root, tag = workspace
    nightly(root, "term.sqlite", check_code=0)  # built and certified once: the image is here
    remove_image(engine, tag)
    db = root / "term2.sqlite"
    (root / "tmp").mkdir(exist_ok=True)
    before = set((root / "tmp").iterdir())  # what the SIGKILLed runs of other tests left
    proc = nightly(root, "term2.sqlite", background=True)
    _wait_for_step(db, "certify", proc)
    deadline = time.monotonic() + 120
    while not engine.client.containers.list(filters={"label": [CONTAINER_LABEL, f"{TEAM_LABEL}=nightly"]}):
        assert time.monotonic() < deadline and proc.poll() is None, "the certification container never ran"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert json.loads(out)["signal"] == "SIGTERM"
    assert engine.client.containers.list(all=True, filters={"label": [CONTAINER_LABEL, f"{TEAM_LABEL}=nightly"]}) == []
    assert set((root / "tmp").iterdir()) == before  # its payload directory went with it
    with Store.open(db) as store:
        snap = store.snapshot()
    assert snap["certificates"] == [] and [r["status"] for r in snap["runs"]] == ["running"]  # unfinished
    final = nightly(root, "term2.sqlite", check_code=0)
    doc = json.loads(final.stdout)
    assert doc["resumed"] is True and doc["images"][0]["status"] == "verified"


def _wait_for_pg_step(url: str, step: str, proc, timeout=900):
    import psycopg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"nightly ended before step {step}: {proc.stderr.read()[-2000:]}"
        with psycopg.connect(url) as conn:
            if conn.execute("SELECT to_regclass('steps')").fetchone()[0] and conn.execute(
                    "SELECT 1 FROM steps WHERE step = %s AND state = 'started'", (step,)).fetchone():
                return
        time.sleep(0.1)
    raise AssertionError(f"step {step} never started")


LOCK_HOLDER = """
import sys, time
from envkit.store.history import Store
store = Store.open(sys.argv[1])
with store.run_lock("nightly:nightly", "the nightly run of team 'nightly'"):
    print("holding", flush=True)
    time.sleep(600)
"""


def test_shared_postgres_store_locks_out_a_second_runner_and_resumes_after_sigkill(workspace, engine,
                                                                                     postgres_url):
    """Two CI runners sharing one PostgreSQL history: while one holds the team's run, another
    is turned away naming it; a runner killed mid-build leaves no lock behind and the next run
    resumes its work; then there is nothing to do."""
    root, tag = workspace
    # runner A holds the team's run (deterministic, unlike racing a build that may come from cache)
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, postgres_url], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "holding"
        turned_away = nightly(root, postgres_url, check_code=15)
        err = json.loads(turned_away.stdout)
        assert err["error"] == "RunInProgressError"
        assert "the nightly run of team 'nightly' is already running against" in err["message"]
        assert f"envkit pid {holder.pid}" in err["message"] and ":***@" not in err["message"]
        assert holder.poll() is None  # runner A was not disturbed
    finally:
        holder.kill()  # SIGKILL: its connection, and with it the lock, goes
        holder.wait()
    with Store.open(postgres_url) as store:
        assert store.snapshot()["runs"] == []  # the turned-away runner started no run

    remove_image(engine, tag)
    first = nightly(root, postgres_url, background=True)
    try:
        _wait_for_pg_step(postgres_url, "build", first)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    resumed = nightly(root, postgres_url, check_code=0)  # the killed run's lock went with its connection
    doc = json.loads(resumed.stdout)
    assert doc["resumed"] is True and doc["images"][0]["build"] == "built"
    nightly(root, postgres_url, check_code=10)
    with Store.open(postgres_url) as store:
        snap = store.snapshot()
    assert sorted((r["status"], r["exit_code"]) for r in snap["runs"]) == [("nothing to do", 10), ("passed", 0)]
    assert len(snap["builds"]) == 1 and len(snap["certificates"]) == 1
    assert {(s["step"], s["state"]) for s in snap["steps"]} >= {("build", "done"), ("certify", "done")}


def test_a_runner_without_the_base_restores_it_from_the_team_mirror(tmp_path, engine, registry,  # noqa: F811
                                                                     postgres_url):
    """Runner A mirrors its base into the team registry, recorded in the shared store; runner B,
    whose engine lacks that base, gets the very same base back by digest (no upstream, no new
    bootstrap), and a mirror that no longer answers is reported, not fatal."""
    import tarfile
    import uuid

    from envkit.app.nightly import ImageReport
    from envkit.app.nightly_publish import _mirror_base, restore_base

    nonce = uuid.uuid4().hex[:12]
    rootfs = tmp_path / "rootfs" / "etc"
    rootfs.mkdir(parents=True)
    (rootfs / "os-release").write_text(f"ID=envkit-test\nNONCE={nonce}\n")
    tarball = tmp_path / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(tmp_path / "rootfs", arcname=".")
    ref = f"envkit-test/base:tiny-{nonce}"  # a throwaway base: removing it disturbs no other image
    base = engine.import_rootfs(tarball, ref, {})
    lock = load_lock(ROOT / "examples" / "team.lock").model_copy(update={"team": "mirrortest"})
    image = lock.images[0].model_copy(update={"base": lock.images[0].base.model_copy(update={"ref": ref})})
    said: list[str] = []
    try:
        with Store.open(postgres_url) as store:
            report = ImageReport(image.name, "unused", status="verified")
            _mirror_base(engine, store, lock, image, registry.host, report)
            [pinned] = store.mirrors_for(ref)
            assert report.pushed == [pinned] and pinned.startswith(f"{registry.host}/mirrortest/base-")
            again = ImageReport(image.name, "unused", status="verified")
            _mirror_base(engine, store, lock, image, registry.host, again)
            assert again.pushed == [] and store.mirrors_for(ref) == [pinned]  # that base is mirrored already

            engine.client.images.remove(base.id, force=True)  # runner B: a fresh engine
            assert engine.inspect(ref) is None
            assert restore_base(engine, store, image, said.append) == pinned
            assert engine.inspect(ref).id == base.id  # the very same base, by content
            assert restore_base(engine, store, image) is None  # present: left alone

            gone = f"envkit-test/base:gone-{nonce}"
            store.record_mirror(gone, "127.0.0.1:1/mirrortest/base-x@sha256:" + "0" * 64)
            lost = image.model_copy(update={"base": image.base.model_copy(update={"ref": gone})})
            assert restore_base(engine, store, lost, said.append) is None
            assert any("did not answer" in line and "127.0.0.1:1" in line for line in said)
    finally:
        try:
            engine.client.images.remove(base.id, force=True)
        except Exception:
            pass
