"""Record a real registry's answers to envkit's registry reads, for tests/unit/registry/test_remote.py.

    .venv/bin/python -m tests.unit.data.registry.record   # needs the engine, docker-registry, a local envkit base

Starts Debian's docker-registry on loopback, publishes tests/integration/published.py's team
into it, then runs ``envkit.registry.remote``'s reads through a recording transport and writes every
request and answer (status, the headers envkit reads, the body) to answers.json. The unit
tests replay them with no registry and no engine.
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

from envkit.engine.docker_engine import connect
from envkit.errors import EngineError
from envkit.registry.remote import inspect_remote, list_registry
from tests.integration.published import STACK_A, STACK_B, publish_team, remove_local
from tests.integration.registry import running_registry

HERE = Path(__file__).resolve().parent
KEPT_HEADERS = ("Content-Type", "Docker-Content-Digest", "Link", "Docker-Distribution-Api-Version")


class Recorder(HTTPAdapter):
    def __init__(self):
        super().__init__()
        self.answers: dict[str, dict] = {}

    def send(self, request, **kw):
        response = super().send(request, **kw)
        key = f"{request.method} {request.path_url}"
        self.answers[key] = {"status": response.status_code,
                             "headers": {h: response.headers[h] for h in KEPT_HEADERS if h in response.headers},
                             "body_b64": base64.b64encode(response.content).decode()}
        return response


def main() -> None:
    engine = connect()
    dc = engine.client
    base = min((i for i in dc.images.list(name="envkit-base/debian") if i.tags), key=lambda i: i.attrs["Size"]).tags[0]
    with tempfile.TemporaryDirectory() as tmp, running_registry(Path(tmp)) as reg:
        team = publish_team(dc, base, reg.host)
        try:
            recorder = Recorder()
            session = requests.Session()
            session.mount("http://", recorder)
            reads = dict(session=session, sleep=lambda s: None)
            list_registry(None, f"{reg.host}/vision", **reads)
            list_registry(None, f"{reg.host}/tools", **reads)
            for ref in (team.ref(STACK_A), team.ref(STACK_B), team.ref("certified"),
                        f"{reg.host}/vision/torch25@{team.digest_a}", team.ref("no-such-stack"),
                        f"{reg.host}/vision/nope:1", team.ref(STACK_A, repo="broken/torch25")):
                try:
                    inspect_remote(None, ref, **reads)
                except EngineError:
                    pass
            try:
                list_registry(None, reg.host, **reads)
            except EngineError:
                pass
        finally:
            remove_local(dc, team)
    facts = {"host": reg.host, "digest_a": team.digest_a, "digest_b": team.digest_b, "image_a": team.image_a,
             "image_b": team.image_b}
    answers = {k.replace(reg.host, "REGISTRY"): v for k, v in sorted(recorder.answers.items())}
    (HERE / "answers.json").write_text(json.dumps({"facts": facts, "answers": answers}, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(answers)} answers into {HERE / 'answers.json'}")


if __name__ == "__main__":
    main()
