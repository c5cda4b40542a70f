"""ls, show and run as a researcher meets them: stores that only-reading commands open without changing them."""

import json
import sqlite3

import pytest
from click.testing import CliRunner

from envkit import pipeline
from envkit.cli import main
from envkit.engine import ImageInfo
from envkit.errors import EnvkitError, StoreError
from envkit.store import MIGRATIONS, SCHEMA_VERSION, Store, locate, migrate

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


# --- 7. store paths ----------------------------------------------------------------------------------------

def test_a_directory_is_named_as_one(tmp_path, monkeypatch):
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: pytest.fail("the engine was asked"))
    result = invoke("ls", "--store", tmp_path, "--json")
    assert result.exit_code == 9, result.output
    doc = json.loads(result.stdout)
    assert doc["message"] == f"{tmp_path} is a directory; the history store is a file"
    assert str(tmp_path / "history.sqlite") in doc["hint"]
    from envkit.doctor import store_finding

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


def test_reading_an_older_store_does_not_migrate_it(tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old, isolation_level=None) as db:
        migrate(db, MIGRATIONS[:1])
    before = old.read_bytes()
    with pytest.raises(StoreError, match=f"schema version 1, older than this envkit's \\({SCHEMA_VERSION}\\)"):
        Store.open_existing(old)
    assert old.read_bytes() == before
    with Store.open(old) as store:  # a writer migrates it; then readers read it
        assert store.schema_version == SCHEMA_VERSION
    with Store.open_existing(old) as store:
        assert store.images() == []


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
