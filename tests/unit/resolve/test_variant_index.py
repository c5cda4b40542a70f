"""build.variant_index_url: a mirror of PyTorch's variant indexes (download.pytorch.org/whl/{variant}).

The spec's grammar and its refusals, the candidates and the plan with the override, the lock and what reads it
(render's pip flags, BuildKit's netrc, the bundle's indexes), doctor's probe, resolve's logins, and the ways out
when a variant index cannot be reached (``rules.unreachable_variant_ways_out``, against the real catalog).
No network: the indexes and the closure compiler are test_resolve's fakes.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.resolve.candidates import candidates
from envkit.catalog.files import load_catalog
from envkit.errors import PackageIndexError, SpecError
from envkit.resolve.plan import plan, spec_digest
from envkit.resolve.rules import unreachable_variant_ways_out
from envkit.spec import VARIANT_INDEX_RE, json_schema, load_spec, spec_from_document
from envkit.support.yamlsource import parse_yaml
from tests.conftest import ROOT
from tests.unit.resolve.test_resolve import SPEC_INDEX, FakeArches, FakeClosure, FakeIndex, decision

MIRROR = "http://mirror.corp.example:8080/pytorch/whl/{variant}"
CATALOG_INDEX = "https://download.pytorch.org/whl/"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def spec_text(variant_index: str | None = None, *, gpus="[V100, A100]", min_driver="535.104.05",
              framework="torch==2.11.*", policy="minor", index_url: str | None = None) -> str:
    """examples/variant.yaml's fleet (V100s: torch 2.11 comes as its cu126 build), with the build options given."""
    build = "".join(f'  {k}: "{v}"\n' for k, v in (("index_url", index_url), ("variant_index_url", variant_index)) if v)
    return (f'version: 1\nteam: research\nfleet:\n  min_driver: "{min_driver}"\n  policy: {policy}\n  gpus: {gpus}\n'
            + (f"build:\n{build}" if build else "")
            + f'images:\n  - name: torch211\n    framework: "{framework}"\n')


def load(text: str):
    return spec_from_document(parse_yaml(text, "team.yaml"))


# --- the spec -------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, cu126", [
    ("https://artifactory.corp.example/api/pypi/pytorch/whl/{variant}",
     "https://artifactory.corp.example/api/pypi/pytorch/whl/cu126"),
    ("http://mirror:8080/whl/{variant}", "http://mirror:8080/whl/cu126"),
    ("http://127.0.0.1:8080/whl/{variant}/", "http://127.0.0.1:8080/whl/cu126/"),
    ("https://m.example/torch-{variant}/simple", "https://m.example/torch-cu126/simple"),
])
def test_a_variant_index_template_is_read_and_filled_in(value, cu126):
    spec = load(spec_text(value))
    assert spec.build.variant_index_url == value and spec.build.variant_index("cu126") == cu126
    assert re.fullmatch(VARIANT_INDEX_RE, value)


@pytest.mark.parametrize("value, says", [
    ("https://mirror.corp.example/whl/", "has no {variant} field"),
    ("https://mirror.corp.example/whl/{tag}", "has no {variant} field"),  # the catalog's spelling is not the spec's
    ("https://mirror.corp.example/{variant}/{variant}", "has 2 {variant} fields"),
    ("https://{variant}.mirror.corp.example/simple", "has {variant} outside its path"),
    ("ftp://mirror.corp.example/whl/{variant}", "is not a valid variant index URL"),
    ("https://mirror.corp.example/whl/{variant}?token=x", "is not a valid variant index URL"),
    ("https://mirror.corp.example/whl/{variant}\nRUN id", "is not a valid variant index URL"),
    ("https://mirror.corp.example/whl/{ variant }", "has no {variant} field"),
])
def test_a_bad_variant_index_is_refused_at_its_line_with_the_value_and_what_to_do(write_spec, value, says):
    path = write_spec(spec_text("PLACEHOLDER").replace('"PLACEHOLDER"', json.dumps(value)))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    e = err.value
    assert (e.location.path, e.location.line) == (str(path), 8), str(e)
    assert e.message.startswith(f"build.variant_index_url: {value!r} {says}"), e.message
    assert "{variant}" in e.message and "mirror" in e.message  # what is wanted, with an example
    assert not re.fullmatch(VARIANT_INDEX_RE, value)  # and the schema's pattern refuses it too


def test_a_login_in_the_variant_index_is_refused_without_echoing_it(write_spec):
    path = write_spec(spec_text("https://ci:s3cret@artifactory.corp.example/whl/{variant}"))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.location.line == 8 and "s3cret" not in str(err.value)
    assert "machine artifactory.corp.example login USER password TOKEN" in err.value.message


def test_an_unknown_key_beside_it_names_it_as_allowed(write_spec):
    path = write_spec(spec_text().replace("images:", 'build:\n  variant_index: "https://m/whl/{variant}"\nimages:'))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert "did you mean 'variant_index_url'?" in err.value.hint


def test_the_schema_publishes_the_loaders_grammar():
    field = json_schema()["$defs"]["BuildOptions"]["properties"]["variant_index_url"]
    assert field["anyOf"][0]["pattern"] == VARIANT_INDEX_RE.pattern
    assert "{variant}" in field["description"]


def test_an_unset_variant_index_leaves_the_spec_digest_and_so_every_lock_as_it_was():
    """The field is left out of the dump when unset: a lock written before it existed stays current."""
    spec = load_spec(ROOT / "examples" / "team.yaml")
    assert "variant_index_url" not in spec.model_dump()["build"]
    assert spec_digest(spec) == json.loads((ROOT / "examples" / "team.lock").read_text())["spec_digest"]
    text = spec_text()
    assert spec_digest(load(text)) != spec_digest(load(spec_text(MIRROR)))  # setting it makes the lock stale


# --- candidates and the plan --------------------------------------------------------------------------

def test_candidates_take_non_default_torch_builds_from_the_mirror(catalog):
    req = Requirement("torch>=2.5")
    plain = candidates(req, catalog)
    mirrored = candidates(req, catalog, variant_index=MIRROR)
    assert [c.label for c in mirrored] == [c.label for c in plain]  # the same builds, in the same order
    for before, after in zip(plain, mirrored):
        if before.default:
            assert before.index is after.index is None  # the index default comes from the spec's index
        else:
            assert before.index == CATALOG_INDEX + before.variant
            assert after.index == MIRROR.replace("{variant}", after.variant)
            assert after == replace(before, index=after.index)  # nothing else differs
    for other in ("jax[cuda13]", "tensorflow[and-cuda]"):  # one index each: the spec's
        assert all(c.index is None for c in candidates(Requirement(other), catalog, variant_index=MIRROR))


def test_the_plan_and_explain_name_the_mirror(catalog):
    (p,) = plan(load(spec_text(MIRROR)), catalog)
    assert (p.chosen.label, p.chosen.index) == ("torch 2.11.0 (cu126)", "http://mirror.corp.example:8080/pytorch/whl/cu126")
    assert decision(p, "torch").reason.endswith("so it comes from http://mirror.corp.example:8080/pytorch/whl/cu126")
    (p,) = plan(load(spec_text()), catalog)
    assert p.chosen.index == CATALOG_INDEX + "cu126"


class MirrorIndexes:
    """The spec's index, and (``index_for``) the mirror's variant indexes; the catalog's are never asked."""

    def __init__(self, catalog):
        self.catalog, self.main, self.made = catalog, FakeIndex(catalog), {}

    def index_for(self, url: str) -> FakeIndex:
        assert url.startswith("http://mirror.corp.example:8080/pytorch/whl/"), url
        return self.made.setdefault(url, FakeIndex(self.catalog, url, tag=url.rstrip("/").rsplit("/", 1)[-1]))


def resolve_mirrored(catalog, closure=None):
    from envkit.resolve.resolver import resolve

    indexes = MirrorIndexes(catalog)
    lock = resolve(load(spec_text(MIRROR, index_url=SPEC_INDEX)), catalog, indexes.main, closure=closure or FakeClosure(),
                   index_for=indexes.index_for, arch_reader=FakeArches(catalog))
    return lock.images[0], indexes


def test_the_lock_records_the_mirror_and_the_closure_is_asked_there_first(catalog):
    closure = FakeClosure()
    image, indexes = resolve_mirrored(catalog, closure)
    cu126 = "http://mirror.corp.example:8080/pytorch/whl/cu126"
    assert (image.variant, image.index_url, image.extra_index_url) == ("cu126", cu126, SPEC_INDEX)
    assert list(indexes.made) == [cu126] and ("wheel_for", "torch", "2.11.0", "3.11", "2.36") in indexes.made[cu126].calls
    assert all((c["index_url"], c["extra_index_url"]) == (cu126, SPEC_INDEX) for c in closure.calls)
    assert f"metadata on {cu126}" in decision(image, "bundled").reason


def test_render_build_and_bundle_use_the_lock_s_mirror(catalog, tmp_path, monkeypatch):
    """uv in the build asks the mirror as the resolver did (uv asks --extra-index-url first; an http index needs no
    flag), BuildKit's netrc secret holds the mirror host's login, and a bundle downloads from the mirror, then the
    spec's index."""
    from envkit.images.wheelhouse import lock_indexes
    from envkit.index.login import netrc_for
    from envkit.render.files import _uv_index_flags, index_urls

    image, _ = resolve_mirrored(catalog)
    cu126 = "http://mirror.corp.example:8080/pytorch/whl/cu126"
    assert _uv_index_flags(image) == f" --index-url {SPEC_INDEX} --extra-index-url {cu126}"
    netrc = tmp_path / "netrc"
    netrc.write_text("machine mirror.corp.example login ci password tok\nmachine other.example login a password b\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert netrc_for(index_urls(image)) == b"machine mirror.corp.example login ci password tok\n"
    assert lock_indexes(image, None) == [cu126, SPEC_INDEX]


# --- doctor -----------------------------------------------------------------------------------------

@pytest.fixture
def no_engine(monkeypatch, tmp_path):
    from envkit.errors import EngineError

    def refuse():
        raise EngineError("no engine in this test")

    monkeypatch.setattr("envkit.engine.docker_engine.connect", refuse)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "ENVKIT_CA_BUNDLE", "PIP_CERT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "history.sqlite"


@pytest.mark.parametrize("mirrored", [False, True])
def test_doctor_probes_the_mirror_and_offers_one_when_pytorchs_index_fails(no_engine, monkeypatch, write_spec,
                                                                          mirrored):
    from click.testing import CliRunner

    from envkit.cli import main
    from envkit.ops.doctor_index import MIRROR_HINT, framework_indexes
    from envkit.ops.findings import Finding

    path = write_spec(spec_text(MIRROR if mirrored else None))
    variant = "http://mirror.corp.example:8080/pytorch/whl/cu126" if mirrored else CATALOG_INDEX + "cu126"
    assert framework_indexes(load_spec(path)) == {variant: ["torch211"]}
    asked = []

    def probe(url, bundle, **kw):
        asked.append(url)
        return Finding("index", "ok" if "pypi.org" in url else "fail", f"{url}/…: cannot connect", "check the network")

    monkeypatch.setattr("envkit.ops.doctor.index_finding", probe)
    result = CliRunner().invoke(main, ["doctor", "--spec", str(path), "--store", str(no_engine), "--json"])
    found = {f["name"]: f for f in json.loads(result.stdout)["findings"]}
    assert asked == ["https://pypi.org/simple", variant]
    assert found["framework_index"]["status"] == "fail" and found["framework_index"]["value"].endswith("(for torch211)")
    assert (MIRROR_HINT in found["framework_index"]["hint"]) is not mirrored  # a mirror already set: not offered again


# --- resolve: logins and the ways out ---------------------------------------------------------------

class Stop(Exception):
    pass


def test_resolve_checks_the_netrc_and_asks_the_keyring_for_the_mirror(monkeypatch, write_spec):
    from envkit.app import resolve as pipeline

    path = write_spec(spec_text(MIRROR))
    seen = {}
    monkeypatch.setattr(pipeline, "check_netrc", lambda: seen.setdefault("checked", True))

    class Logins:
        def __init__(self, urls):
            seen["urls"] = list(urls)

        def __enter__(self):
            return []

        def __exit__(self, *exc):
            return False

    def fake_resolve(spec, catalog, index, *, closure, index_for, sizes):
        seen["variant"] = index_for("http://mirror.corp.example:8080/pytorch/whl/cu126").url
        raise Stop

    monkeypatch.setattr(pipeline, "keyring_logins", Logins)
    monkeypatch.setattr(pipeline, "resolve", fake_resolve)
    with pytest.raises(Stop):
        pipeline.resolve_spec(path)
    assert seen["checked"] and seen["variant"] == "http://mirror.corp.example:8080/pytorch/whl/cu126"
    assert seen["urls"][0] is None  # the spec's index: PyPI, never asked
    assert "http://mirror.corp.example:8080/pytorch/whl/cu126" in seen["urls"][1:]
    assert all(u.startswith("http://mirror.corp.example:8080/pytorch/whl/cu") for u in seen["urls"][1:])


@pytest.mark.parametrize("mirrored", [False, True])
def test_an_unreachable_variant_index_says_the_ways_out(monkeypatch, write_spec, mirrored):
    from envkit.app import resolve as pipeline

    path = write_spec(spec_text(MIRROR if mirrored else None, gpus="[A100]"))
    cu128 = ("http://mirror.corp.example:8080/pytorch/whl/" if mirrored else CATALOG_INDEX) + "cu128"

    def fake_resolve(*args, **kwargs):
        raise PackageIndexError(f"image 'torch211': cannot reach the package index at {cu128}/torch/: "
                                "Max retries exceeded", hint="check the network")

    monkeypatch.setattr(pipeline, "resolve", fake_resolve)
    with pytest.raises(PackageIndexError) as err:
        pipeline.resolve_spec(path)
    hint = err.value.hint
    assert hint.startswith("check the network\n  ways out:\n    - ")
    assert cu128 in hint and ('set build.variant_index_url' in hint) is not mirrored
    assert 'use framework: "torch==2.10.*"' in hint
    assert "a fleet driver >= 580 runs torch 2.11.0's default cu130 build from PyPI" in hint


def test_a_login_refusal_keeps_its_own_hint(monkeypatch, write_spec):
    from envkit.app import resolve as pipeline

    path = write_spec(spec_text(MIRROR))

    def fake_resolve(*args, **kwargs):
        raise PackageIndexError("image 'torch211': http://mirror.corp.example:8080/pytorch/whl/cu126/torch/ answered "
                                "401 Unauthorized: the index asks for a login", hint="add `machine ...`")

    monkeypatch.setattr(pipeline, "resolve", fake_resolve)
    with pytest.raises(PackageIndexError) as err:
        pipeline.resolve_spec(path)
    assert err.value.hint == "add `machine ...`"


# --- rules.unreachable_variant_ways_out, on the real catalog ------------------------------------------

def ways(catalog, text: str, *, cuda: str | None = None) -> str:
    spec = load(text)
    (p,) = plan(spec, catalog)
    return unreachable_variant_ways_out(p.chosen, catalog, p.fleet, p.python, SpecifierSet(cuda) if cuda else None,
                                        Requirement(spec.images[0].framework), spec.build.variant_index_url,
                                        spec.build.index_url)


def test_ways_out_for_volta_a_mirror_or_the_newest_default_build_that_covers_it(catalog):
    """V100 + A100 on 535: torch 2.11's default cu130 has no Volta kernels (no driver helps), its cu126 comes from
    download.pytorch.org; torch 2.10's default cu128 still has sm_70."""
    assert ways(catalog, spec_text()) == (
        "ways out:\n"
        "    - set build.variant_index_url to a mirror of https://download.pytorch.org/whl/{variant}: torch 2.11.0 (cu126) "
        "comes from https://download.pytorch.org/whl/cu126, which could not be reached "
        '(e.g. variant_index_url: "https://mirror.corp.example/pytorch/whl/{variant}")\n'
        '    - use framework: "torch==2.10.*": torch 2.10.0\'s default cu128 build, from PyPI, fits this fleet')


def test_ways_out_name_the_driver_that_runs_the_default_build(catalog):
    text = ways(catalog, spec_text(gpus="[A100]"))
    assert "torch 2.11.0 (cu128) comes from https://download.pytorch.org/whl/cu128" in text
    assert text.endswith("    - a fleet driver >= 580 runs torch 2.11.0's default cu130 build from PyPI: raise "
                         "fleet.min_driver to >= 580")


def test_ways_out_under_strict_policy_name_both_floors(catalog):
    text = ways(catalog, spec_text(gpus="[A100]", policy="strict", min_driver="570.124.06"))
    assert text.endswith("a fleet driver >= 580.95.05 runs torch 2.11.0's default cu130 build from PyPI: raise "
                         "fleet.min_driver to >= 580.95.05 (>= 580 under policy: minor)")


def test_ways_out_when_the_mirror_itself_failed_and_the_spec_has_its_own_index(catalog):
    text = ways(catalog, spec_text(MIRROR, gpus="[A100]", index_url="https://pypi.corp.example/simple"))
    assert text.splitlines()[1] == (
        "    - make the mirror in build.variant_index_url answer for cu128: torch 2.11.0 (cu128) comes from "
        "http://mirror.corp.example:8080/pytorch/whl/cu128, which could not be reached; or point it at another mirror "
        "of https://download.pytorch.org/whl/{variant}")
    assert "torch 2.10.0's default cu128 build, from https://pypi.corp.example/simple, fits" in text
    assert "default cu130 build from https://pypi.corp.example/simple" in text


def test_ways_out_honour_the_cuda_constraint(catalog):
    """With cuda <13 on a new driver only CUDA 12 builds count: the newest default one, and no driver way (the
    default cu130 is refused by the constraint, not the driver)."""
    text = ways(catalog, spec_text(gpus="[A100]", min_driver="580.95.05", framework="torch").replace(
        'framework: "torch"', 'framework: "torch"\n    cuda: "<13"'), cuda="<13")
    assert 'use framework: "torch==2.10.*": torch 2.10.0\'s default cu128 build' in text
    assert "fleet driver" not in text


def test_ways_out_offer_no_default_build_when_none_fits(catalog):
    """A K80 (cc 3.7) on trixie's Python 3.13: only torch 2.7's cu118 build covers it."""
    text = ways(catalog, spec_text(gpus="[K80]", min_driver="575.57.08", framework="torch").replace(
        'framework: "torch"', 'framework: "torch"\n    base: {image: "debian:trixie"}'))
    assert text.splitlines()[1:] == [
        "    - set build.variant_index_url to a mirror of https://download.pytorch.org/whl/{variant}: torch 2.7.1 (cu118) "
        "comes from https://download.pytorch.org/whl/cu118, which could not be reached "
        '(e.g. variant_index_url: "https://mirror.corp.example/pytorch/whl/{variant}")']


# --- the variant index's wheel names ------------------------------------------------------------------

def test_a_variant_index_s_local_version_is_the_release_asked_for(tmp_path):
    """download.pytorch.org/whl/cu126 (and its mirrors) name torch 2.11.0's build torch-2.11.0+cu126-...: the
    resolver asks for 2.11.0, and gets it as `torch==2.11.0` would (PEP 440: a local label matches); a wheel of
    exactly the version asked for wins."""
    from tests.unit.index.test_index import IndexServer, build_wheel, make_index

    wheel = build_wheel("torch", "2.11.0", [], layout="small")
    server = IndexServer().start()
    try:
        server.add("torch", wheel, filename="torch-2.11.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl")
        server.add("torch", wheel, filename="torch-2.10.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl")
        idx = make_index(server, tmp_path / "cache")
        found = idx.wheel_for("torch", Version("2.11.0"), "3.11", "2.36")
        assert found.filename == "torch-2.11.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl"
        assert idx.wheel_for("torch", Version("2.11.0"), "3.12", "2.36") is None
        assert idx.wheel_for("torch", Version("2.11.0+cu128"), "3.11", "2.36") is None  # another local: not it
        server.add("torch", wheel, filename="torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl")
        idx = make_index(server, tmp_path / "cache")
        assert idx.wheel_for("torch", Version("2.11.0"), "3.11", "2.36").filename == (
            "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    finally:
        server.stop()


@pytest.mark.parametrize("text, unreachable", [
    ("cannot reach the package index at {u}/torch/: Max retries exceeded", True),
    ("cause: Failed to fetch: {u}/torch/\n  cause: Connection refused (os error 111)", True),  # uv
    ("cause: error sending request for url ({u}/torch/)\n  cause: dns error", True),  # uv
    ("the index {u} has no project 'torch'", True),
    ("{u}/torch/ answered 503 without the simple JSON API", True),
    # uv reached it: torch was taken from another index (no ways out of this kind)
    ("hint: `torch` was found on https://pypi.org/simple, but not at the requested version (torch==2.11.0+cu126). "
     "A compatible version may be available on a subsequent index (e.g., {u})", False),
    ("{u}/torch/ answered 401 Unauthorized: the index asks for a login", False),
    ("cannot reach the package index at https://pypi.org/simple/torch/: refused", False),  # another index
])
def test_only_an_index_that_did_not_answer_counts_as_unreachable(text, unreachable):
    from envkit.app.resolve import _unreachable

    url = "http://mirror.corp.example:8080/pytorch/whl/cu126"
    assert _unreachable(text.format(u=url), url) is unreachable
