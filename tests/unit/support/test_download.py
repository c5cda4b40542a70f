"""``support.download.fetch_pinned`` against a real HTTP server on the loopback: the pinned file is written, another
file or a failed download leaves nothing and says why."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading

import pytest

from envkit.errors import BuildError
from envkit.support.download import fetch_pinned


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    (root / "uv.whl").write_bytes(b"the wheel" * 1000)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", hashlib.sha256(b"the wheel" * 1000).hexdigest()
    server.shutdown()
    server.server_close()


def test_the_pinned_file_is_written(served, tmp_path):
    url, sha = served
    path = fetch_pinned(f"{url}/uv.whl", sha, tmp_path / "out" / "uv.whl", hint="h")
    assert path.read_bytes() == b"the wheel" * 1000


def test_another_file_is_refused_and_removed(served, tmp_path):
    url, _ = served
    with pytest.raises(BuildError, match=r"uv.whl has sha256 [0-9a-f]{12}\.\.\., not the pinned 000000000000"):
        fetch_pinned(f"{url}/uv.whl", "0" * 64, tmp_path / "uv.whl", hint="h")
    assert not (tmp_path / "uv.whl").exists()


def test_a_failed_download_says_what_to_check_and_leaves_nothing(served, tmp_path):
    url, sha = served
    with pytest.raises(BuildError, match="cannot download .*/missing.whl: 404") as err:
        fetch_pinned(f"{url}/missing.whl", sha, tmp_path / "missing.whl", hint="is the mirror reachable?")
    assert err.value.hint == "is the mirror reachable?" and not (tmp_path / "missing.whl").exists()
