"""Pre-releases no entry names, and releases left behind for want of a wheel (envkit/resolve/releases.py), over
recorded index answers: deepspeed's listing as PyPI gave it on 2026-12-07 (the finals have Windows wheels only;
0.3.1.dev1-dev5 of 2020 have a py3-none-any wheel)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date

import pytest
from packaging.version import Version

from envkit.index.closure import REQUESTED, Pin
from envkit.lock import HELD_BACK, PIP_TOPIC, Decision
from envkit.resolve import joint, releases


@dataclass(frozen=True)
class Wheel:
    upload_time: str | None


class RecordedIndex:
    """name -> [(version, upload time of its wheel for the image, or None when it has none)], newest first."""
    url = "https://pypi.org/simple"

    def __init__(self, listing):
        self.listing = listing

    def releases(self, project):
        return [Version(v) for v, _ in self.listing.get(project, [])]

    def versions(self, project):
        return [Version(v) for v, t in self.listing.get(project, []) if t is not None]

    def wheel_for(self, project, version, python, glibc):
        return next((Wheel(t) for v, t in self.listing.get(project, []) if Version(v) == version and t), None)


DEEPSPEED = RecordedIndex({"deepspeed": [("0.19.8", None), ("0.16.5", None), ("0.3.1.dev5", "2020-11-11T22:22:32Z"),
                                         ("0.3.1.dev4", "2020-11-02T22:08:49Z")]})


def _pin(name, version):
    return Pin(name, version, ("sha256:" + hashlib.sha256(f"{name}{version}".encode()).hexdigest(),), (REQUESTED,))


def target(*extras):
    return joint.Target("train", tuple(extras), "3.11", "2.36")


def test_a_pre_release_the_entry_does_not_name_is_refused_with_its_age_and_the_ways_out():
    pins = [_pin("torch", "2.8.0"), _pin("deepspeed", "0.3.1.dev5")]
    newest = {"deepspeed": joint.newest_admitted(DEEPSPEED, "deepspeed", "3.11", "2.36")}
    latest = {"deepspeed": releases.newest_release(DEEPSPEED, "deepspeed")}
    assert newest == {"deepspeed": None} and latest == {"deepspeed": "0.19.8"}
    with pytest.raises(releases.PrereleaseError) as exc:
        releases.refuse_prereleases(target("deepspeed"), pins, newest, latest, DEEPSPEED)
    err = exc.value
    assert err.package == "deepspeed" and err.exit_code == 4
    assert err.message.startswith("deepspeed would be locked at 0.3.1.dev5, a pre-release (uploaded 2020-11-11, ")
    assert "no final release 'deepspeed' admits has a wheel for the image (CPython 3.11" in err.message
    assert "the newest release it admits is 0.19.8" in err.message
    assert '"deepspeed==0.3.1.dev5"' in err.hint and "build.index_url" in err.hint


def test_an_entry_that_names_a_pre_release_admits_it():
    pins = [_pin("deepspeed", "0.3.1.dev5")]
    for entry in ("deepspeed==0.3.1.dev5", "deepspeed>=0.3.1.dev1"):
        releases.refuse_prereleases(target(entry), pins, {}, {}, DEEPSPEED)  # no error


def test_a_pre_release_the_closure_needs_for_another_package_is_not_an_entrys():
    # opentelemetry-semantic-conventions publishes betas only; vllm's closure needs one: PEP 440 allows it
    pins = [_pin("vllm", "0.10.1"), _pin("opentelemetry-semantic-conventions", "0.66b2")]
    releases.refuse_prereleases(target("vllm==0.10.1"), pins, {"vllm": "0.10.1"}, {"vllm": "0.10.1"}, DEEPSPEED)


def test_newest_release_keeps_to_the_requirement_and_skips_pre_releases():
    index = RecordedIndex({"numpy": [("2.5.0rc1", None), ("2.4.6", "x"), ("2.1.3", "x"), ("1.26.4", None)]})
    assert releases.newest_release(index, "numpy") == "2.4.6"
    assert releases.newest_release(index, "numpy<2") == "1.26.4"
    assert releases.newest_release(index, "numpy>=2.5.0rc1") == "2.5.0rc1"
    assert releases.newest_release(index, "scipy") is None
    rc = RecordedIndex({"numpy": [("2.5.0rc1", "x"), ("2.4.6", "x")]})  # packaging 26 alone would admit the rc
    assert joint.newest_admitted(rc, "numpy", "3.11", "2.36") == "2.4.6"
    assert joint.newest_admitted(rc, "numpy>=2.5.0rc1", "3.11", "2.36") == "2.5.0rc1"


def test_uploaded_says_the_date_and_the_age():
    assert releases.uploaded(DEEPSPEED, target(), "deepspeed", "0.3.1.dev5", today=date(2026, 12, 7)) \
        == "uploaded 2020-11-11, 6 years ago"
    assert releases.uploaded(DEEPSPEED, target(), "deepspeed", "0.19.8") == ""


def _report(name, version, newest):
    return joint.ExtraReport(name, version, newest, False, Decision(topic=PIP_TOPIC + name, choice=version,
                                                                    reason="the newest release ..."))


def test_a_release_kept_far_back_for_want_of_a_wheel_is_held_back():
    """The newest final with a wheel is 0.9.0 (2023); 2.3.0, which the entry admits, has none: HELD BACK."""
    index = RecordedIndex({"oldwheel": [("2.3.0", None), ("1.0.0", None), ("0.9.0", "2023-05-02T10:00:00Z")]})
    latest = {"oldwheel": releases.newest_release(index, "oldwheel")}
    (r,) = releases.mark_stale(target("oldwheel"), [_report("oldwheel", "0.9.0", "0.9.0")], latest, index)
    assert r.held_back and r.newest == "2.3.0" and r.decision.reason.startswith(HELD_BACK)
    assert "no release after 0.9.0 has a wheel for the image" in r.decision.reason
    assert "uploaded 2023-05-02" in r.decision.reason
    with pytest.raises(joint.PackageRefusal):  # build.held_back: refuse
        joint.refuse_held_back([r])


@pytest.mark.parametrize("version, newest, last", [("0.9.0", "0.9.0", "0.10.0"),  # close: not far behind
                                                   ("0.9.0", "1.2.0", "2.3.0"),  # newer wheels exist: uv's choice
                                                   ("2.3.0", "2.3.0", "2.3.0")])
def test_a_release_at_or_near_the_newest_is_not_marked(version, newest, last):
    index = RecordedIndex({})
    (r,) = releases.mark_stale(target("x"), [_report("x", version, newest)], {"x": last}, index)
    assert not r.held_back
