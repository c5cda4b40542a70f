"""BuildKit's cache records a test run made, removed when the run ends.

Builds default to BuildKit (``--builder auto``), and BuildKit keeps every layer it built as a cache record after
the image is removed (a CUDA framework build: 5 GB or more). CI runs on the developer's machine, so the suite
leaves no record it made: the controlling process (not an xdist worker) lists the records when the session starts
and prunes, when it ends, those that appeared since (records in use are never pruned; a few rounds, children
before parents). Records made by anything else meanwhile on the same engine go too: only their cache is lost.

The same for OS stage images (``<tag>-os``, the label ``io.envkit.stage=os``: ``images.os_stage``): a BuildKit or a
reproducible build keeps its OS stage tagged, as the next build's; a test that removes its image by tag alone leaves
that one, so the run removes those that appeared since it started (unforced: one an image still stands on stays).

And for untagged images: a classic build that fails keeps the images of the steps before the failing one (its
cache; a test of a login the classic builder cannot carry left 146 MB so), and only a later build that met them in
its cache and was removed took them away: the run removes the untagged leaves that appeared since it started, and
with them their untagged parents (unforced: one a container uses stays).
"""

from __future__ import annotations

import subprocess

DOCKER = "/usr/bin/docker"


def records() -> set[str] | None:
    """The ids of BuildKit's cache records now, or None without an engine."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        try:
            return {r["ID"] for r in client.api.df().get("BuildCache") or []}
        finally:
            client.close()
    except Exception:  # no engine: nothing to clean up
        return None


def prune(ids: set[str]) -> None:
    """Remove the cache records ``ids``: a record with a child is kept until the child is gone, so rounds, until a
    round removes nothing (a build's records chain one per step)."""
    left = ids & (records() or set())
    while left:
        for record in sorted(left):
            subprocess.run([DOCKER, "builder", "prune", "-f", "--filter", f"id={record}"], capture_output=True,
                           timeout=600)
        now = ids & (records() or set())
        if now == left:  # in use, or a child that is not ours: kept
            return
        left = now


OS_STAGE = "io.envkit.stage=os"


def _images(filters: dict) -> list[dict] | None:
    """The engine's images that match ``filters`` now, or None without an engine."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        try:
            return client.api.images(filters=filters)
        finally:
            client.close()
    except Exception:  # no engine: nothing to clean up
        return None


def _remove(refs: list[str]) -> None:
    """Remove each of ``refs``, unforced: one an image stands on or a container uses stays (as does one gone)."""
    import docker

    client = docker.from_env(timeout=120)
    try:
        for ref in refs:
            try:
                client.api.remove_image(ref)
            except docker.errors.APIError:
                pass
    finally:
        client.close()


def os_stages() -> set[str] | None:
    """The ids of the OS stage images on the engine now, or None without an engine."""
    found = _images({"label": OS_STAGE})
    return None if found is None else {i["Id"] for i in found}


def remove_os_stages(ids: set[str]) -> None:
    """Remove the OS stage images ``ids`` (each tag of each)."""
    _remove([ref for image in _images({"label": OS_STAGE}) or () if image["Id"] in ids
             for ref in [t for t in image.get("RepoTags") or () if t != "<none>:<none>"] or [image["Id"]]])


def dangling() -> set[str] | None:
    """The ids of the untagged leaf images on the engine now, or None without an engine."""
    found = _images({"dangling": True})
    return None if found is None else {i["Id"] for i in found}


def remove_dangling(ids: set[str]) -> None:
    """Remove the untagged images ``ids`` and the untagged parents only they stood on."""
    _remove(sorted(ids))
