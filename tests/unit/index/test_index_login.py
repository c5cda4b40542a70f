"""Logins for package indexes: the netrc lines a build gets, where a 401 is recognized, and what each
step says to do. (The real mirror that asks for a login: tests/integration/test_index_login.py.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from envkit.errors import BuildError, PackageIndexError, SpecError
from envkit.index.urls import DEFAULT_INDEX
from envkit.index.client import PackageIndex
from envkit.index.login import (check_netrc, keyring_login, keyring_logins, login_hint, login_refused, login_source,
                                netrc_for, netrc_path, refused_index)
from tests.unit.lockfixtures import make_image
from tests.unit.render.test_render import _dockerfile

MIRROR = "https://artifactory.corp.example/api/pypi/pypi/simple"


@pytest.fixture
def netrc(tmp_path, monkeypatch):
    def write(text: str):
        path = tmp_path / "netrc"
        path.write_text(text)
        path.chmod(0o600)
        monkeypatch.setenv("NETRC", str(path))
        return path
    return write


def test_a_build_gets_only_the_lines_for_the_locks_index_hosts(netrc):
    netrc("machine artifactory.corp.example login ci password tok-1\n"
          "machine github.com login me password personal-token\n")
    assert netrc_for([MIRROR, DEFAULT_INDEX, None]) == b"machine artifactory.corp.example login ci password tok-1\n"
    assert netrc_for(["https://other.example/simple"]) is None
    assert netrc_for([]) is None


def test_a_default_entry_serves_the_index_host_as_pip_would_use_it(netrc):
    netrc("default login ci password tok-2\n")
    assert netrc_for(["http://10.0.0.5:8080/simple"]) == b"machine 10.0.0.5 login ci password tok-2\n"


def test_no_netrc_file_means_no_login(tmp_path, monkeypatch):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    assert netrc_path() is None and check_netrc() is None and netrc_for([MIRROR]) is None


def test_a_malformed_netrc_fails_with_its_file_and_line(netrc):
    path = netrc("machine a.example login x password y\nlogin-for a.example\n")
    with pytest.raises(SpecError) as err:
        check_netrc()
    assert str(err.value.location) == f"{path}:2" and "bad follower token" in err.value.message
    assert "machine HOST login USER password TOKEN" in err.value.hint


def test_a_login_a_netrc_line_cannot_carry_is_refused_by_name(netrc):
    netrc('machine artifactory.corp.example login ci password "two words"\n')
    with pytest.raises(SpecError, match="artifactory.corp.example"):
        netrc_for([MIRROR])


def test_a_refused_index_is_found_in_what_pip_and_uv_print():
    uv = "hint: An index URL (https://artifactory.corp.example/api/pypi/pypi/simple) could not be queried (401 Unauthorized)"
    pip_prompt = "User for artifactory.corp.example: Traceback ...\nEOFError: EOF when reading a line"
    pip_403 = "ERROR: 403 Client Error: Forbidden for url: https://b.example/simple/x/"
    assert refused_index(uv, [MIRROR, DEFAULT_INDEX]) == MIRROR
    assert refused_index(pip_prompt, [DEFAULT_INDEX, MIRROR]) == MIRROR
    assert refused_index(pip_403, [MIRROR, "https://b.example/simple"]) == "https://b.example/simple"
    assert refused_index(uv, [DEFAULT_INDEX]) is None  # PyPI never asks
    assert refused_index("ERROR: No matching distribution found for x", [MIRROR]) is None


def test_each_builder_is_told_its_own_way_out(netrc):
    path = netrc("machine artifactory.corp.example login ci password tok\n")
    classic = login_refused(MIRROR, builder="classic", passed=False)
    assert "--builder buildkit" in classic and "envkit bundle make" in classic
    assert str(path) in login_refused(MIRROR, builder="buildkit", passed=True)
    assert "machine artifactory.corp.example login USER password TOKEN" in login_hint(MIRROR)


@pytest.mark.parametrize("make, what", [(lambda p: None, "missing"), (lambda p: p.mkdir(), "a directory")])
def test_a_netrc_variable_naming_no_file_is_said_in_the_login_hint(tmp_path, monkeypatch, make, what):
    """pip, uv and requests read no netrc at all then, and say nothing: the 401's hint must."""
    named = tmp_path / "netrc"
    make(named)
    monkeypatch.setenv("NETRC", str(named))
    hint = login_hint(MIRROR)
    assert hint.startswith(f"$NETRC names {named}, which is {what}, so no netrc file is read (not even ~/.netrc): "
                           "point $NETRC at the netrc file, or unset it; then add `machine artifactory.corp.example")
    named.parent.joinpath("real").write_text("machine x login a password b\n")
    monkeypatch.setenv("NETRC", str(named.parent / "real"))
    assert login_hint(MIRROR).startswith("add `machine artifactory.corp.example")
    monkeypatch.setenv("NETRC", "")  # requests, pip and uv then read none either
    assert login_hint(MIRROR).startswith("$NETRC is set but empty, so no netrc file is read (not even ~/.netrc): ")
    monkeypatch.delenv("NETRC")
    assert login_hint(MIRROR).startswith("add `machine artifactory.corp.example")


def test_buildkit_mounts_the_netrc_secret_only_for_an_index_other_than_pypi():
    private = make_image(index_url=MIRROR)
    mount = "--mount=type=secret,id=index-netrc,target=/root/.netrc"
    assert _dockerfile(private, buildkit=True).count(mount) == 3  # the CUDA wheels', the framework's, the extras' RUN
    assert mount not in _dockerfile(private)  # classic: no secrets
    assert mount not in _dockerfile(private, buildkit=True, wheelhouse=True)  # offline: no index
    assert mount not in _dockerfile(make_image(), buildkit=True)  # PyPI images render as before


def test_the_index_client_says_a_401_is_a_login(tmp_path, monkeypatch):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))

    class Session:
        def get(self, url, **kwargs):
            resp = requests.Response()
            resp.status_code, resp.reason, resp._content, resp.url = 401, "Unauthorized", b"", url
            return resp

    with pytest.raises(PackageIndexError) as err:
        PackageIndex(MIRROR, cache_dir=tmp_path, session=Session()).versions("torch")
    assert "asks for a login" in err.value.message
    assert "machine artifactory.corp.example login USER password TOKEN" in err.value.hint


def test_uvs_401_is_reported_as_a_login_not_as_an_unsolvable_closure(monkeypatch):
    from envkit.index import closure

    def fake_run(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", f"error: An index URL ({MIRROR}) could not be queried due to "
                                                       "a lack of valid authentication credentials (401 Unauthorized)")

    monkeypatch.setattr(closure.procs, "run", fake_run)
    with pytest.raises(PackageIndexError) as err:
        closure.compile_closure(["numpy"], python="3.11", glibc="2.36", index_url=MIRROR)
    assert err.value.message.startswith(f"{MIRROR} asks for a login") and "netrc" in err.value.hint


def test_a_build_that_met_a_401_says_how_to_log_in(netrc):
    from envkit.images.builder import _login_failure

    netrc("machine artifactory.corp.example login ci password tok\n")
    image = make_image(index_url=MIRROR)
    failed = BuildError("building x failed", hint="last output:\n    User for artifactory.corp.example: ")
    assert "--builder buildkit" in _login_failure(failed, image, "classic", False).hint
    assert "refused the login" in _login_failure(failed, image, "buildkit", True).hint
    other = BuildError("building x failed", hint="last output:\n    No space left on device")
    assert _login_failure(other, image, "buildkit", True) is other


def test_a_login_in_the_specs_index_url_is_refused_without_echoing_it(write_spec):
    from envkit.spec import load_spec
    from tests.conftest import MINIMAL

    path = write_spec(MINIMAL.replace("images:", "build:\n  index_url: \"https://ci:s3cret@artifactory.corp.example/simple\"\n"
                                               "images:"))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value.location).startswith(f"{path}:7")
    assert "s3cret" not in str(err.value) and "machine artifactory.corp.example login USER password TOKEN" in str(err.value)


# --- logins from the system keyring (the keyring package; a file-backed test backend) ------------------------

@pytest.fixture
def keyring_holds(tmp_path, monkeypatch):
    """The keyring backend of tests/keyringfake.py, holding the logins given ({service: (user, password)})."""
    import keyring

    from tests.keyringfake import ENV, FileKeyring

    path = tmp_path / "keyring.json"
    monkeypatch.setenv(ENV, str(path))
    before = keyring.get_keyring()
    keyring.set_keyring(FileKeyring())

    def hold(logins: dict):
        path.write_text(json.dumps(logins))
    yield hold
    keyring.set_keyring(before)


def test_the_keyring_serves_a_host_the_netrc_file_lacks(netrc, keyring_holds):
    netrc("machine other.example login a password b\n")
    keyring_holds({MIRROR: ["ci", "from-keyring"]})
    assert netrc_for([MIRROR, DEFAULT_INDEX]) == b"machine artifactory.corp.example login ci password from-keyring\n"
    assert login_source(MIRROR) == "the system keyring"


def test_the_netrc_file_wins_over_the_keyring(netrc, keyring_holds):
    path = netrc("machine artifactory.corp.example login ci password from-netrc\n")
    keyring_holds({MIRROR: ["ci", "from-keyring"]})
    assert netrc_for([MIRROR]) == b"machine artifactory.corp.example login ci password from-netrc\n"
    assert login_source(MIRROR) == str(path)


def test_the_keyring_is_asked_for_the_url_then_host_and_port_then_host(tmp_path, monkeypatch, keyring_holds):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    for service in ("mirror.corp:8443", "mirror.corp"):
        keyring_holds({service: ["u", "p"]})
        assert keyring_login("https://mirror.corp:8443/simple") == ("u", "p")
    keyring_holds({"https://mirror.corp:8443/simple": ["u", "p"]})
    assert keyring_login("https://mirror.corp:8443/simple") == ("u", "p")
    assert keyring_login("https://elsewhere.corp/simple") is None


def test_pypi_is_never_asked_and_a_failing_backend_is_no_login(tmp_path, monkeypatch, keyring_holds):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    keyring_holds({DEFAULT_INDEX: ["u", "p"], "pypi.org": ["u", "p"]})
    assert keyring_login(DEFAULT_INDEX) is None and keyring_login("https://pypi.org/simple/") is None
    keyring_holds({"broken": ["-", "-"]})
    assert keyring_login(MIRROR) is None and netrc_for([MIRROR]) is None


def test_without_the_keyring_package_only_the_netrc_counts(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "keyring", None)  # import keyring fails
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    assert keyring_login(MIRROR) is None and netrc_for([MIRROR]) is None


def test_a_keyring_login_a_netrc_line_cannot_carry_is_refused_by_name(tmp_path, monkeypatch, keyring_holds):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    keyring_holds({MIRROR: ["ci", "two words"]})
    with pytest.raises(SpecError) as err:
        netrc_for([MIRROR])
    assert err.value.message.startswith("the system keyring: the login for artifactory.corp.example holds a space")


def test_keyring_logins_point_netrc_at_a_private_merged_file_while_open(netrc, keyring_holds):
    """requests, uv and pip read $NETRC: the user's file, then the keyring's lines; afterwards all as it was."""
    own = netrc("machine other.example login a password b")  # no final newline
    keyring_holds({MIRROR: ["ci", "from-keyring"]})
    with keyring_logins([MIRROR, None]) as hosts:
        merged = Path(os.environ["NETRC"])
        assert hosts == ["artifactory.corp.example"] and merged != own
        assert merged.read_text() == ("machine other.example login a password b\n"
                                      "machine artifactory.corp.example login ci password from-keyring\n")
        assert stat.S_IMODE(merged.stat().st_mode) == 0o600
        assert requests.utils.get_netrc_auth(MIRROR + "/numpy/") == ("ci", "from-keyring")
    assert os.environ["NETRC"] == str(own) and not merged.exists()


def test_keyring_logins_change_nothing_when_the_keyring_has_none(tmp_path, monkeypatch, keyring_holds):
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    keyring_holds({})
    with keyring_logins([MIRROR]) as hosts:
        assert hosts == [] and "NETRC" not in os.environ


def test_a_refused_keyring_login_is_named_as_such(tmp_path, monkeypatch, keyring_holds):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    keyring_holds({MIRROR: ["ci", "stale"]})
    assert login_refused(MIRROR, builder="buildkit", passed=True) == (
        "artifactory.corp.example refused the login from the system keyring: check the user and token there")
    assert "or store it in the system keyring (`keyring set URL USER`" in login_hint(MIRROR)
