from __future__ import annotations

from pathlib import Path

import pytest

from envkit.dispatch.jobs import FleetJob
from envkit.spec_dispatch import SlurmTarget


@pytest.fixture
def make_job(tmp_path):
    def make(model: str = "H100", **target) -> FleetJob:
        return FleetJob(team="vision", image_name="torch25", image="vision/torch25:2.5.1-cu124-py3.11-dda970b6",
                        image_id="sha256:" + "ab" * 32, model=model, target=SlurmTarget(**target),
                        shared=Path(tmp_path) / "shared", timeout=600, mount_id="mount-0123")
    return make
