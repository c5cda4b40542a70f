import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def write_spec(tmp_path):
    """Write a team.yaml (dedented) into a fresh directory and return its path."""

    def write(text: str, name: str = "team.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


MINIMAL = """
version: 1
team: vision
fleet:
  min_driver: "550.54.15"
  gpus: [A100, H100]
images:
  - name: torch25
    framework: "torch==2.5.*"
"""


# --- PostgreSQL, for the shared history store -------------------------------------------------

@pytest.fixture(scope="session")
def postgres_admin_url():
    """An account on a PostgreSQL server that may create databases (see tests/pgserver.py)."""
    import os

    from tests import pgserver

    try:
        import psycopg  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("psycopg is not installed: pip install -e '.[test]'")
        pytest.skip("psycopg is not installed (pip install -e '.[test]')")
    url = os.environ.get("ENVKIT_TEST_POSTGRES_URL")
    if url:
        pgserver.wait_ready(url, timeout=10)
        yield url
        return
    bindir = pgserver.server_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("no PostgreSQL server binaries: run scripts/ensure-engine.sh (apt-get install postgresql)")
        pytest.skip("no PostgreSQL server (apt-get install postgresql, or set ENVKIT_TEST_POSTGRES_URL)")
    server = pgserver.Server(bindir).start()
    try:
        yield server.admin_url
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_admin_url):
    """The URL of a fresh, empty database, dropped after the test."""
    from tests import pgserver

    name, url = pgserver.create_database(postgres_admin_url)
    yield url
    pgserver.drop_database(postgres_admin_url, name)
