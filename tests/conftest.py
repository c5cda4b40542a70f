import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def write_spec(tmp_path):
    """Write a team.yaml (dedented) into a fresh directory and return its path."""

    def write(text: str, name: str = "team.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


MINIMAL = """
version: 1
team: vision
fleet:
  min_driver: "550.54.15"
  gpus: [A100, H100]
images:
  - name: torch25
    framework: "torch==2.5.*"
"""
