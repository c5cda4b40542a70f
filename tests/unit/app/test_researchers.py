"""ls, show and run as a researcher meets them: a named store that is not there, the certificates show presents
(the ones run's gate weighs), the names ls gives, image references checked with the command line, and stores
that only-reading commands open without changing them."""

import json
import sqlite3

import pytest
from click.testing import CliRunner

from envkit.app import researchers as pipeline
from envkit.cli import main
from envkit.engine.protocol import ImageInfo
from envkit.errors import EnvkitError, StoreError
from envkit.certify.gate import judge
from envkit.registry.remote_parse import check_image_ref
from envkit.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate
from envkit.store.history import Store
from envkit.store.records import locate

TAG = "multi/jax:0.12.0.1-cuda13-py3.13-83521697"
ID = "sha256:" + "1" * 64
LABELS = {"io.envkit.team": "multi", "io.envkit.image": "jax", "io.envkit.lock-hash": "sha256:" + "8" * 64,
          "org.opencontainers.image.version": "0.12.0.1-cuda13-py3.13-83521697"}


def invoke(*args, **env):
    return CliRunner().invoke(main, [str(a) for a in args], env=env or None)


class FakeEngine:
    def __init__(self, images: dict[str, ImageInfo]):
        self.images = images

    def inspect(self, ref):
        return self.images.get(ref)

    def nvidia_runtime(self):
        return False


def info(tags=(TAG,), labels=LABELS, image_id=ID) -> ImageInfo:
    return ImageInfo(id=image_id, tags=tuple(tags), size=1, labels=dict(labels), env={}, user="")


@pytest.fixture
def fake_engine(monkeypatch):
    engine = FakeEngine({TAG: info(), ID: info()})
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine)
    return engine


@pytest.fixture(autouse=True)
def no_store_env(monkeypatch, tmp_path):
    monkeypatch.delenv("ENVKIT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


# --- 1. a store named but not there ----------------------------------------------------------------

@pytest.mark.parametrize("command, after", [(["show", TAG], []), (["run", TAG, "--no-gpus"], ["--", "true"])])
def test_show_and_run_refuse_a_named_store_that_is_not_there(fake_engine, tmp_path, command, after):
    """A typo must not read as "no certificate": exit 9, as ls and gc; by --store or $ENVKIT_STORE. (FakeEngine
    has no ``run``: a run that got past the store would fail otherwise.)"""
    typo = tmp_path / "s1.sqlit"
    for args, env in (([*command, "--store", typo], {}), (command, {"ENVKIT_STORE": str(typo)})):
        result = invoke(*args, "--json", *after, **env)
        assert result.exit_code == 9, result.output
        assert json.loads(result.stdout)["message"] == f"no history store at {typo}"
    assert not typo.exists()


def test_show_without_a_named_store_still_reads_as_no_certificates(fake_engine):
    result = invoke("show", TAG)
    assert result.exit_code == 0 and "next: no certificate yet: certify it on a GPU host" in result.stdout
    assert f"envkit certify {TAG} --gpus" in result.stdout and "IMAGE" not in result.stdout
    assert "certificate: none" in invoke("show", TAG, "--all").stdout
    assert invoke("show", TAG, "--json").exit_code == 0


# --- 2. show presents the certificates the gate weighs ------------------------------------------------

class RemoteView:
    def __init__(self, certs):
        self.certs = certs

    def to_json(self):
        return {"digest": "sha256:" + "d" * 64, "pinned": "127.0.0.1:5000/multi/jax@sha256:" + "d" * 64,
                "compressed_size": 2**20, "layers": 1, "tags": ["x"], "certified_tag": False,
                "certified_digest": None, "certificates": self.certs}


def test_a_local_copy_of_a_registry_image_shows_the_registry_certificates_with_the_stores(tmp_path, monkeypatch):
    ref = "127.0.0.1:5000/multi/jax@sha256:" + "d" * 64
    engine = FakeEngine({ref: info(tags=())})
    registry_cert = {"status": "verified", "gpu_model": "none", "driver": "none", "created_at": "2026-12-01T00:00:00Z",
                     "reasons": [], "source": "registry", "artifact": "127.0.0.1:5000/multi/jax@sha256:" + "e" * 64}
    monkeypatch.setattr("envkit.app.researchers.inspect_remote", lambda *a, **k: RemoteView([registry_cert]))
    db = tmp_path / "h.sqlite"
    with Store.open(db) as store:
        store.record_certificate(ID, "NVIDIA H200", "570.1", status="failed", lock_hash="x",
                                 document={"reasons": ["slow"]})
    doc = pipeline.show_image(engine, ref, str(db))
    assert [(c["source"], c["status"]) for c in doc["certificates"]] == [("store", "failed"), ("registry", "verified")]
    assert doc["registry"]["certificates"] == [registry_cert]
    # the gate rests on the same list, each certificate once
    monkeypatch.setattr("envkit.app.researchers.host_gpus", lambda: ([], None))
    verdict = pipeline.certification_gate(engine, ref, on_gpus=False, store_url=str(db))
    assert verdict.passed and verdict.certificates == [registry_cert]
    # and the human output says it, with its source
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine)
    human = invoke("show", ref, "--store", db, "--all")
    assert human.exit_code == 0, human.output
    assert "certificate: verified on no GPU (2026-12-01T00:00:00Z, registry)" in human.stdout
    assert "certificate: failed on NVIDIA H200" in human.stdout and "certificate: none" not in human.stdout
    assert "on none" not in human.stdout and "driver none" not in human.stdout


def test_a_registry_that_cannot_be_read_leaves_the_stores_certificates(tmp_path, monkeypatch):
    ref = "127.0.0.1:5000/multi/jax:x"
    engine = FakeEngine({ref: info(tags=(ref,))})

    def unreadable(*a, **k):
        raise EnvkitError("registry 127.0.0.1:5000 refused", hint="h")

    monkeypatch.setattr("envkit.app.researchers.inspect_remote", unreadable)
    doc = pipeline.show_image(engine, ref, None)
    assert doc["certificates"] == [] and doc["registry"]["error"] == "registry 127.0.0.1:5000 refused"


# --- 3. the names ls gives ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ref, stack", [
    ("localhost:5000/vision/torch25:2.5.1-cu124-py3.11-515bfe72", "2.5.1-cu124-py3.11-515bfe72"),
    ("vision/torch25:2.5.1-cu124-py3.11-515bfe72", "2.5.1-cu124-py3.11-515bfe72"),
    ("localhost:5000/vision/torch25", None),
    ("localhost:5000/vision/torch25@sha256:" + "a" * 64, None),
    ("sha256:" + "a" * 64, None),
    ("608aaf95fae6", None),
])
def test_the_stack_is_the_tag_never_a_registry_port(ref, stack):
    assert pipeline.stack_of(ref) == stack


def test_ls_names_an_image_certified_by_its_id_or_a_registry_tag_by_its_envkit_tag(tmp_path):
    db = tmp_path / "h.sqlite"
    other = "sha256:" + "2" * 64
    with Store.open(db) as store:
        store.record_certificate(ID, "none", "none", status="verified", lock_hash="x", document={"image": ID})
        store.record_certificate(other, "none", "none", status="verified", lock_hash="y",
                                 document={"image": "localhost:5000/vision/torch25:2.5.1-cu124-py3.11-515bfe72"})
    asked = []

    def engine_of():
        asked.append(1)
        return FakeEngine({ID: info(tags=("localhost:5000/multi/jax:x", TAG))})

    rows = {r["image_id"]: r for r in pipeline.list_images(str(db), engine_of)}
    assert (rows[ID]["tag"], rows[ID]["stack"], rows[ID]["reference"]) == (TAG, TAG.split(":")[1], ID)
    gone = rows[other]  # not in the engine: the reference recorded, its stack read right
    assert (gone["tag"], gone["stack"]) == ("localhost:5000/vision/torch25:2.5.1-cu124-py3.11-515bfe72",
                                            "2.5.1-cu124-py3.11-515bfe72")
    assert asked == [1]
    # no engine at all: the recorded reference; an id has no stack
    rows = {r["image_id"]: r for r in pipeline.list_images(str(db), lambda: None)}
    assert (rows[ID]["tag"], rows[ID]["stack"]) == (ID, None)


def test_the_envkit_tag_comes_from_the_labels_when_the_image_has_no_such_tag():
    assert pipeline.envkit_tag(LABELS, ("localhost:5000/multi/jax:x",)) == TAG
    assert pipeline.envkit_tag(LABELS, (TAG, "multi/jax:other")) == "multi/jax:0.12.0.1-cuda13-py3.13-83521697"
    assert pipeline.envkit_tag({"org.opencontainers.image.version": "1"}, ("a:b",)) is None


def test_ls_asks_no_engine_when_the_store_knows_no_image(tmp_path):
    db = tmp_path / "h.sqlite"
    Store.open(db).close()
    assert pipeline.list_images(str(db), lambda: pytest.fail("asked the engine for nothing")) == []


# --- 4. image references, with the command line ---------------------------------------------------------

@pytest.mark.parametrize("ref, said", [
    ("UPPER/Case:tag", "repository names are lower case ('UPPER')"),
    ("a b", "it contains whitespace"),
    ("::", "the tag after ':' is empty"),
    ("a" * 300, "the name is 300 characters long; Docker allows at most 255"),
    ("tørch:1", "'ø' is not allowed (references are ASCII)"),
    ("a//b", "a part of the name is empty"),
    ("-a:1", "'-a' is not a name part"),
    ("a:-x", "the tag '-x' is not 1-128 of"),
    ("a@sha256:zz", "the digest 'sha256:zz' is not ALGORITHM:HEX"),
    ("bad_host:99/a", "the registry host 'bad_host:99' is not host[:port]"),
    ("127.0.0.1:99999/a", "the registry port 99999 is outside 1-65535"),
    ("a.b-.c/x", "a label of the registry host ('b-') begins or ends with '-'"),
    ("x-/y", "'x-' is not a name part"),
    ("reg.example.com:5000/a..b:1", "'a..b' is not a name part"),
])
def test_a_malformed_reference_is_named_with_what_is_wrong(ref, said):
    with pytest.raises(EnvkitError) as err:
        check_image_ref(ref)
    assert said in err.value.message and err.value.message.startswith("bad image reference ")


@pytest.mark.parametrize("ref", ["vision/torch25:2.5.1-cu124-py3.11-515bfe72", "sha256:" + "0" * 64, "608aaf95fae6",
                                 "localhost:5000/a/b:t", "Registry.Example.COM:443/a/b_c__d-e:T_1.x",
                                 "a@sha256:" + "f" * 64, "[::1]:5000/a:b", "ubuntu"])
def test_well_formed_references_pass(ref):
    check_image_ref(ref)


@pytest.mark.parametrize("command", ["verify", "certify", "show", "run"])
@pytest.mark.parametrize("ref", ["UPPER/Case:tag", "a b", "::", "x" * 300, "tørch"])
def test_every_command_taking_an_image_refuses_a_malformed_one_as_usage(command, ref, monkeypatch):
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: pytest.fail("the engine was asked"))
    result = invoke(command, ref, "--json")
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "UsageError" and "bad image reference" in doc["message"]


def test_an_image_without_python3_fails_verification_not_the_engine():
    """The engine's 'exec: "python3": executable file not found' is the image's fault: exit 8, saying so."""
    from envkit.payload.harness import run_payload
    from envkit.errors import CommandNotFoundError, VerificationError

    class NoPython:
        def run(self, ref, command, options):
            raise CommandNotFoundError(f"{ref} has no 'python3' to run (exec: ...)", command="python3")

    with pytest.raises(VerificationError) as err:
        run_payload(NoPython(), "t/i:1", {})
    assert err.value.exit_code == 8 and err.value.message.startswith("t/i:1 has no python3")


def test_verify_names_an_image_envkit_did_not_build_with_a_hint(monkeypatch):
    engine = FakeEngine({"debian:12": info(tags=("debian:12",), labels={})})
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine)
    result = invoke("verify", "debian:12", "--json")
    assert result.exit_code == 8
    doc = json.loads(result.stdout)
    assert "was not built by envkit" in doc["message"] and "envkit build team.yaml" in doc["hint"]


def test_run_on_an_image_envkit_did_not_build_points_at_an_envkit_image_not_at_certify():
    verdict = judge([], [], on_gpus=False, image="debian:12", envkit_built=False)
    assert not verdict.passed and "envkit certify" not in verdict.hint and "cannot be certified" in verdict.hint
    assert "envkit certify debian:12" in judge([], [], on_gpus=False, image="debian:12").hint


def test_the_gate_knows_an_image_without_envkit_labels(monkeypatch):
    engine = FakeEngine({"debian:12": info(tags=("debian:12",), labels={})})
    monkeypatch.setattr("envkit.app.researchers.host_gpus", lambda: ([], None))
    verdict = pipeline.certification_gate(engine, "debian:12", on_gpus=False, store_url=None)
    assert "cannot be certified" in verdict.hint


# --- 7. store paths ----------------------------------------------------------------------------------------

def test_a_directory_is_named_as_one(tmp_path, monkeypatch):
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: pytest.fail("the engine was asked"))
    result = invoke("ls", "--store", tmp_path, "--json")
    assert result.exit_code == 9, result.output
    doc = json.loads(result.stdout)
    assert doc["message"] == f"{tmp_path} is a directory; the history store is a file"
    assert str(tmp_path / "history.sqlite") in doc["hint"]
    from envkit.ops.doctor import store_finding

    finding = store_finding(str(tmp_path))
    assert finding.status == "fail" and "is a directory" in finding.value and "disk I/O" not in finding.value
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path)


@pytest.mark.parametrize("command", [["ls"], ["show", TAG], ["run", TAG], ["gc"], ["doctor"],
                                     ["certify", TAG], ["nightly", "team.yaml"]])
def test_an_empty_store_is_a_usage_error(command, monkeypatch):
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: pytest.fail("the engine was asked"))
    result = invoke(*command, "--store", "", "--json")
    assert result.exit_code == 2, result.output
    assert "the history store is named by an empty value" in json.loads(result.stdout)["message"]
    with pytest.raises(StoreError):
        locate("")


def test_reading_a_zero_byte_file_leaves_it_as_it_was(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    result = invoke("ls", "--store", empty, "--json")
    assert result.exit_code == 9
    assert json.loads(result.stdout)["message"] == f"{empty} is not an envkit history store (an empty file)"
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]


def test_reading_an_older_store_upgrades_it_and_one_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    """An older envkit's store is migrated by a reader too (refusing it would fail `ls` after every upgrade until
    the next certify); where this user may not write it, the error says so and who can upgrade it."""
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old, isolation_level=None) as db:
        migrate(db, MIGRATIONS[:1])
    frozen = tmp_path / "frozen.sqlite"
    frozen.write_bytes(old.read_bytes())
    with Store.open_existing(old) as store:
        assert store.schema_version == SCHEMA_VERSION and store.images() == []
    def refused(*args, **kwargs):  # as for a user who may read the file, not write it (root writes it anyway)
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(Store, "open", refused)
    with pytest.raises(StoreError, match=f"schema version 1, older than this envkit's \\({SCHEMA_VERSION}\\), "
                                         "and it cannot be upgraded here: attempt to write a readonly database"):
        Store.open_existing(frozen)


def test_a_file_that_is_not_sqlite_is_named(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database, but long enough to have a header " * 4)
    with pytest.raises(StoreError, match="is not an envkit history database"):
        Store.open_existing(text)
    assert text.read_text().startswith("not a database")


def test_the_help_says_how_to_write_an_absolute_sqlite_url():
    from envkit.cli.common import STORE_HELP

    assert "sqlite:////absolute/path" in STORE_HELP and "sqlite:///relative/path" in STORE_HELP
    assert locate("sqlite:////tmp/x.sqlite").path.is_absolute() and not locate("sqlite:///tmp/x").path.is_absolute()
