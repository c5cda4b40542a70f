"""Registry retention (envkit.registry.retention, `envkit registry prune`): the keep/delete decision on fake
listings, and the whole prune against a small in-memory registry behind a requests adapter
(catalog, tags, manifests, blobs, DELETE with distribution's semantics: every tag of the digest goes)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

import pytest
import requests
from click.testing import CliRunner
from requests.adapters import BaseAdapter

from envkit.registry import retention
from envkit.cli import main
from envkit.errors import EngineError
from envkit.registry.retention import (Artifact, DeleteDisabledError, Image, Listing, parse_created, plan_repository,
                                       prune_registry)

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=timezone.utc)
HOST = "127.0.0.1:5999"
OCI = "application/vnd.oci.image.manifest.v1+json"
LOCK = "io.envkit.lock-hash"


def d(n: int) -> str:
    return f"sha256:{n:064x}"


def ago(days: float) -> str:
    return (NOW - timedelta(days=days)).isoformat().replace("+00:00", "Z")


def listing(images, certified=None, protected=None, artifacts=(), held=()) -> Listing:
    return Listing("vision/torch25", tuple(images), certified, dict(protected or {}), tuple(artifacts),
                   frozenset(held))


def img(n: int, days: float | None, *tags: str, envkit: bool = True) -> Image:
    return Image(d(n), tags or (f"s{n}",), None if days is None else ago(days), envkit)


def actions(plan) -> dict[str, str]:
    return {",".join(x.tags): "delete" if x.delete else "keep" for x in plan.images}


# --- the decision (pure) ---------------------------------------------------------------------------

def test_keeps_certified_and_the_newest_and_deletes_the_rest():
    images = [img(1, 50), img(2, 40), img(3, 30), img(4, 20), img(5, 10)]
    plan = plan_repository(listing(images, certified=d(1)), keep=2, older_than=None, now=NOW)
    assert actions(plan) == {"s1": "keep", "s2": "delete", "s3": "delete", "s4": "keep", "s5": "keep"}
    why = {x.tags[0]: x.reasons for x in plan.images}
    assert why["s1"] == (":certified points at it",)
    assert why["s5"] == ("one of the 2 newest (#1)",) and why["s4"] == ("one of the 2 newest (#2)",)
    assert why["s3"] == ("not one of the 2 newest (#3)",)


def test_older_than_keeps_recent_images_beyond_keep():
    images = [img(1, 50), img(2, 40), img(3, 5), img(4, 2), img(5, 1)]
    plan = plan_repository(listing(images), keep=1, older_than=timedelta(days=30), now=NOW)
    assert actions(plan) == {"s1": "delete", "s2": "delete", "s3": "keep", "s4": "keep", "s5": "keep"}
    why = {x.tags[0]: x.reasons for x in plan.images}
    assert why["s3"] == ("built less than 30 day(s) ago",)
    assert why["s5"] == ("one of the 1 newest (#1)", "built less than 30 day(s) ago")
    assert why["s2"] == ("not one of the 1 newest (#4)", "built 40 day(s) ago")


def test_keep_zero_deletes_all_but_certified():
    plan = plan_repository(listing([img(1, 3), img(2, 2), img(3, 1)], certified=d(2)), keep=0, older_than=None,
                           now=NOW)
    assert actions(plan) == {"s1": "delete", "s2": "keep", "s3": "delete"}


def test_foreign_undated_and_protected_images_are_kept_and_not_counted():
    images = [img(1, 100, "latest", envkit=False), img(2, None), img(3, 90), img(4, 80), img(5, 1)]
    plan = plan_repository(listing(images, protected={d(4): "also tagged sha256-ab (a base mirror)"}), keep=1,
                           older_than=None, now=NOW)
    assert actions(plan) == {"latest": "keep", "s2": "keep", "s3": "delete", "s4": "keep", "s5": "keep"}
    why = {x.tags[0]: x.reasons for x in plan.images}
    assert why["latest"] == (f"not an envkit image (no {LOCK} label)",)
    assert "build time is unknown" in why["s2"][0]
    assert why["s4"] == ("also tagged sha256-ab (a base mirror)",)
    assert why["s3"] == ("not one of the 1 newest (#3)",)  # ranked among the dated envkit images only


def test_every_tag_of_a_kept_digest_is_kept_and_an_image_counts_once():
    images = [img(1, 30, "s1", "s1-alias"), img(2, 20), img(3, 10)]
    plan = plan_repository(listing(images, certified=d(1)), keep=1, older_than=None, now=NOW)
    assert actions(plan) == {"s1,s1-alias": "keep", "s2": "delete", "s3": "keep"}
    plan = plan_repository(listing(images), keep=2, older_than=None, now=NOW)
    assert actions(plan) == {"s1,s1-alias": "delete", "s2": "keep", "s3": "keep"}


def test_certificate_artifacts_follow_their_image():
    images = [img(1, 30), img(2, 20), img(3, 10)]
    artifacts = [Artifact("s1.cert-none", d(101), d(1), "s1"), Artifact("s1.cert-nvidia-h200", d(102), d(1), "s1"),
                 Artifact("s3.cert-none", d(103), d(3), "s3"),
                 Artifact("s2.cert-none", d(104), None, "s2"),  # no subject: judged by its stack tag's image
                 Artifact("s0.cert-none", d(105), d(99), "s0"),  # its image is gone (an interrupted prune)
                 Artifact("s9.cert-none", d(106), d(98), "s9")]  # its image is held under no stack tag: kept
    plan = plan_repository(listing(images, artifacts=artifacts, held=[d(98)]), keep=1, older_than=None, now=NOW)
    got = {a.tag: (a.delete, a.reason) for a in plan.artifacts}
    assert got == {"s1.cert-none": (True, f"certifies {d(1)}, deleted"),
                   "s1.cert-nvidia-h200": (True, f"certifies {d(1)}, deleted"),
                   "s3.cert-none": (False, "its image is kept"),
                   "s2.cert-none": (True, "belongs to s2, deleted"),
                   "s0.cert-none": (True, f"its image {d(99)} is no longer in the registry"),
                   "s9.cert-none": (False, "its image is kept")}


def test_ties_in_build_time_rank_by_tag_and_created_parses_nanoseconds():
    assert parse_created("2026-12-01T03:00:00.123456789Z") == datetime(2026, 12, 1, 3, 0, 0, 123456,
                                                                       tzinfo=timezone.utc)
    assert parse_created("2026-12-01T03:00:00") == datetime(2026, 12, 1, 3, tzinfo=timezone.utc)
    assert parse_created("yesterday") is None and parse_created(None) is None
    plan = plan_repository(listing([img(1, 5, "a"), img(2, 5, "b")]), keep=1, older_than=None, now=NOW)
    assert actions(plan) == {"a": "delete", "b": "keep"}


# --- prune against an in-memory registry ---------------------------------------------------------

def s(n: int) -> str:
    """Stack tag n, as envkit names stacks (<version>-<variant>-py<python>-<lock hash 8>): any other tag is a
    user's, which keeps its image."""
    return f"2.5.1-cu124-py3.11-{n:08x}"


class FakeRegistry(BaseAdapter):
    """Just enough of distribution 2.8: catalog, tags, manifests and blobs by digest, DELETE by digest
    (removing every tag of it; 405 UNSUPPORTED when deletes are disabled, whatever the digest). ``fail``: (method, path part) ->
    statuses to answer first, one per call."""

    def __init__(self, delete: bool = True):
        super().__init__()
        self.delete = delete
        self.repos: dict[str, dict] = {}
        self.blobs: dict[str, bytes] = {}
        self.fail: dict[tuple[str, str], list[int]] = {}
        self.asked: list[str] = []

    # building the registry's contents
    def blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    def manifest(self, repo: str, doc: dict, *tags: str) -> str:
        raw = json.dumps(doc, sort_keys=True).encode()
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        r = self.repos.setdefault(repo, {"manifests": {}, "tags": {}})
        r["manifests"][digest] = raw
        for tag in tags:
            r["tags"][tag] = digest
        return digest

    def image(self, repo: str, tag: str, days: float, *, envkit: bool = True, extra_tags=()) -> str:
        config = self.blob(json.dumps({"created": ago(days), "config": {
            "Labels": {LOCK: "sha256:" + hashlib.sha256(tag.encode()).hexdigest()} if envkit else {}}}).encode())
        return self.manifest(repo, {"schemaVersion": 2, "mediaType": OCI, "config": {"digest": config, "size": 1},
                                    "layers": []}, tag, *extra_tags)

    def certificate(self, repo: str, stack: str, slug: str) -> str:
        subject = self.repos[repo]["tags"][stack]
        layer = self.blob(json.dumps({"gpu": slug, "stack": stack}).encode())
        return self.manifest(repo, {"schemaVersion": 2, "mediaType": OCI, "config": {"digest": self.blob(b"{}")},
                                    "layers": [{"mediaType": "application/vnd.envkit.certificate.v1+json",
                                                "digest": layer}],
                                    "subject": {"mediaType": OCI, "digest": subject}}, f"{stack}.cert-{slug}")

    def promote(self, repo: str, stack: str) -> None:
        self.repos[repo]["tags"]["certified"] = self.repos[repo]["tags"][stack]

    def tags(self, repo: str) -> dict[str, str]:
        return dict(self.repos[repo]["tags"])

    # answering
    def send(self, request, **kw):
        path = request.path_url.split("?", 1)[0]
        self.asked.append(f"{request.method} {path}")
        for (method, part), statuses in self.fail.items():
            if request.method == method and part in path and statuses:
                return self._answer(request, statuses.pop(0), {"errors": [{"code": "UNAVAILABLE"}]})
        if path == "/v2/":
            return self._answer(request, 200, {})
        if path == "/v2/_catalog":
            return self._answer(request, 200, {"repositories": sorted(self.repos)})
        for sep in ("/tags/list", "/manifests/", "/blobs/"):
            if sep in path:
                repo, ref = path[len("/v2/"):].split(sep, 1)
                break
        else:
            return self._answer(request, 404, {})
        if request.method == "DELETE" and not self.delete:  # before anything else, as distribution 2.8 answers
            return self._answer(request, 405, {"errors": [{"code": "UNSUPPORTED",
                                                           "message": "The operation is unsupported."}]})
        r = self.repos.get(repo)
        if r is None:
            return self._answer(request, 404, {"errors": [{"code": "NAME_UNKNOWN"}]})
        if sep == "/tags/list":
            return self._answer(request, 200, {"name": repo, "tags": sorted(r["tags"])})
        if sep == "/blobs/":
            data = self.blobs.get(ref)
            return self._answer(request, 200 if data else 404, data or {})
        digest = ref if ref.startswith("sha256:") else r["tags"].get(ref)
        if digest not in r["manifests"]:
            return self._answer(request, 404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        if request.method == "DELETE":
            del r["manifests"][digest]
            r["tags"] = {t: v for t, v in r["tags"].items() if v != digest}
            return self._answer(request, 202, b"")
        return self._answer(request, 200, r["manifests"][digest],
                            {"Content-Type": OCI, "Docker-Content-Digest": digest})

    @staticmethod
    def _answer(request, status, body, headers=None):
        r = requests.Response()
        r.request, r.url, r.status_code, r.reason = request, request.url, status, "OK" if status < 400 else "Error"
        r._content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r.headers.update(headers or {"Content-Type": "application/json"})
        return r

    def close(self):
        pass


def team(delete: bool = True) -> FakeRegistry:
    """vision/torch25: six stacks over 60 days, s2 certified, certificates on s1, s2, s6; a base mirror;
    an image envkit did not build; tools/debian (not envkit's)."""
    reg = FakeRegistry(delete)
    for n, days in enumerate((60, 50, 40, 30, 20, 10), 1):
        reg.image("vision/torch25", s(n), days)
    reg.image("vision/torch25", "latest", 70, envkit=False)
    reg.promote("vision/torch25", s(2))
    for stack in (s(1), s(2), s(6)):
        reg.certificate("vision/torch25", stack, "none")
    reg.certificate("vision/torch25", s(1), "nvidia-h200")
    reg.image("vision/base-debian-bookworm", "sha256-" + "a" * 64, 100, envkit=False)
    reg.image("tools/debian", "bookworm", 100, envkit=False)
    return reg


def prune(reg: FakeRegistry, where: str = f"{HOST}/vision", sleeps: list | None = None, **kw):
    session = requests.Session()
    session.mount("http://", reg)
    session.mount("https://", reg)
    return prune_registry(None, where, now=NOW, session=session,
                          sleep=sleeps.append if sleeps is not None else (lambda s: None), **kw)


PROBE = "sha256:" + "0" * 64  # what a dry run asks to delete, to learn whether the registry allows deletes


def deletes(reg: FakeRegistry) -> list[str]:
    """The DELETEs asked for, less a dry run's probe (a manifest that cannot exist)."""
    return [a for a in reg.asked if a.startswith("DELETE") and not a.endswith(PROBE)]


def probes(reg: FakeRegistry) -> list[str]:
    return [a for a in reg.asked if a.startswith("DELETE") and a.endswith(PROBE)]


def test_prune_deletes_old_stacks_and_their_certificates_then_is_a_no_op():
    reg = team()
    s1, s3 = reg.tags("vision/torch25")[s(1)], reg.tags("vision/torch25")[s(3)]
    result = prune(reg, keep=2)
    assert set(reg.tags("vision/torch25")) == {s(2), "certified", s(2) + ".cert-none", s(5), s(6), s(6) + ".cert-none",
                                               "latest"}
    assert set(reg.tags("vision/base-debian-bookworm")) and set(reg.tags("tools/debian"))
    assert s1 not in reg.repos["vision/torch25"]["manifests"] and s3 not in reg.repos["vision/torch25"]["manifests"]
    doc = result.to_json()
    assert doc["summary"] == {"images_kept": 4, "images_deleted": 3, "artifacts_kept": 2, "artifacts_deleted": 2}
    assert doc["skipped"] == [{"reference": f"{HOST}/vision/base-debian-bookworm", "reason": "base mirror repository"}]
    assert "registry garbage-collect" in doc["garbage_collection"]
    assert [r["repository"] for r in doc["repositories"]] == ["vision/torch25"]  # the prefix: not tools/
    rows = {tuple(i["tags"]): i for i in doc["repositories"][0]["images"]}
    assert rows[(s(1),)]["action"] == "delete" and rows[(s(1),)]["result"] == "deleted"
    assert rows[(s(2),)]["reasons"] == [":certified points at it"] and rows[(s(2),)]["result"] is None
    images_first = deletes(reg)
    assert images_first[0].endswith(s1) and len(images_first) == 5

    reg.asked.clear()
    again = prune(reg, keep=2).to_json()
    assert deletes(reg) == [] and again["summary"]["images_deleted"] == again["summary"]["artifacts_deleted"] == 0


def test_dry_run_deletes_nothing_and_says_what_would_go():
    reg = team()
    before = reg.tags("vision/torch25")
    result = prune(reg, keep=2, older_than_days=35, dry_run=True)
    assert deletes(reg) == [] and reg.tags("vision/torch25") == before
    assert probes(reg) == [f"DELETE /v2/vision/torch25/manifests/{PROBE}"]  # once, where something would go
    doc = result.to_json()
    assert doc["dry_run"] is True and doc["older_than_days"] == 35 and doc["warnings"] == []
    gone = sorted(t for i in doc["repositories"][0]["images"] if i["action"] == "delete" for t in i["tags"])
    assert gone == [s(1), s(3)]  # s4 (30 days) is newer than 35 days
    assert all(i["result"] is None for i in doc["repositories"][0]["images"])


def test_a_registry_with_deletes_disabled_names_the_setting_and_garbage_collection():
    reg = team(delete=False)
    with pytest.raises(DeleteDisabledError) as err:
        prune(reg, keep=2)
    assert "storage.delete.enabled: true" in err.value.message and HOST in err.value.message
    assert "405" in err.value.message and err.value.exit_code == 6
    assert "registry garbage-collect" in err.value.hint and "REGISTRY_STORAGE_DELETE_ENABLED" in err.value.hint
    assert len(deletes(reg)) == 1  # the first refusal ends it: nothing else is asked to go
    prune(reg, keep=2, dry_run=True)  # a dry run never deletes, so it works there


def test_transient_failures_are_retried_and_permanent_ones_name_the_digest():
    reg, sleeps = team(), []
    reg.fail[("DELETE", "/manifests/")] = [503, 502]
    prune(reg, keep=2, sleeps=sleeps)
    assert sleeps == [0.5, 1.0] and s(1) not in reg.tags("vision/torch25")

    reg = team()
    reg.fail[("DELETE", "/manifests/")] = [503, 503, 503]
    with pytest.raises(EngineError, match=r"cannot delete .*vision/torch25@sha256:.* \(after 3 attempts\)") as err:
        prune(reg, keep=2)
    assert "picks up where it stopped" in err.value.hint

    reg = team()
    s3 = reg.tags("vision/torch25")[s(3)]
    reg.fail[("DELETE", s3)] = [403]
    with pytest.raises(EngineError, match=r"HTTP 403.*\(1 manifest\(s\) were deleted before this\)") as err:
        prune(reg, keep=2)
    assert "repository:vision/torch25:delete" in err.value.hint


def test_an_interrupted_prune_leaves_artifacts_that_the_next_one_deletes():
    reg = team()
    s1 = reg.tags("vision/torch25")[s(1)]
    reg.repos["vision/torch25"]["manifests"].pop(s1)  # the image went, its certificates did not
    reg.repos["vision/torch25"]["tags"].pop(s(1))
    prune(reg, keep=5)
    assert not any(t.startswith(s(1)) for t in reg.tags("vision/torch25"))
    assert len(deletes(reg)) == 2


def test_certified_moving_during_prune_is_respected():
    reg = team()
    real = reg.send
    count = {"certified": 0}

    def send(request, **kw):  # the nightly moves :certified to s1 after prune listed the repository
        if request.path_url.endswith("/manifests/certified"):
            count["certified"] += 1
            if count["certified"] == 2:
                reg.promote("vision/torch25", s(1))
        return real(request, **kw)

    reg.send = send
    prune(reg, keep=2)
    assert {s(1), s(1) + ".cert-none", s(1) + ".cert-nvidia-h200", "certified"} <= set(reg.tags("vision/torch25"))
    assert s(2) not in reg.tags("vision/torch25")


def test_bad_arguments():
    with pytest.raises(EngineError, match="bad registry"):
        prune(team(), where="Bad Host")
    with pytest.raises(EngineError, match="0 or more"):
        prune(team(), keep=-1)


# --- the CLI ---------------------------------------------------------------------------------------

@pytest.fixture
def cli_registry(monkeypatch):
    reg = team()
    real = prune_registry

    def fake(client, where, **kw):
        session = requests.Session()
        session.mount("http://", reg)
        session.mount("https://", reg)
        return real(None, where, session=session, sleep=lambda s: None, now=NOW, **kw)

    monkeypatch.setattr(retention, "prune_registry", fake)
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: (_ for _ in ()).throw(EngineError("none")))
    return reg


def test_cli_dry_run_human_and_json(cli_registry):
    out = CliRunner().invoke(main, ["registry", "prune", f"{HOST}/vision", "--keep", "2", "--dry-run"])
    assert out.exit_code == 0, out.output
    assert "would delete" in out.output and s(1) + ".cert-nvidia-h200" in out.output
    assert ":certified points at it" in out.output and "one of the 2 newest (#1)" in out.output
    assert "3 image(s) and 2 certificate artifact(s) would be deleted; 4 image(s) kept" in out.output
    assert "registry garbage-collect" in out.output and deletes(cli_registry) == []

    out = CliRunner().invoke(main, ["registry", "prune", f"{HOST}/vision", "--keep", "2", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["summary"]["images_deleted"] == 3 and doc["dry_run"] is False
    assert len(deletes(cli_registry)) == 5


def test_cli_deletes_disabled_is_exit_6_with_the_error_document(cli_registry):
    cli_registry.delete = False
    out = CliRunner().invoke(main, ["registry", "prune", HOST, "--json"])
    assert out.exit_code == 6
    doc = json.loads(out.stdout.split("\nerror:")[0])
    assert doc["error"] == "DeleteDisabledError" and "storage.delete.enabled: true" in doc["message"]


# --- a registry's failures are the registry's, never "the engine stopped answering" --------------------------

def test_an_address_urllib3_cannot_parse_is_the_registrys_error():
    """A requests/urllib3 error that is no connection problem (here urllib3's LocationParseError, as a DNS
    label over 63 characters gives): a permanent registry failure naming the URL, not a raw exception."""
    import urllib3.exceptions

    reg = team()
    reg.fail_with = urllib3.exceptions.LocationParseError("'x', label empty or too long")
    real = reg.send

    def send(request, **kw):
        if request.path_url.startswith("/v2/_catalog"):
            raise reg.fail_with
        return real(request, **kw)

    reg.send = send
    sleeps: list = []
    with pytest.raises(EngineError) as err:
        prune(reg, sleeps=sleeps)
    assert type(err.value) is EngineError and sleeps == []  # not retried: a retry cannot fix it
    assert err.value.message.startswith(f"cannot read the catalog (/v2/_catalog) from registry {HOST}: ")
    assert "LocationParseError" in err.value.message and "engine" not in err.value.message + err.value.hint


def test_a_raw_requests_error_from_the_registry_client_is_named_as_the_registrys(monkeypatch):
    """Should a requests/urllib3 error still escape envkit's registry client, the CLI names the registry,
    not the engine (prune does not use the engine at all); exit 6 as every registry failure."""
    import urllib3.exceptions

    from envkit.registry.api import _retrying

    def fake(client, where, **kw):
        def boom():
            raise urllib3.exceptions.LocationParseError("Failed to parse: 'x'")

        return _retrying(boom, retries=0, backoff=0, sleep=lambda s: None, fail=lambda f, n: EngineError(f.message),
                         registry=HOST)

    monkeypatch.setattr(retention, "prune_registry", fake)
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: (_ for _ in ()).throw(EngineError("none")))
    out = CliRunner().invoke(main, ["registry", "prune", HOST, "--dry-run", "--json"])
    assert out.exit_code == 6, out.output
    doc = json.loads(out.stdout.split("\nerror:")[0])
    assert doc["error"] == "EngineError" and "engine" not in doc["message"] + doc["hint"]
    assert doc["message"].startswith(f"envkit registry prune: talking to registry {HOST} failed (Failed to parse")
    assert f"curl https://{HOST}/v2/" in doc["hint"]


# --- base mirrors are known by what they hold, not by a name an image may share ------------------------------

def with_base_named_image() -> FakeRegistry:
    """team() plus vision/base-tools, an envkit image whose name starts with base-, and a second mirror pushed
    under its base's own tag (not sha256-<hex>)."""
    reg = team()
    for n, days in enumerate((30, 20, 10), 1):
        reg.image("vision/base-tools", f"2.0.{n}-cu126-py3.12-abcdef0{n}", days)
    reg.image("vision/base-ubuntu-jammy", "jammy-minbase-0123abcd", 100, envkit=False)
    return reg


def test_an_envkit_image_named_base_is_pruned_and_mirrors_are_skipped():
    reg = with_base_named_image()
    doc = prune(reg, keep=1).to_json()
    assert [r["repository"] for r in doc["repositories"]] == ["vision/base-tools", "vision/torch25"]
    assert set(reg.tags("vision/base-tools")) == {"2.0.3-cu126-py3.12-abcdef03"}  # the two older ones went
    assert doc["skipped"] == [{"reference": f"{HOST}/vision/base-debian-bookworm", "reason": "base mirror repository"},
                              {"reference": f"{HOST}/vision/base-ubuntu-jammy", "reason": "base mirror repository"}]
    assert set(reg.tags("vision/base-debian-bookworm")) and set(reg.tags("vision/base-ubuntu-jammy"))


def test_ls_lists_an_envkit_image_named_base_and_skips_the_mirrors():
    from envkit.registry.remote import list_registry

    reg = with_base_named_image()
    reg.repos.pop("vision/torch25")  # its certificates are not real ones (ls reads them)
    session = requests.Session()
    session.mount("http://", reg)
    listing = list_registry(None, f"{HOST}/vision", session=session, sleep=lambda s: None)
    assert {r["tag"] for r in listing.rows if "/base-tools:" in r["tag"]} == {
        f"{HOST}/vision/base-tools:2.0.{n}-cu126-py3.12-abcdef0{n}" for n in (1, 2, 3)}
    mirrors = [s for s in listing.skipped if s["reason"] == "base mirror repository"]
    assert [s["reference"] for s in mirrors] == [f"{HOST}/vision/base-debian-bookworm",
                                                 f"{HOST}/vision/base-ubuntu-jammy"]
    asked = [a for a in reg.asked if "/vision/base-debian-bookworm/" in a]
    assert asked == ["GET /v2/vision/base-debian-bookworm/tags/list"]  # only sha256-<hex> tags: not read further


# --- a tag envkit did not make keeps its image ---------------------------------------------------------------

def test_envkit_made_tags():
    from envkit.registry.remote_parse import envkit_made

    for tag in ("2.5.1-cu124-py3.11-1a2b3c4d", "0.4.35-cuda12-py3.12-00000000", "2.18.0-and-cuda-py3.11-deadbeef",
                "certified", "2.5.1-cu124-py3.11-1a2b3c4d.cert-nvidia-h200", "sha256-" + "a" * 64):
        assert envkit_made(tag), tag
    for tag in ("prod", "latest", "2.5.1", "s1", "2.5.1-cu124-py3.11-1A2B3C4D", "2.5.1-cu124-py3.11-1a2b3c4",
                "v2.5.1-cu124-py3.11-1a2b3c4d"):
        assert not envkit_made(tag), tag


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_image_with_a_users_own_tag_is_kept_with_the_reason(dry_run):
    reg = team()
    digest = reg.tags("vision/torch25")[s(1)]  # the oldest: prune would delete it
    reg.repos["vision/torch25"]["tags"]["prod"] = digest
    doc = prune(reg, keep=2, dry_run=dry_run).to_json()
    rows = {tuple(i["tags"]): i for i in doc["repositories"][0]["images"]}
    kept = rows[(s(1), "prod")]
    assert kept["action"] == "keep" and kept["result"] is None
    assert kept["reasons"] == ["also tagged prod: a tag envkit did not make (its stack tags are "
                               "<version>-<variant>-py<python>-<lock hash>)"]
    assert rows[(s(3),)]["action"] == "delete"  # the others are decided as before
    assert reg.repos["vision/torch25"]["tags"]["prod"] == digest and s(1) in reg.tags("vision/torch25")
    assert not any(a.endswith(digest) for a in deletes(reg))
    assert all(a["action"] == "keep" for a in doc["repositories"][0]["artifacts"] if a["tag"].startswith(s(1)))
    assert len(doc["repositories"][0]["artifacts"]) == 4  # s1's two certificates stay with their image


# --- what prune warns about ---------------------------------------------------------------------------------

def test_a_path_matching_no_repository_is_warned_about():
    reg = team()
    doc = prune(reg, where=f"{HOST}/nope", keep=2).to_json()
    assert doc["repositories"] == [] and deletes(reg) == []
    assert doc["warnings"] == [f"no repository in registry {HOST} is 'nope' or under it (its repositories are "
                               f"under: tools, vision)"]
    assert prune(reg, where=f"{HOST}/vision", keep=2, dry_run=True).warnings == ()
    assert prune(FakeRegistry(), where=f"{HOST}/vision").warnings == (
        f"no repository in registry {HOST} is 'vision' or under it (it holds no repositories)",)


def test_a_dry_run_warns_when_the_registry_refuses_deletes():
    reg = team(delete=False)
    result = prune(reg, keep=2, dry_run=True)
    assert deletes(reg) == [] and len(probes(reg)) == 1
    assert result.counts()["images_deleted"] == 3  # the plan is still shown
    assert len(result.warnings) == 1 and "refuses deletes" in result.warnings[0]
    assert "the real run would fail" in result.warnings[0] and "storage.delete.enabled: true" in result.warnings[0]
    reg = team(delete=False)
    assert prune(reg, keep=10, dry_run=True).warnings == () and probes(reg) == []  # nothing would go: not asked


def test_cli_prints_warnings_on_stderr_and_in_json(cli_registry):
    out = CliRunner().invoke(main, ["registry", "prune", f"{HOST}/nope", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["warnings"] and "no repository in registry" in doc["warnings"][0]
    assert f"warning: no repository in registry {HOST} is 'nope' or under it" in out.stderr
    cli_registry.delete = False
    out = CliRunner().invoke(main, ["registry", "prune", f"{HOST}/vision", "--keep", "2", "--dry-run"])
    assert out.exit_code == 0 and "would delete" in out.stdout
    assert f"warning: registry {HOST} refuses deletes" in out.stderr
