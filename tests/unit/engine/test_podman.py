"""Podman's Docker-compatible API: the engine names itself podman, and BuildKit (whose CLI cannot start a build
there) is unavailable, so ``auto`` picks the classic builder. The builds themselves: tests/integration/test_podman.py.
"""

import json
import subprocess

from envkit.engine.buildkit import BuildKitBuilder
from envkit.engine.docker_engine import DockerEngine
from envkit.images.builder import pick_builder

# what `GET /version` answers (abridged): Docker's, and Podman 4.3.1's through its Docker-compatible API
DOCKER = {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64",
          "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"}, {"Name": "containerd"}]}
PODMAN = {"Version": "4.3.1", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64",
          "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}, {"Name": "Conmon"}]}


class _Client:
    def __init__(self, answer: dict):
        self.answer = answer

    def version(self) -> dict:
        return self.answer


def _engine(answer: dict) -> DockerEngine:
    return DockerEngine(_Client(answer))  # type: ignore[arg-type]


def test_the_engine_says_which_it_is():
    assert _engine(DOCKER).version() == {"engine": "docker", "version": "20.10.24+dfsg1", "api": "1.41",
                                         "os": "linux", "arch": "amd64"}
    assert _engine(PODMAN).version()["engine"] == "podman"


def test_on_podman_auto_builds_with_the_classic_builder(monkeypatch, tmp_path):
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    answer = json.dumps({"Client": {"Version": "20.10.24"}, "Server": {"ApiVersion": "1.41"}})
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, answer, ""))
    podman, docker = BuildKitBuilder(_engine(PODMAN), cli=str(cli)), BuildKitBuilder(_engine(DOCKER), cli=str(cli))
    assert docker.unavailable() is None
    message, hint = podman.unavailable()
    assert "Podman 4.3.1" in message and "--builder classic" in hint
    monkeypatch.setattr("envkit.images.builder.BuildKitBuilder", lambda engine: BuildKitBuilder(engine, cli=str(cli)))
    assert pick_builder(_engine(PODMAN), "auto") == "classic"
    assert pick_builder(_engine(DOCKER), "auto") == "buildkit"


def test_on_podman_the_reason_is_podman_even_without_a_docker_cli(tmp_path):
    message, hint = BuildKitBuilder(_engine(PODMAN), cli=str(tmp_path / "no-docker")).unavailable()
    assert "Podman 4.3.1" in message and "docker.io" not in hint
