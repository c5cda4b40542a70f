"""Record the engine's push and pull streams that tests/unit/support/test_layer_moves.py replays: a tiny image
(two layers: a `docker import` of one file and a COPY of another) pushed to a local registry (Debian's
docker-registry) twice, then pulled by digest into an engine without the image (its layers fetched) and into one
with its layers (a label-only image on them). Each file holds the image's diff_ids, its manifest's layer blobs
(digest, compressed size) and the stream's records as docker-py decodes them.

    flock /tmp/envkit-engine.lock .venv/bin/python -m tests.unit.data.streams.record

Everything it makes (images, the registry) is removed when it ends."""

from __future__ import annotations

import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

import docker
import requests

from tests.integration.registry import running_registry

HERE = Path(__file__).parent
REPO = "envkit-test/streams"


def tar_of(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def blobs(host: str, tag: str) -> list[list]:
    r = requests.get(f"http://{host}/v2/{REPO}/manifests/{tag}",
                     headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"}, timeout=30)
    r.raise_for_status()
    return [[x["digest"], x["size"]] for x in r.json()["layers"]]


def write(name: str, dc: docker.DockerClient, ref: str, manifest: list[list], events: list[dict]) -> None:
    doc = {"diff_ids": dc.api.inspect_image(ref)["RootFS"]["Layers"], "blobs": manifest, "events": events}
    (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(name, json.dumps([(e.get("id"), e.get("status")) for e in events if e.get("status") != "Pushing"]))


def main() -> None:
    dc = docker.from_env()
    made: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, running_registry(Path(tmp) / "registry") as reg:
        remote = f"{reg.host}/{REPO}"
        ctx = Path(tmp) / "context"
        ctx.mkdir()
        try:
            dc.api.import_image_from_data(tar_of("one", b"envkit stream one\n" * 4096), repository="envkit-test/s0",
                                          tag="1")
            made.append("envkit-test/s0:1")
            (ctx / "two").write_bytes(b"envkit stream two\n" * 8192)
            (ctx / "Dockerfile").write_text("FROM envkit-test/s0:1\nCOPY two /two\n")
            dc.images.build(path=str(ctx), tag=f"{remote}:a", rm=True, pull=False)
            made.append(f"{remote}:a")
            first = list(dc.api.push(remote, "a", stream=True, decode=True))
            write("push_first", dc, f"{remote}:a", blobs(reg.host, "a"), first)
            dc.api.tag(f"{remote}:a", remote, "b")
            made.append(f"{remote}:b")
            again = list(dc.api.push(remote, "b", stream=True, decode=True))
            write("push_again", dc, f"{remote}:b", blobs(reg.host, "b"), again)
            digest = next(e["aux"]["Digest"] for e in first if e.get("aux"))
            # a label-only image on the same layers, pushed, removed, pulled back: every layer already here
            (ctx / "Dockerfile").write_text(f"FROM {remote}:a\nLABEL io.envkit.test=streams\n")
            dc.images.build(path=str(ctx), tag=f"{remote}:c", rm=True, pull=False)
            list(dc.api.push(remote, "c", stream=True, decode=True))
            c_blobs, c_id = blobs(reg.host, "c"), dc.images.get(f"{remote}:c").id
            c_digest = requests.get(f"http://{reg.host}/v2/{REPO}/manifests/c", timeout=30, headers={
                "Accept": "application/vnd.docker.distribution.manifest.v2+json"}).headers["Docker-Content-Digest"]
            dc.images.remove(c_id, force=True)
            present = list(dc.api.pull(remote, c_digest, stream=True, decode=True))
            write("pull_present", dc, f"{remote}@{c_digest}", c_blobs, present)
            # nothing of it here: every layer fetched
            for ref in (f"{remote}@{c_digest}", f"{remote}:a", f"{remote}:b", "envkit-test/s0:1"):
                try:
                    dc.images.remove(ref, force=True)
                except docker.errors.APIError:
                    pass
            fetched = list(dc.api.pull(remote, digest, stream=True, decode=True))
            write("pull_fetched", dc, f"{remote}@{digest}", blobs(reg.host, "a"), fetched)
        finally:
            for image in dc.images.list():
                if any(t.startswith((f"{reg.host}/", "envkit-test/s0:")) for t in image.tags) or any(
                        d.startswith(f"{reg.host}/") for d in image.attrs.get("RepoDigests") or []):
                    dc.images.remove(image.id, force=True)


if __name__ == "__main__":
    sys.exit(main())
