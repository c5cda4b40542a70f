"""`make test`'s two workers keep the integration tests that share an image together (tests/conftest.py).

pytest-xdist's --dist loadgroup groups tests by an "@group" suffix it writes into each test's id; with a
pytest it does not know how to rename (9.2 moved the id), the suffix is lost and every test is scheduled
on its own, so two workers build the same multi-GB image at once. This runs pytest the way `make test`
does, on one test of each group and a unit test (--setup-plan: nothing runs), and reads the ids the worker
scheduled.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("xdist")

RECORDER = '''
import os
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        with open(os.environ["ENVKIT_TEST_IDS"], "a") as out:
            out.writelines(item.nodeid + "\\n" for item in items)
'''


def test_loadgroup_keeps_the_groups_of_tests_conftest_in_their_dispatch_order(tmp_path):
    (tmp_path / "idrecorder.py").write_text(RECORDER)
    ids = tmp_path / "ids.txt"
    # given in an order that is not the dispatch order: unit, other module, a test stack of frameworks.yaml,
    # a long module, torch25
    tests = ["tests/unit/ops/test_gc.py::test_keep_below_one_is_refused",
             "tests/integration/test_publish.py::test_push_then_pull_back_by_digest",
             "tests/integration/test_stacks.py::test_stack_builds_and_verifies_with_gpu_checks_skipped[jax]",
             "tests/integration/test_reproducible.py::test_two_builds_from_scratch_give_the_same_environment_layers",
             "tests/integration/test_examples.py::test_the_examples_with_locks_are_the_ones_the_readme_builds"]
    env = dict(os.environ, ENVKIT_TEST_IDS=str(ids), PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadgroup", "--no-loadscope-reorder",
                           "--setup-plan", "-q", "-p", "idrecorder", "-p", "no:cacheprovider", *tests],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scheduled = ids.read_text().split()
    groups = [i.rsplit("@", 1)[-1] if "@" in i else None for i in scheduled]
    assert groups[:4] == ["frameworks", "torch25", "reproducible", "registry"], scheduled
    assert groups[4:] and set(groups[4:]) == {None}, scheduled  # the unit tests last, on any worker
