import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`): cold, most
# of its time is image builds, and two at a time overlap one's downloads with the other's installs. Integration tests
# that share an image stay on one worker (one xdist group), so each image is built once and no worker removes what
# the other is using:
# - "frameworks": examples/frameworks.yaml's images (jax, tf, torch 2.14) and their devel flavours (tests/stacks);
# - "torch25": examples/team.yaml's image (``example_build``, ``built_images``) and the tests that look inside it;
# - "registry": the modules that push and pull small images through a local registry: they share image names
#   (``published.py``, ``test_registry_auth.tiny``) and remove them when they end;
# - "private_index": test_private_index and test_index_login, which shares its locks;
# - every other integration module is a group of its own (its module-scoped registry or engine started once). Those
#   that build small locks give each lock a name of its own (``test_buildkit.small_lock``,
#   ``test_reproducible.lock_with``), so their tags differ, and pins no other module's image has where reuse matters.
# The workers take one group at a time from a queue, whoever runs out of work first: the groups in ``LONGEST_FIRST``
# (each's cold time measured 2026-12-07, longest first, so that no long group starts last), then the other modules,
# then the unit tests. With two fixed groups instead ("torch25" then held every module but the frameworks'), one
# worker sat idle for the last 20 of 44 minutes of a cold run. Not on three workers: measured cold (with one group
# per framework image), `-n 3` took 33.3 min of pytest against 29.9 on two, every build slower beside two others on
# 2 cores.
FRAMEWORK_MODULES = {"test_bundle_jax", "test_bundle_tf", "test_jax", "test_tensorflow"}
EXAMPLE_MODULES = {"test_devel", "test_examples", "test_fleet", "test_interrupt", "test_layers", "test_nightly",
                   "test_payload_image", "test_pipeline"}
REGISTRY_MODULES = {"test_prune", "test_publish", "test_registry_auth", "test_registry_checks", "test_registry_mtls",
                    "test_remote", "test_researcher_quickstart", "test_researchers_live", "test_trust_attestations",
                    "test_trust_tamper"}
SHARED = {"test_index_login": "private_index"}
# cold minutes: 16.0, 8.7, 5.5, 4.9, 4.0, 3.6, 3.1, 2.9, 2.8, 2.1, 2.1, 1.1
LONGEST_FIRST = ("frameworks", "torch25", "build_host_failures", "reproducible", "bundle_reproducible", "registry",
                 "bundle", "private_index", "reproducible_devel", "buildkit", "bootstrap_progress", "team_stacks")


def xdist_group(item) -> str | None:
    """The worker group of a collected test (None: any worker)."""
    path = Path(str(item.fspath))
    if path.parent.name != "integration":
        return None
    stack = getattr(getattr(item, "callspec", None), "params", {}).get("name")
    if path.stem == "test_stacks" and stack is not None:  # a test stack: the group of its spec's images
        from tests.integration.stacks import load_stack

        return "frameworks" if load_stack(stack).spec.stem == "frameworks" else "torch25"
    spec = getattr(getattr(item, "callspec", None), "params", {}).get("spec")
    if path.stem in FRAMEWORK_MODULES or (spec is not None and Path(spec).stem == "frameworks"):
        return "frameworks"  # (test_examples: per example image)
    if path.stem in EXAMPLE_MODULES:
        return "torch25"
    if path.stem in REGISTRY_MODULES:
        return "registry"
    return SHARED.get(path.stem, path.stem.removeprefix("test_"))


def dispatch_rank(item) -> int:
    """Where a test's group stands in the queue the workers take from: the groups of ``LONGEST_FIRST`` in its
    order, then the other integration modules, then the unit tests (a stable sort keeps the collection order within
    each)."""
    group = xdist_group(item)
    if group in LONGEST_FIRST:
        return LONGEST_FIRST.index(group)
    return len(LONGEST_FIRST) + (group is None)


def pytest_itemcollected(item):
    # (marked as each test is collected, before any pytest_collection_modifyitems: xdist's turns the marks
    # into the "@group" test ids loadgroup schedules by; tests/unit/test_xdist_groups.py checks it does)
    group = xdist_group(item)
    if group:
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_modifyitems(config, items):
    items.sort(key=dispatch_rank)


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        from tests.buildcache import dangling, os_stages, records

        session.config._envkit_build_records = records()
        session.config._envkit_os_stages = os_stages()
        session.config._envkit_dangling = dangling()


def pytest_sessionfinish(session):
    before = getattr(session.config, "_envkit_build_records", None)
    if before is not None and not hasattr(session.config, "workerinput"):
        from tests.buildcache import dangling, os_stages, prune, records, remove_dangling, remove_os_stages

        stages = getattr(session.config, "_envkit_os_stages", None)
        if stages is not None:  # before the cache: a record an image stands on is kept
            remove_os_stages((os_stages() or set()) - stages)
        untagged = getattr(session.config, "_envkit_dangling", None)
        if untagged is not None:
            remove_dangling((dangling() or set()) - untagged)
        prune((records() or set()) - before)


@pytest.fixture(scope="session", autouse=True)
def user_data_home(tmp_path_factory):
    """Every test, and every envkit it starts, keeps its default history store (this user's data directory,
    ``store.records.default_path``) in a directory of its own, never in the real user's."""
    import os

    home = tmp_path_factory.mktemp("xdg-data")
    before = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = before


@pytest.fixture(autouse=True)
def own_data_home(request, monkeypatch):
    """Each test its own data directory (so its own default history store); module- and session-scoped
    fixtures keep the session's (``user_data_home``)."""
    home = request.getfixturevalue("tmp_path_factory").mktemp("data")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))


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


# --- Slurm, for fleet certification ---------------------------------------------------------

@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real single-host Slurm cluster (tests/slurmcluster.py: munged, slurmctld and three slurmd posing as
    a100, h100 and l40s nodes), on ports of its own, stopped after the session. `make test` installs Slurm first
    (scripts/ensure-slurm.sh); without it the fleet tests fail under CI and are skipped elsewhere."""
    import os

    from tests.slurmcluster import Cluster, find

    missing = [p for p in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel") if not find(p)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm is not installed ({', '.join(missing)}): run scripts/ensure-slurm.sh")
        pytest.skip(f"Slurm is not installed ({', '.join(missing)}): run scripts/ensure-slurm.sh")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
