"""What the joint solve does not say about an image's ``pip:`` packages: pre-releases and releases left behind for
want of a wheel.

- **A pre-release the entry does not name is never locked** (PEP 440: a specifier admits pre-releases only when it
  names one, ``SpecifierSet.prereleases``). uv falls back to one when no final release the entry admits can be
  installed: ``pip: ["deepspeed"]`` beside torch 2.8 would lock deepspeed 0.3.1.dev5, a 2020 development release,
  the last with a Linux wheel. ``refuse_prereleases`` refuses it at the entry, naming the package, the release and
  its age, the newest release the entry admits, and the ways out.
- **A release kept far behind because the newer ones have no wheel for the image** (the newest the entry admits
  is sdist-only, or Windows-only) is marked HELD BACK (``mark_stale``), saying so and the age of what is locked;
  ``build.held_back: refuse`` then fails the resolve as for any package held far back.
"""

from __future__ import annotations

from datetime import date
from typing import Iterable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import PackageIndexError
from ..index.closure import Pin
from ..lock import HELD_BACK, Decision
from .joint import ExtraReport, Index, PackageRefusal, Target, admits, far_behind


class PrereleaseError(PackageRefusal):
    """A pip: package would be locked at a pre-release its entry does not name."""


def where(t: Target) -> str:
    return f"CPython {t.python} on x86_64 with glibc {t.glibc}"


def newest_release(index: Index, requirement: str) -> str | None:
    """The newest release ``requirement`` admits, with a wheel for the image or not (no pre-releases unless it
    names one): what the newest-with-a-wheel is measured against. None when the index cannot list it."""
    req = Requirement(requirement)
    try:
        admitted = [v for v in index.releases(canonicalize_name(req.name)) if admits(req.specifier, v)]
    except (PackageIndexError, InvalidVersion):
        return None
    return str(admitted[0]) if admitted else None


def uploaded(index: Index, t: Target, name: str, version: str, today: date | None = None) -> str:
    """'uploaded 2020-11-11, 6 years ago' for the wheel of ``name==version`` the image installs ('' when the
    index gives no date)."""
    try:
        wheel = index.wheel_for(name, Version(version), t.python, t.glibc)
    except (PackageIndexError, InvalidVersion):
        return ""
    stamp = getattr(wheel, "upload_time", None)
    if not stamp:
        return ""
    day = date.fromisoformat(stamp[:10])
    years = ((today or date.today()) - day).days / 365.25
    age = f"{int(years)} year{'s' if int(years) != 1 else ''} ago" if years >= 1 else f"{int(years * 12)} months ago"
    return f"uploaded {day.isoformat()}, {age}"


def refuse_prereleases(t: Target, pins: Iterable[Pin], newest: dict[str, str | None],
                       latest: dict[str, str | None], index: Index) -> None:
    """Refuse the first ``pip:`` package locked at a pre-release its entry does not name. ``newest``: the newest
    final release each entry admits with a wheel for the image; ``latest``: with or without one."""
    by = {p.name: p.version for p in pins}
    for extra in t.extras:
        req = Requirement(extra)
        name = canonicalize_name(req.name)
        locked = by.get(name)
        if locked is None or not Version(locked).is_prerelease or req.specifier.prereleases:
            continue
        age = uploaded(index, t, name, locked)
        top, last = newest.get(name), latest.get(name)
        if top is None:
            why = f"no final release {extra!r} admits has a wheel for the image ({where(t)})"
            pin = ""
        else:
            why = (f"{top}, the newest final release {extra!r} admits with a wheel for the image, cannot be "
                   "installed beside the other packages")
            pin = f'pin "{name}=={top}" to hear uv say what stands in its way, '
        newest_words = f"; the newest release it admits is {last}" if last and last != top else ""
        raise PrereleaseError(
            f"{name} would be locked at {locked}, a pre-release ({age or 'upload date unknown'}) that the pip: entry "
            f"{extra!r} does not name (PEP 440: a pre-release only when the requirement names one): {why}"
            f"{newest_words}",
            package=name,
            hint=pin + f'ask for the pre-release on purpose ("{name}=={locked}" in pip:), build a {name} wheel for '
                       f"the image (cp{t.python.replace('.', '')}, manylinux, x86_64) and serve it from the team's own "
                       "index (build.index_url), or drop the package; envkit installs wheels only")


def mark_stale(t: Target, reports: list[ExtraReport], latest: dict[str, str | None], index: Index) -> list[ExtraReport]:
    """Reports of packages locked at the newest release with a wheel, but far behind the newest release their entry
    admits (which has none for the image), marked HELD BACK with the age of what is locked."""
    out = []
    for r in reports:
        last = latest.get(r.name)
        at_top = r.newest is not None and Version(r.version) >= Version(r.newest)  # the newest with a wheel
        if r.held_back or not at_top or last is None or not far_behind(r.version, last):
            out.append(r)
            continue
        age = uploaded(index, t, r.name, r.version)
        reason = (HELD_BACK + f"{last} is the newest release the entry admits, but no release after {r.version} has "
                  f"a wheel for the image ({where(t)}); {r.version}" + (f", {age}," if age else "")
                  + " is the newest that has one")
        out.append(ExtraReport(r.name, r.version, last, True,
                               Decision(topic=r.decision.topic, choice=r.version, reason=reason)))
    return out
