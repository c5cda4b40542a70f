"""`envkit export sif`'s pure parts: `siftool list`'s table, the default file name, the missing tools' message
(the export itself, with the real tools and engine: tests/integration/test_export_sif.py)."""

import pytest

from envkit.app.export import default_sif_path
from envkit.images import sif
from envkit.errors import EngineError

LISTING = """------------------------------------------------------------------------------
ID   |GROUP   |LINK    |SIF POSITION (start-end)  |TYPE
------------------------------------------------------------------------------
1    |1       |NONE    |32176-32337               |Def.FILE
2    |1       |NONE    |32337-32416               |JSON.Generic
3    |1       |NONE    |32768-47779840            |FS (Squashfs/*System/amd64)
"""


def test_siftool_list_is_read_as_rows_without_its_header():
    rows = sif.list_objects(LISTING)
    assert [r["type"] for r in rows] == ["Def.FILE", "JSON.Generic", "FS (Squashfs/*System/amd64)"]
    assert rows[2] == {"id": "3", "group": "1", "link": "NONE", "position": "32768-47779840",
                       "type": "FS (Squashfs/*System/amd64)"}


@pytest.mark.parametrize("image, name", [
    ("team/pytorch:2.4", "pytorch_2.4.sif"),
    ("localhost:5000/team/jax", "jax_latest.sif"),
    ("ubuntu", "ubuntu_latest.sif"),
])
def test_the_default_file_is_named_after_the_repository_and_tag(image, name):
    assert str(default_sif_path(image)) == name


def test_a_missing_tool_is_named_with_the_debian_package_to_install(monkeypatch):
    monkeypatch.setattr(sif.shutil, "which", lambda tool: None if tool == "mksquashfs" else f"/usr/bin/{tool}")
    monkeypatch.setattr(sif.os, "access", lambda *_: False)
    with pytest.raises(EngineError) as err:
        sif.require_tools()
    assert err.value.exit_code == 6
    assert "mksquashfs" in err.value.message and "apt-get install squashfs-tools" in (err.value.hint or "")
