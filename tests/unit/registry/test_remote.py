"""Reading the registry without pulling (envkit.registry.remote), against recorded answers of a real registry.

tests/unit/data/registry/answers.json holds what Debian's docker-registry answered to these very
reads (record.py beside it re-records them); a replaying transport serves them here, with no
registry and no engine.
"""

import base64
import json
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from requests.adapters import BaseAdapter

from envkit.errors import EngineError
from envkit.registry.api import _RegistryHTTP
from envkit.registry.remote_parse import (RegistryRef, classify_tags, config_facts, latest_per_gpu, manifest_parts,
                                          parse_ref, parse_registry, pick_platform)
from envkit.registry.remote import inspect_remote, list_registry, merge_store
from tests.integration.published import LOCK_A, LOCK_B, STACK_A, STACK_B

RECORDED = json.loads((Path(__file__).parents[1] / "data" / "registry" / "answers.json").read_text())
FACTS = RECORDED["facts"]
HOST = "127.0.0.1:5000"  # any loopback registry: plain http, as the engine's default
REAL_SESSION = requests.Session
NOT_FOUND = b'{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry"}]}'


class Replay(BaseAdapter):
    """Serve recorded answers by method and path; anything unrecorded is the registry's 404."""

    def __init__(self, answers: dict, overrides: dict | None = None):
        super().__init__()
        self.answers = {**answers, **(overrides or {})}
        self.asked: list[str] = []

    def send(self, request, **kw):
        key = f"{request.method} {request.path_url}"
        self.asked.append(key)
        answer = self.answers.get(key)
        if isinstance(answer, Exception):
            raise answer
        r = requests.Response()
        r.request, r.url = request, request.url
        if answer is None:
            r.status_code, r._content, r.headers["Content-Type"] = 404, NOT_FOUND, "application/json"
            r.reason = "Not Found"
            return r
        r.status_code = answer["status"]
        r.reason = "OK" if r.status_code < 400 else "Error"
        r._content = base64.b64decode(answer["body_b64"]) if "body_b64" in answer else answer["body"]
        r.headers.update(answer.get("headers", {}))
        return r

    def close(self):
        pass


class PlainHTTPOnly(BaseAdapter):
    """What https gets from a plain-http registry: no TLS handshake (envkit then falls back to http)."""

    def send(self, request, **kw):
        raise requests.exceptions.SSLError("[SSL: WRONG_VERSION_NUMBER] wrong version number")

    def close(self):
        pass


def session_for(overrides: dict | None = None) -> tuple[requests.Session, Replay]:
    replay = Replay(RECORDED["answers"], overrides)
    session = REAL_SESSION()
    session.mount("http://", replay)
    session.mount("https://", PlainHTTPOnly())  # the recorded registry is a loopback one, plain http
    return session, replay


def reads(overrides: dict | None = None, sleeps: list | None = None) -> dict:
    session, _ = session_for(overrides)
    return dict(session=session, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def answer(body: bytes | dict, status: int = 200, **headers) -> dict:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return {"status": status, "headers": {"Content-Type": "application/json", **headers}, "body": data}


# --- references and pure parsing ----------------------------------------------------------------

@pytest.mark.parametrize("ref, expected", [
    ("127.0.0.1:5000/vision/torch25:certified", RegistryRef("127.0.0.1:5000", "vision/torch25", "certified", None)),
    ("registry.example.com/a/b/c", RegistryRef("registry.example.com", "a/b/c", "latest", None)),
    ("localhost/x@sha256:" + "0" * 64, RegistryRef("localhost", "x", None, "sha256:" + "0" * 64)),
    ("reg.io:443/x:1@sha256:" + "1" * 64, RegistryRef("reg.io:443", "x", "1", "sha256:" + "1" * 64)),
    ("vision/torch25:2.5.1", None),  # a local name: no registry host
    ("torch25", None),
    ("envkit-base/debian:bookworm-minbase-e70052fe766d", None),
])
def test_parse_ref(ref, expected):
    assert parse_ref(ref) == expected


@pytest.mark.parametrize("ref, why", [
    ("127.0.0.1:5000/Vision/torch25:1", "lower case"),
    ("127.0.0.1:5000/vision/torch25:bad tag", "tag"),
    ("127.0.0.1:5000/vision/torch25@sha256:abc", "sha256 digest"),
    ("bad_host.io/x:1", "e.g."),
])
def test_parse_ref_refuses_malformed_registry_references(ref, why):
    with pytest.raises(EngineError, match="bad registry reference") as err:
        parse_ref(ref)
    assert why in err.value.message + err.value.hint


def test_parse_registry():
    assert parse_registry("127.0.0.1:5000") == ("127.0.0.1:5000", "")
    assert parse_registry("registry.example.com/vision/") == ("registry.example.com", "vision")
    for bad in ("", "bad host", "reg.io/Vision"):
        with pytest.raises(EngineError, match="bad registry"):
            parse_registry(bad)


def test_classify_tags_sorts_stacks_certificates_and_mirrors():
    tags = classify_tags(["s2", "certified", "s1.cert-nvidia-h200", "s1", "s1.cert-none", "sha256-" + "a" * 64])
    assert tags.stacks == ["s1", "s2"] and tags.certified
    assert tags.certificates == {"s1": ["s1.cert-none", "s1.cert-nvidia-h200"]}
    assert tags.mirrors == ["sha256-" + "a" * 64]
    assert not classify_tags([]).certified


def test_manifest_config_and_index_parsing():
    manifest = json.dumps({"config": {"digest": "sha256:c", "size": 10},
                           "layers": [{"digest": "sha256:l1", "size": 100}, {"digest": "sha256:l2", "size": 5}]})
    assert manifest_parts(manifest.encode(), "r") == ("sha256:c", 115, 2)
    with pytest.raises(EngineError, match="r is not an image manifest"):
        manifest_parts(b'{"manifests": []}', "r")
    index = json.dumps({"manifests": [{"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
                                      {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}}]})
    assert pick_platform(index.encode(), "r") == ("sha256:amd", "linux/amd64")
    with pytest.raises(EngineError, match="without manifests"):
        pick_platform(b"{}", "r")
    labels, env, user, created = config_facts(json.dumps({
        "created": "2026-12-01T00:00:00Z",
        "config": {"Labels": {"io.envkit.lock-hash": "h"}, "Env": ["A=1", "B=x=y"], "User": "1000"}}).encode(), "r")
    assert labels == {"io.envkit.lock-hash": "h"} and env == {"A": "1", "B": "x=y"} and user == "1000"
    with pytest.raises(EngineError, match="not an image config"):
        config_facts(b"[1]", "r")


def test_latest_certificate_per_gpu_wins():
    certs = [("H200", "failed", "2026-11-01T00:00:00Z"), ("H200", "certified", "2026-12-01T00:00:00Z"),
             ("A100", "verified", "2026-10-01T00:00:00Z")]
    assert latest_per_gpu(certs) == {"A100": "verified", "H200": "certified"}
    assert list(latest_per_gpu(certs)) == ["A100", "H200"]


# --- show: one image, from recorded answers ------------------------------------------------------

def test_inspect_by_tag_reads_manifest_labels_certificates_and_certified():
    image = inspect_remote(None, f"{HOST}/vision/torch25:{STACK_A}", **reads())
    doc = image.to_json()
    assert doc["digest"] == FACTS["digest_a"] and doc["id"] == FACTS["image_a"]
    assert doc["pinned"] == f"{HOST}/vision/torch25@{FACTS['digest_a']}"
    assert doc["compressed_size"] > 10 * 2**20 and doc["layers"] == 1
    assert doc["labels"]["io.envkit.lock-hash"] == LOCK_A == doc["lock_hash"]
    assert doc["require_cuda"] == "cuda>=12.0"
    assert doc["tags"] == [STACK_A, "certified"] and doc["certified_tag"] is True
    # the recorded artifacts are the old unsigned kind: shown with why, never counted (registry/verify.py)
    assert doc["certificates"] == [] and doc["signature"] == {"why": "unsigned"}
    assert [(c["gpu_model"], c["status"], c["source"], c["why"]) for c in doc["uncounted_certificates"]] == [
        ("none", "verified", f"registry artifact {STACK_A}.cert-none", "unsigned"),
        ("NVIDIA H200", "certified", f"registry artifact {STACK_A}.cert-nvidia-h200", "unsigned")]


def test_inspect_by_digest_and_by_certified_find_the_stack_tag():
    by_digest = inspect_remote(None, f"{HOST}/vision/torch25@{FACTS['digest_a']}", **reads())
    assert by_digest.tags == [STACK_A, "certified"] and by_digest.trust and len(by_digest.trust.uncounted) == 2
    certified = inspect_remote(None, f"{HOST}/vision/torch25:certified", **reads())
    assert certified.digest == FACTS["digest_a"] and certified.stack_tags == [STACK_A] and certified.certified


def test_inspect_a_stack_that_is_not_certified():
    image = inspect_remote(None, f"{HOST}/vision/torch25:{STACK_B}", **reads())
    assert image.certified is False and image.certified_digest == FACTS["digest_a"]
    assert image.facts.labels["io.envkit.lock-hash"] == LOCK_B
    assert image.trust and [(c["gpu_model"], c["status"], c["why"]) for c in image.trust.uncounted] == [
        ("none", "verified", "unsigned")]


def test_unknown_repository_and_tag_name_the_registry_and_reference():
    with pytest.raises(EngineError) as err:
        inspect_remote(None, f"{HOST}/vision/nope:1", **reads())
    assert f"registry {HOST} has no repository 'vision/nope'" in err.value.message
    assert f"envkit ls --registry {HOST}" in err.value.hint
    with pytest.raises(EngineError) as err:
        inspect_remote(None, f"{HOST}/vision/torch25:no-such-stack", **reads())
    assert "has no tag 'no-such-stack' in repository vision/torch25" in err.value.message
    assert STACK_A in err.value.hint and STACK_B in err.value.hint


def test_a_certificate_artifact_that_does_not_parse_is_an_error_naming_it():
    with pytest.raises(EngineError) as err:
        inspect_remote(None, f"{HOST}/broken/torch25:{STACK_A}", **reads())
    assert f"registry {HOST}" in err.value.message
    assert f"{HOST}/broken/torch25:{STACK_A}.cert-nvidia-h200 is not JSON" in err.value.message
    assert "re-attach" in err.value.hint and f"{HOST}/broken/torch25@sha256:" in err.value.hint


def test_a_blob_that_does_not_match_its_digest_is_refused():
    key = f"GET /v2/vision/torch25/blobs/{FACTS['image_a']}"
    with pytest.raises(EngineError, match="does not match its digest"):
        inspect_remote(None, f"{HOST}/vision/torch25:{STACK_A}", **reads({key: answer({"config": {}})}))


def test_an_unreachable_registry_is_retried_then_named_with_a_hint():
    refused = requests.ConnectionError("HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded "
                                       "(Caused by NewConnectionError('...: [Errno 111] Connection refused'))")
    sleeps = []
    with pytest.raises(EngineError) as err:
        inspect_remote(None, f"{HOST}/vision/torch25:{STACK_A}",
                       **reads({"GET /v2/vision/torch25/tags/list?n=1000": refused}, sleeps))
    assert sleeps == [0.5, 1.0]
    assert err.value.message == (f"cannot read the tags of {HOST}/vision/torch25 from registry {HOST} "
                                 "(after 3 attempts): cannot connect: Connection refused")
    assert f"curl http://{HOST}/v2/" in err.value.hint


def test_denied_points_at_the_credentials():
    denied = answer({"errors": [{"code": "DENIED"}]}, 403)
    with pytest.raises(EngineError, match="HTTP 403") as err:
        list_registry(None, HOST, **reads({"GET /v2/_catalog?n=1000": denied}))
    assert f"docker login {HOST}" in err.value.hint and "ENVKIT_REGISTRY_USER" in err.value.hint


# --- ls --registry ---------------------------------------------------------------------------------

def test_list_registry_rows_certification_and_skips():
    listing = list_registry(None, f"{HOST}/vision", **reads())
    rows = {r["stack"]: r for r in listing.rows}
    assert set(rows) == {STACK_A, STACK_B}
    a, b = rows[STACK_A], rows[STACK_B]
    assert a["certification"] == {} and a["certified_tag"]  # unsigned artifacts never count
    assert {(u["gpu_model"], u["why"]) for u in a["uncounted_certificates"]} == {("NVIDIA H200", "unsigned"),
                                                                                 ("none", "unsigned")}
    assert a["digest"] == FACTS["digest_a"] and a["image_id"] == FACTS["image_a"] and a["lock_hash"] == LOCK_A
    assert b["certification"] == {} and not b["certified_tag"]
    assert a["sources"] == ["registry"] and a["date"] >= "2026-12-01"
    assert listing.skipped == [{"reference": f"{HOST}/vision/base-debian-bookworm", "reason": "base mirror repository"}]

    tools = list_registry(None, f"{HOST}/tools", **reads())
    assert tools.rows == [] and "not an envkit image" in tools.skipped[0]["reason"]

    with pytest.raises(EngineError, match=f"{HOST}/broken/torch25:{STACK_A}.cert-nvidia-h200"):
        list_registry(None, HOST, **reads())


def test_catalog_and_tags_follow_the_link_header_across_pages():
    session, replay = session_for({
        "GET /v2/_catalog?n=1000": answer({"repositories": ["a/x"]}, Link='</v2/_catalog?last=a%2Fx&n=1000>; rel="next"'),
        "GET /v2/_catalog?last=a%2Fx&n=1000": answer({"repositories": ["b/y"]}),
        "GET /v2/a/x/tags/list?n=1000": answer({"name": "a/x", "tags": None}),
    })
    reg = _RegistryHTTP.at(None, HOST, session=session)
    assert reg.catalog() == ["a/x", "b/y"]
    assert reg.repository("a/x").list_tags() == []
    assert reg.repository("c/z").list_tags() is None  # 404: no such repository
    assert replay.asked[:2] == ["GET /v2/_catalog?n=1000", "GET /v2/_catalog?last=a%2Fx&n=1000"]


def test_merge_store_joins_by_image_id_and_keeps_the_newest_status():
    row = {"image_id": "sha256:i", "date": "2026-12-01", "sources": ["registry"], "local_tag": None,
           "certification": {"H200": "failed"},
           "certificates": [{"gpu_model": "H200", "status": "failed", "created_at": "2026-12-01T00:00:00Z"}]}
    other = {**row, "image_id": "sha256:other"}
    store = {"sha256:i": {"tag": "vision/torch25:s", "created": "2026-11-20T00:00:00Z",
                          "certificates": [("H200", "certified", "2026-12-03T00:00:00Z"),
                                           ("A100", "verified", "2026-11-21T00:00:00Z")]}}
    merged, untouched = merge_store([row, other], store)
    assert merged["certification"] == {"A100": "verified", "H200": "certified"}
    assert merged["date"] == "2026-12-03" and merged["sources"] == ["registry", "store"]
    assert merged["local_tag"] == "vision/torch25:s"
    assert untouched == other


# --- the CLI, no engine here ----------------------------------------------------------------------

@pytest.fixture
def replayed(monkeypatch, tmp_path):
    """The CLI with no engine, reading the recorded registry; run from an empty directory."""
    import envkit.engine.docker_engine as docker_engine

    def no_engine(*a, **kw):
        raise EngineError("no container engine is reachable")

    monkeypatch.setattr(docker_engine, "connect", no_engine)
    monkeypatch.setattr("envkit.registry.api.requests.Session", lambda: session_for()[0])
    monkeypatch.delenv("ENVKIT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args):
    from envkit.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_ls_registry_json_without_an_engine_leaves_no_store_behind(replayed):
    result = invoke("ls", "--registry", f"{HOST}/vision", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["store"] is None and [r["stack"] for r in doc["images"]] == [STACK_A, STACK_B]
    assert not (replayed / ".envkit").exists()


def test_cli_show_registry_ref_human_and_json(replayed):
    result = invoke("show", f"{HOST}/vision/torch25:{STACK_A}")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{HOST}/vision/torch25:{STACK_A} (in registry {HOST}, not pulled)"
    assert "  the team's :certified tag points at this image" in lines
    assert (f"  does not count: certified on NVIDIA H200 (registry artifact {STACK_A}.cert-nvidia-h200): unsigned"
            in lines)
    assert f"  envkit pull {HOST}/vision/torch25:{STACK_A}" in lines
    result = invoke("show", f"{HOST}/vision/torch25:{STACK_A}", "--all")
    assert ":certified points at             this image" in result.stdout
    assert "certificate: none" in result.stdout
    doc = json.loads(invoke("show", f"{HOST}/vision/torch25:{STACK_A}", "--json").stdout)
    assert doc["certificates"] == [] and doc["trusted_keys"] == {"fingerprints": [], "sources": []}
    h200 = next(c for c in doc["uncounted_certificates"] if c["gpu_model"] == "NVIDIA H200")
    assert h200["status"] == "certified" and h200["why"] == "unsigned"
    result = invoke("show", f"{HOST}/broken/torch25:{STACK_A}", "--json")
    assert result.exit_code == 6
    assert json.loads(result.stdout)["error"] == "EngineError"
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_cli_show_of_a_local_name_still_needs_the_engine(replayed):
    result = invoke("show", "vision/torch25:1", "--json")
    assert result.exit_code == 6
    assert "no container engine" in json.loads(result.stdout)["message"]


# --- registry addresses: what the distribution spec and DNS allow, refused before any request ------------------

@pytest.mark.parametrize("where, rule", [
    ("a" * 300, "the registry host is 300 characters long; a DNS name has at most 253"),
    ("a" * 64 + ".example.com", "is 64 characters long; a DNS label (the part between dots) has at most 63"),
    ("a" * 64 + ":5000", "a DNS label (the part between dots) has at most 63"),
    ("127.0.0.1:99999", "the registry port 99999 is outside 1-65535"),
    ("127.0.0.1:0", "the registry port 0 is outside 1-65535"),
    ("a..b:5000", "has an empty label"),
    ("127.0.0.1:5000/teamB", "'teamB' in the repository path has upper case letters; the path must be lowercase"),
    ("127.0.0.1:5000/" + "a" * 260, "is 275 characters long; the distribution spec allows 255"),
    ("127.0.0.1:5000/a--_b", "is not a path component"),
])
def test_parse_registry_names_the_rule_a_value_breaks(where, rule):
    with pytest.raises(EngineError, match="bad registry") as err:
        parse_registry(where)
    assert rule in err.value.message
    assert len(err.value.message) < 400  # a 300-character value is shown cut short, with its length


def test_parse_registry_accepts_the_limits():
    label = "a" * 63
    assert parse_registry(f"{label}.example.com:65535/x") == (f"{label}.example.com:65535", "x")
    assert parse_registry("127.0.0.1:1") == ("127.0.0.1:1", "")
    assert parse_registry("[::1]:5000/team") == ("[::1]:5000", "team")
    host = "127.0.0.1:5000"
    path = "a" * (255 - len(host) - 1)
    assert parse_registry(f"{host}/{path}") == (host, path)
    with pytest.raises(EngineError, match="256 characters long"):
        parse_registry(f"{host}/{path}a")


@pytest.mark.parametrize("ref, rule", [
    ("127.0.0.1:70000/x:1", "port 70000 is outside 1-65535"),
    ("a" * 64 + ".io/x:1", "at most 63"),
    ("127.0.0.1:5000/Team/x:1", "the path must be lowercase"),
    ("127.0.0.1:5000/" + "x" * 250 + ":1", "the distribution spec allows 255"),
])
def test_parse_ref_names_the_rule_a_reference_breaks(ref, rule):
    with pytest.raises(EngineError, match="bad registry reference") as err:
        parse_ref(ref)
    assert rule in err.value.message


@pytest.mark.parametrize("args, said", [
    (["registry", "prune", "a" * 300, "--dry-run"], "a DNS name has at most 253"),
    (["ls", "--registry", "a" * 64 + ":5000"], "a DNS label (the part between dots) has at most 63"),
    (["ls", "--registry", "127.0.0.1:99999"], "port 99999 is outside 1-65535"),
    (["ls", "--registry", "127.0.0.1:5000/teamB"], "the path must be lowercase"),
    (["registry", "prune", "127.0.0.1:5000/" + "a" * 260], "the distribution spec allows 255"),
    (["show", "127.0.0.1:99999/x:1"], "port 99999 is outside 1-65535"),
])
def test_a_bad_registry_address_is_a_usage_error_naming_the_rule(args, said, monkeypatch):
    from envkit.cli import main

    def no_engine():
        raise AssertionError("a usage error comes before the engine is asked")

    monkeypatch.setattr("envkit.engine.docker_engine.connect", no_engine)
    out = CliRunner().invoke(main, [*args, "--json"])
    assert out.exit_code == 2, out.output
    doc = json.loads(out.stdout)
    assert doc["error"] == "UsageError" and said in doc["message"] and "engine" not in doc["message"]


# --- a 404 is not an empty registry: no registry there, or one without a catalog ------------------------------

HTML_404 = answer(b"<html><body>Error response: 404 File not found</body></html>", 404,
                  **{"Content-Type": "text/html;charset=utf-8", "Server": "SimpleHTTP/0.6 Python/3.11"})
NO_CATALOG = {"GET /v2/_catalog?n=1000": answer({"errors": [{"code": "UNSUPPORTED"}]}, 404)}


def test_a_web_server_that_is_no_registry_is_named_not_listed_as_empty():
    """`python3 -m http.server`: 404 for /v2/_catalog and for /v2/ (no Docker-Distribution-API-Version)."""
    web = {"GET /v2/_catalog?n=1000": HTML_404, "GET /v2/": HTML_404}
    with pytest.raises(EngineError) as err:
        list_registry(None, HOST, **reads(web))
    assert err.value.message.startswith(f"{HOST} is not a container registry: GET /v2/_catalog answered 404, and ")
    assert "HTTP 404" in err.value.message and "SimpleHTTP" in err.value.message
    assert "Docker-Distribution-API-Version" in err.value.hint
    with pytest.raises(EngineError, match="is not a container registry: GET /v2/vision/torch25/tags/list answered"):
        inspect_remote(None, f"{HOST}/vision/torch25:1", **reads({**web, "GET /v2/vision/torch25/tags/list?n=1000":
                                                                  HTML_404}))


def test_a_registry_without_a_catalog_says_to_name_the_repository():
    with pytest.raises(EngineError) as err:
        list_registry(None, f"{HOST}/vision", **reads(NO_CATALOG))
    assert (f"registry {HOST} has no catalog endpoint (GET /v2/_catalog answered 404, as on hosted registries) and "
            f"has no repository 'vision'") in err.value.message
    assert f"name a repository instead: {HOST}/TEAM/IMAGE" in err.value.hint
    with pytest.raises(EngineError, match="has no catalog endpoint"):
        list_registry(None, HOST, **reads(NO_CATALOG))
    # naming the repository works without a catalog
    listing = list_registry(None, f"{HOST}/vision/torch25", **reads(NO_CATALOG))
    assert {r["stack"] for r in listing.rows} == {STACK_A, STACK_B}


@pytest.mark.parametrize("v2", [
    answer({}, 401, **{"WWW-Authenticate": 'Bearer realm="https://auth.example.com/token"'}),  # no version header
    answer({}, 200),  # the OCI spec's 200 without the header
    answer(b"", 401, **{"Docker-Distribution-API-Version": "registry/2.0"}),
])
def test_what_counts_as_a_registry_at_v2(v2):
    with pytest.raises(EngineError, match="has no catalog endpoint"):
        list_registry(None, HOST, **reads({**NO_CATALOG, "GET /v2/": v2}))


def test_list_registry_warns_when_the_path_matches_no_repository():
    listing = list_registry(None, f"{HOST}/nope", **reads())
    assert listing.rows == [] and listing.to_json()["warnings"] == [
        f"no repository in registry {HOST} is 'nope' or under it (its repositories are under: broken, tools, vision)"]
    assert list_registry(None, f"{HOST}/tools", **reads()).warnings == []
