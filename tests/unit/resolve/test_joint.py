"""The joint solve of a framework and its extras (envkit/joint.py), with a fake uv and a fake index.

The fake uv below models what matters here: the newest framework release the requirement admits
that every extra's own framework pin also admits, companions paired only if a constraint says so,
and uv's refusals (no solution; no wheel). The live behaviour is tests/network/test_corpus.py.
"""

from __future__ import annotations

import hashlib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.resolve import joint
from envkit.resolve.candidates import Candidate
from envkit.catalog.models import PyRange
from envkit.index.closure import REQUESTED, ClosureError, Pin, framework_group, parse_requirements
from envkit.errors import ResolutionError

TORCH = ["2.8.0", "2.7.1", "2.7.0", "2.6.0", "2.5.1"]
# what each extra requires of torch, and the companion it is
NEEDS = {"xformers": ("0.0.29.post3", "==2.6.0"), "vllm": ("0.10.1", "==2.7.1"), "torchaudio": ("2.8.0", ""),
         "transformers": ("4.57.6", "")}


def _pin(name, version, *via):
    return Pin(name, version, ("sha256:" + hashlib.sha256(f"{name}{version}".encode()).hexdigest(),), via)


class FakeUV:
    def __init__(self, no_wheel=None, unsolvable=()):
        self.calls = []
        self.no_wheel = no_wheel
        self.unsolvable = set(unsolvable)

    def __call__(self, requirements, *, python, glibc, index_url, extra_index_url=None, extra_constraints=None,
                 constraints=None):
        self.calls.append({"requirements": list(requirements), "index_url": index_url,
                           "extra_index_url": extra_index_url, "extra_constraints": list(extra_constraints or ())})
        fw = Requirement(requirements[0])
        names = {Requirement(r).name for r in requirements[1:]}
        if self.no_wheel in names:
            raise ClosureError("no solution", cause=f"{self.no_wheel} has no usable wheels", no_wheel=self.no_wheel)
        if names & self.unsolvable:
            raise ClosureError("no solution", cause="Because the extras conflict, no solution")
        public, _, local = str(fw.specifier).partition("+")  # a variant's own build: torch==2.7.1+cu118
        spec = SpecifierSet(public)
        for r in requirements[1:]:
            spec &= SpecifierSet(NEEDS[Requirement(r).name][1])
        version = next((v for v in TORCH if spec.contains(v)), None)
        if version is None:
            raise ClosureError("no solution", cause=f"Because the extras need another {fw.name}, no solution")
        pins = [_pin(fw.name, version + (f"+{local}" if local else ""), REQUESTED), _pin("filelock", "3.16.1", "torch")]
        for r in requirements[1:]:
            name = Requirement(r).name
            v = NEEDS[name][0]
            for c in extra_constraints or ():
                cr = Requirement(c)
                if cr.name == name:
                    v = next(x for x in ("2.8.0", "2.7.1", "2.6.0") if cr.specifier.contains(x))
            pins.append(_pin(name, v, REQUESTED))
        return pins


class FakeCatalog:
    def companions(self, framework, version):
        return {"torchaudio": f"=={Version(version).major}.{Version(version).minor}.*"}

    def companion_names(self, framework):
        return frozenset({"torchaudio", "torchvision"})


class FakeIndex:
    url = "https://pypi.example/simple"

    def __init__(self, wheels=None):
        self.wheels = wheels or {}  # name -> [(version, has a wheel for the image)]

    def versions(self, project):
        return [Version(v) for v, _ in self.wheels.get(project, [])]

    def releases(self, project):
        return self.versions(project)

    def wheel_for(self, project, version, python, glibc):
        return next((object() for v, ok in self.wheels.get(project, []) if Version(v) == version and ok), None)


def cand(version, variant="cu126", default=True):
    return Candidate("torch", version, variant, "12.6", None, None, ("8.0",), None, PyRange(min="3.9", max="3.13"), default,
                     None if default else f"https://download.pytorch.org/whl/{variant}",
                     f"torch=={version}" if default else f"torch=={version}+{variant}", True)


VIABLE = [cand("2.8.0"), cand("2.7.1"), cand("2.7.0"), cand("2.6.0"), cand("2.5.1")]
KNOWN = {Version(v) for v in TORCH}


def target(*extras):
    return joint.Target("img", tuple(extras), "3.11", "2.36")


def solve(*extras, viable=VIABLE, uv=None, index=None):
    uv = uv or FakeUV()
    return joint.solve(target(*extras), list(viable), FakeCatalog(), index or FakeIndex(), uv, KNOWN), uv


def test_version_spec_fences_the_catalogs_other_releases():
    allowed = {Version("2.6.0"), Version("2.8.0")}
    assert joint.version_spec(allowed, KNOWN) == ">=2.6.0,<=2.8.0,!=2.7.0,!=2.7.1"


@pytest.mark.parametrize("extra, version", [("xformers==0.0.29.post3", "2.6.0"), ("vllm==0.10.1", "2.7.1")])
def test_an_extra_that_needs_an_older_framework_gets_it_in_one_solve(extra, version):
    j, uv = solve(extra)
    assert j.candidate.version == version and len(uv.calls) == 1 and j.probes == 1
    assert uv.calls[0]["requirements"][0] == "torch>=2.5.1,<=2.8.0" and uv.calls[0]["index_url"] == FakeIndex.url
    assert j.why == f"torch 2.8.0 (cu126) fits the fleet, but the extras ({extra}) allow torch {version} at most"


def test_the_newest_build_needs_no_reason():
    j, _ = solve("transformers")
    assert j.candidate == VIABLE[0] and j.why is None


def test_a_non_default_variant_is_solved_again_from_its_own_index():
    viable = [cand("2.7.1", "cu118", default=False), cand("2.6.0")]
    j, uv = solve("vllm==0.10.1", viable=viable)
    assert j.candidate == viable[0] and len(uv.calls) == 2
    final = uv.calls[1]
    assert final["requirements"][0] == "torch==2.7.1+cu118"
    assert final["index_url"] == "https://download.pytorch.org/whl/cu118" and final["extra_index_url"] == FakeIndex.url
    assert j.fw_url == final["index_url"] and j.extra_index_url == FakeIndex.url


def test_an_unpaired_companion_is_solved_again_with_the_catalogs_pairing():
    """torchaudio >= 2.9 declares no torch pin: uv may pair it with any torch; the catalog's row decides."""
    j, uv = solve("xformers==0.0.29.post3", "torchaudio")
    assert j.candidate.version == "2.6.0" and len(uv.calls) == 2
    assert "torchaudio==2.6.*" in uv.calls[1]["extra_constraints"]
    assert {p.name: p.version for p in j.pins}["torchaudio"] == "2.6.0"


def test_a_companion_version_narrows_the_framework():
    j, uv = solve("torchaudio==2.7.*")
    assert j.candidate.version == "2.7.1"
    assert uv.calls[0]["requirements"][0] == "torch>=2.7.0,<=2.7.1"


def test_a_companion_that_pairs_with_no_build_that_fits_is_named():
    with pytest.raises(ResolutionError) as exc:
        solve("torchaudio==2.4.*")
    assert exc.value.message.startswith("torchaudio==2.4.* pairs with no torch build that fits this fleet")
    assert "2.8.0" in exc.value.message


def test_extras_that_fit_no_build_say_uvs_reason():
    with pytest.raises(ClosureError) as exc:
        solve("transformers", uv=FakeUV(unsolvable={"transformers"}))
    assert "cannot be installed beside any torch build that fits this fleet" in exc.value.message
    assert "Because the extras conflict" in exc.value.message


def test_a_package_without_a_wheel_is_refused_with_the_newest_that_has_one():
    index = FakeIndex({"numpy": [("2.4.6", True), ("1.21.6", False)]})
    with pytest.raises(joint.NoWheelError) as exc:
        solve("transformers", uv=FakeUV(no_wheel="transformers"),
              index=FakeIndex({"transformers": [("4.57.6", True), ("4.12.2", False)]}))
    assert exc.value.package == "transformers" and exc.value.exit_code == 4
    assert "the newest release of transformers with a wheel for it is 4.57.6" in exc.value.message
    assert '"transformers==4.57.6"' in exc.value.hint and "does not build packages from source" in exc.value.hint
    assert "build.index_url" in exc.value.hint
    assert joint.newest_with_wheel(index, "numpy", "3.11", "2.36") == "2.4.6"


def test_a_package_with_no_wheel_at_all_says_so():
    with pytest.raises(joint.NoWheelError) as exc:
        solve("transformers", uv=FakeUV(no_wheel="transformers"), index=FakeIndex({"transformers": []}))
    assert "no release of transformers on https://pypi.example/simple has a wheel" in exc.value.message


def test_an_extra_held_back_a_series_says_what_held_it():
    j, _ = solve("transformers")
    uv = FakeUV(unsolvable={"transformers"})
    reports = joint.report_extras(target("transformers"), j, {"transformers": "5.1.0"}, uv)
    (r,) = reports
    assert r.held_back and r.version == "4.57.6" and r.newest == "5.1.0"
    assert r.decision.topic == "pip transformers" and "held back: 5.1.0 is the newest" in r.decision.reason
    assert "uv says: Because the extras conflict" in r.decision.reason
    assert uv.calls[0]["requirements"][-1] == "transformers>=5.1.0"


def test_a_policy_of_refuse_fails_on_a_package_held_far_back():
    j, _ = solve("transformers")
    reports = joint.report_extras(target("transformers"), j, {"transformers": "5.1.0"},
                                  FakeUV(unsolvable={"transformers"}))
    with pytest.raises(joint.PackageRefusal) as exc:
        joint.refuse_held_back(reports)
    assert exc.value.package == "transformers" and exc.value.exit_code == 4
    assert exc.value.message.startswith("transformers would be locked at 4.57.6, far behind 5.1.0")
    assert "uv says: Because the extras conflict" in exc.value.message
    joint.refuse_held_back(joint.report_extras(target("transformers"), j, {"transformers": "4.57.6"}, FakeUV()))


@pytest.mark.parametrize("newest, held, words", [("4.57.6", False, "the newest release"),
                                                 ("4.57.9", False, "close enough not to ask uv why"),
                                                 ("4.59.0", False, "close enough not to ask uv why"),
                                                 (None, False, "could not be listed")])
def test_extras_at_or_near_their_newest_are_not_held_back(newest, held, words):
    j, _ = solve("transformers")
    (r,) = joint.report_extras(target("transformers"), j, {"transformers": newest}, FakeUV())
    assert r.held_back is held and words in r.decision.reason


@pytest.mark.parametrize("locked, newest, far", [("4.12.2", "4.57.6", True), ("4.54.0", "4.57.6", True),
                                                ("4.55.0", "4.57.6", False), ("5.0.1", "5.2.0", False),
                                                ("0.9", "1.0", True), ("2024.10.0", "2026.9.0", True)])
def test_far_behind_is_a_major_or_three_minors(locked, newest, far):
    assert joint.far_behind(locked, newest) is far


def test_newest_admitted_keeps_to_the_requirement_and_the_image():
    index = FakeIndex({"numpy": [("2.4.6", True), ("2.1.3", True), ("2.1.4", False)]})
    assert joint.newest_admitted(index, "numpy==2.1.*", "3.11", "2.36") == "2.1.3"
    assert joint.newest_admitted(index, "numpy", "3.11", "2.36") == "2.4.6"
    # a companion: the newest that pairs with the framework release, not the index's newest
    vision = FakeIndex({"torchvision": [("0.26.0", True), ("0.21.0", True), ("0.20.1", True)]})
    assert joint.newest_admitted(vision, "torchvision", "3.11", "2.36", "==0.21.*") == "0.21.0"


UV_OUT = """\
accelerate==1.16.0 \\
    --hash=sha256:{h}
    # via peft, -r /tmp/x/requirements.in
filelock==4.3.2 \\
    --hash=sha256:{h}
    # via huggingface-hub, torch
peft==0.21.2 \\
    --hash=sha256:{h}
    # via -r /tmp/x/requirements.in
torch==2.8.0 \\
    --hash=sha256:{h}
    # via accelerate, peft, -r /tmp/x/requirements.in
triton==3.4.0 \\
    --hash=sha256:{h}
    # via torch
huggingface-hub==0.36.2 \\
    --hash=sha256:{h}
    # via accelerate, -c /tmp/x/constraints.txt
""".format(h="0" * 64)


def test_uvs_annotations_tell_the_frameworks_closure_from_the_extras():
    pins = parse_requirements(UV_OUT)
    by = {p.name: p.via for p in pins}
    assert by["accelerate"] == ("peft", REQUESTED) and by["huggingface-hub"] == ("accelerate",)
    assert framework_group(pins, "torch") == {"torch", "filelock", "triton"}


def test_builds_that_all_pair_alike_are_probed_with_the_pairing_in_one_solve():
    """A series spec (torch==2.7.*): every build pairs torchaudio==2.7.*, so the probe asks it and needs no second
    solve to pair it (vision in examples/research.yaml: 4.8 s -> 3.5 s)."""
    j, uv = solve("torchaudio", viable=[cand("2.7.1"), cand("2.7.0")])
    assert len(uv.calls) == 1 and j.probes == 1
    assert "torchaudio==2.7.*" in uv.calls[0]["extra_constraints"]
    assert {p.name: p.version for p in j.pins}["torchaudio"] == "2.7.1"
