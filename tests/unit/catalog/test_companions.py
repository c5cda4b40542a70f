"""Companion packages (catalog/data/companions.yaml, envkit/catalog/companions.py): the packaged rows and
their accessor, each validation refusal at its file:line:col, the digest and a team copy without the
file, and `catalog refresh` proposing rows from recorded index answers (tests/unit/refreshfake.py;
MADE-UP there: torch 2.16.0 with torchvision 0.31.0, torchaudio 2.16.0 (no torch requirement) and
xformers 0.0.36, jax 0.13.0 with a cuda14 plugin, tensorflow 2.22.0 with tf-keras 2.22.0). No network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envkit.catalog.files import CATALOG_ENV, export_catalog, load_catalog, packaged_dir
from envkit.catalog.refresh.run import refresh_catalog
from envkit.catalog.refresh.companions_read import exact_spec, series_spec
from envkit.errors import CatalogError

from tests.unit.refreshfake import (TODAY, FakeIndex, copy_catalog, drop_companions, edit, made_up,
                                    made_up_metadata, recorded, snapshot)

FILE = "companions.yaml"
W2141 = "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"
FRAMEWORKS_NEW = ("2.16.0", "0.13.0", "2.21.1", "2.22.0")  # the recorded index's made-up framework releases
NOTHING_NEW = (*FRAMEWORKS_NEW, "0.31.0", "0.0.36")  # and the made-up companions of torch 2.16


@pytest.fixture
def cat_dir(tmp_path) -> Path:
    return copy_catalog(tmp_path)


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def refresh(directory: Path, index=None, frameworks=("torch", "jax", "tensorflow")):
    return refresh_catalog(load_catalog(directory), index or FakeIndex(), today=TODAY, data_dir=directory,
                           frameworks=frameworks)


# --- the packaged rows ----------------------------------------------------------------------------------
def test_the_packaged_rows_and_the_accessor():
    catalog = load_catalog(packaged_dir())
    assert catalog.companions("torch", "2.5.1") == {"triton": "==3.1.0", "torchvision": "==0.20.*",
                                                    "torchaudio": "==2.5.*",
                                                    "xformers": ">=0.0.28.post2,<=0.0.29.post1"}
    assert catalog.companions("torch", "2.6.0") == {"triton": "==3.2.0", "torchvision": "==0.21.*",
                                                    "torchaudio": "==2.6.*",
                                                    "xformers": ">=0.0.29.post2,<=0.0.29.post3"}
    assert catalog.companions("torch", "2.6") == catalog.companions("torch", "2.6.0+cu124")  # the series' row
    # torchaudio 2.9 and 2.10 pin torch in their own metadata; 2.11.0 names none: paired by number, said so
    assert catalog.companions("torch", "2.9.1")["torchaudio"] == "==2.9.*"
    row = catalog.companion_rows.row("torch", "2.11.0")
    assert dict(row.packages)["torchaudio"] == "==2.11.*" and "torchaudio_same_number_rule" in row.sources
    assert "a rule, not metadata" in catalog.source("torchaudio_same_number_rule").lower()
    assert "torchaudio" not in catalog.companions("torch", "2.12.0")  # none on the index names 2.12
    assert catalog.companions("torch", "2.3.1")["torchtext"] == "==0.18.*"
    assert "torchtext" not in catalog.companions("torch", "2.4.0")  # torchtext ended with 0.18 (torch 2.3)
    assert catalog.companions("torch", "2.15.0") == {"triton": "~=3.9.0"}
    # jax: one row per version; a jax-only release pins the previous jaxlib
    assert catalog.companions("jax", "0.12.0.1") == {
        "jaxlib": "==0.12.0.1", "jax-cuda12-plugin": "==0.12.0.1", "jax-cuda12-pjrt": "==0.12.0.1",
        "jax-cuda13-plugin": "==0.12.0.1", "jax-cuda13-pjrt": "==0.12.0.1"}
    assert catalog.companions("jax", "0.4.37") == {"jaxlib": "==0.4.36", "jax-cuda12-plugin": ">=0.4.36,<=0.4.37",
                                                   "jax-cuda12-pjrt": "==0.4.36"}
    assert catalog.companions("jax", "0.12.0.1.0") == catalog.companions("jax", "0.12.0.1")  # compared as versions
    assert catalog.companions("jax", "0.12") == catalog.companions("jax", "0.12.0")  # the same version
    assert catalog.companions("jax", "0.12.1") == {}  # jax rows are versions, not series
    # tensorflow: the and-cuda pins of its series, then ranges from 2.20; tf-keras by its own bounds
    tf215 = catalog.companions("tensorflow", "2.15.0.post1")
    assert tf215["nvidia-cudnn-cu12"] == "==8.9.4.25" and tf215["tf-keras"] == "==2.15.*" and len(tf215) == 13
    assert catalog.companions("tensorflow", "2.21.0")["nvidia-nccl-cu12"] == ">=2.27.7,<3.0"
    # nothing known: {} / an empty set, never an error
    assert catalog.companions("torch", "1.13.1") == {} and catalog.companions("mxnet", "1.0") == {}
    assert catalog.companions("torch", "not a version") == {}
    assert catalog.companion_names("torch") == {"triton", "torchvision", "torchaudio", "torchtext", "xformers"}
    assert catalog.companion_names("jax") == {"jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
                                              "jax-cuda13-pjrt"}
    assert "tf-keras" in catalog.companion_names("tensorflow") and catalog.companion_names("mxnet") == frozenset()


def test_every_release_of_the_catalog_has_a_row_naming_known_sources():
    catalog = load_catalog(packaged_dir())
    rows = catalog.companion_rows
    assert [r.version for r in rows.rows_of("torch")] == [r.version for r in catalog.torch_releases()]
    assert [r.version for r in rows.rows_of("tensorflow")] == [r.version for r in catalog.tensorflow.releases]
    assert sorted(r.version for r in rows.rows_of("jax")) == sorted(catalog.jax.versions)
    for row in rows.rows:
        assert row.sources and all(catalog.source(s) for s in row.sources)
        assert row.location.path.endswith(FILE) and row.location.line
        assert all(spec == spec.strip() and spec[:1] in "=~<>!" for _, spec in row.packages)
    assert json.dumps([r.to_json() for r in rows.rows])


# --- validation ---------------------------------------------------------------------------------------------
TORCH_25 = '    - version: "2.5"\n'


@pytest.mark.parametrize("old, new, fragment, at", [
    # (text replaced in companions.yaml, its replacement, in the message, the text whose position is reported)
    ("version: 1\ncompanions:\n", "version: 1\nextra: 1\ncompanions:\n", "unknown top-level key 'extra'", "extra: 1"),
    ("  jax:\n", "  mxnet: []\n  jax:\n", "the catalog has no framework 'mxnet'", "mxnet"),
    (TORCH_25, '    - version: "2.99"\n', "torch 2.99 is not a release of pytorch.yaml", "version:"),
    (TORCH_25, '    - version: "2.5.1"\n', "'2.5.1' is not a release series MAJOR.MINOR", "version:"),
    (TORCH_25, '    - version: 2.5\n', "must be a quoted string", "version:"),
    ('    - version: "0.4.37"\n', '    - version: "0.4.32"\n', "jax 0.4.32 is not a release of jax.yaml", "version:"),
    ('    - version: "2.21"\n', '    - version: "2.99"\n', "tensorflow 2.99 is not a release of tensorflow.yaml",
     "version:"),
    (TORCH_25, '    - version: "2.5"\n      notes: "typo"\n', "unknown key 'notes'", "notes:"),
    ('        torchvision: "==0.20.*"\n', '        torchvision: "=0.20"\n', "'=0.20' is not a PEP 440 specifier",
     'torchvision: "=0.20"'),
    ('        torchvision: "==0.20.*"\n', '        torchvision: 0.20\n',
     "must be a PEP 440 specifier as a quoted string", "torchvision: 0.20"),
    ('        torchvision: "==0.20.*"\n', '        torchvision: "==0.20.*"\n        TorchVision: "==0.20.*"\n',
     "lists torchvision twice", "TorchVision:"),
    ('        torchvision: "==0.20.*"\n', '        torchvision: "==0.20.*"\n        torchvision: "==0.20.*"\n',
     "duplicate key 'torchvision'", '2nd:torchvision:'),  # at the second
    ('        torchvision: "==0.20.*"\n', '        torchvision: "==0.20.*"\n        torch: "==2.5.*"\n',
     "names torch itself", 'torch: "==2.5.*"'),
    ('        torchvision: "==0.20.*"\n', '        torchvision: "==0.20.*"\n        "not a name!": "==1"\n',
     "is not a package name", '"not a name!"'),
])
def test_a_bad_value_fails_the_load_at_its_file_line_and_column(cat_dir, old, new, fragment, at):
    path = cat_dir / FILE
    text = path.read_text()
    anchor = text.index(TORCH_25) if old.startswith(("        torchvision", TORCH_25)) else 0
    start = text.index(old, anchor)
    path.write_text(text[:start] + new + text[start + len(old):])
    with pytest.raises(CatalogError) as err:
        load_catalog(cat_dir)
    assert fragment in err.value.message, err.value.message
    written = path.read_text()
    offset = written.index(at.removeprefix("2nd:"), start)
    if at.startswith("2nd:"):
        offset = written.index(at[4:], offset + 1)
    line = written.count("\n", 0, offset) + 1
    column = offset - written.rfind("\n", 0, offset)
    assert str(err.value.location) == f"{path}:{line}:{column}"
    assert err.value.hint and str(err.value).startswith(f"{path}:{line}:{column}")


def test_a_missing_field_an_unknown_source_and_empty_packages(cat_dir):
    path = cat_dir / FILE
    row = line_of(path, TORCH_25.strip())
    lines = path.read_text().splitlines(keepends=True)
    assert lines[row].startswith("      sources: [")
    path.write_text("".join(lines[:row] + lines[row + 1:]))  # the 2.5 row without its sources
    with pytest.raises(CatalogError, match=r"companions.torch\[5\] has no sources") as err:
        load_catalog(cat_dir)
    assert (err.value.location.line, err.value.location.column) == (row, 7)
    edit(path, "      packages:\n        triton: \"==3.1.0\"",
         "      sources: [pypi_index, no_such_key]\n      packages:\n        triton: \"==3.1.0\"")
    with pytest.raises(CatalogError, match="unknown source 'no_such_key'") as err:
        load_catalog(cat_dir)
    assert (err.value.location.line, err.value.location.column) == (line_of(path, "no_such_key"), 29)
    assert "sources.yaml" in err.value.hint
    edit(path, "[pypi_index, no_such_key]", "[]")
    with pytest.raises(CatalogError, match=r"sources must be a non-empty list") as err:
        load_catalog(cat_dir)
    assert (err.value.location.line, err.value.location.column) == (line_of(path, "sources: []"), 7)


def test_two_rows_for_one_release_and_no_version_line(cat_dir):
    path = cat_dir / FILE
    edit(path, '    - version: "2.6"\n', '    - version: "2.5"\n')
    with pytest.raises(CatalogError, match=r"torch 2.5 already has the row companions.torch\[5\]") as err:
        load_catalog(cat_dir)
    lines = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if line == '    - version: "2.5"']
    assert err.value.location.line == lines[1]
    for text in ("companions: {}\n", ""):  # an empty file is refused too: only a missing one means none
        (cat_dir / FILE).write_text(text)
        with pytest.raises(CatalogError, match="expected a mapping with 'version: 1'"):
            load_catalog(cat_dir)


def test_not_utf8_and_not_yaml_are_named_by_line(cat_dir):
    path = cat_dir / FILE
    path.write_bytes(path.read_bytes().replace(b"# Companion packages", b"# Companion \xff packages", 1))
    with pytest.raises(CatalogError, match="is not UTF-8") as err:
        load_catalog(cat_dir)
    assert (err.value.location.line, err.value.location.column) == (1, 13)
    path.write_text("version: 1\ncompanions:\n  torch: [\n")
    with pytest.raises(CatalogError, match="not valid YAML") as err:
        load_catalog(cat_dir)
    assert err.value.location.path == str(path)


def test_a_release_removed_from_its_framework_file_names_the_companion_row(cat_dir):
    edit(cat_dir / "jax.yaml", '["0.12.0.1", "0.12.0", ', '["0.12.0", ')
    with pytest.raises(CatalogError, match="jax 0.12.0.1 is not a release of jax.yaml") as err:
        load_catalog(cat_dir)
    assert "add the release to jax.yaml first" in err.value.hint
    drop_companions(cat_dir, "jax", "0.12.0.1")
    assert load_catalog(cat_dir).companions("jax", "0.12.0.1") == {}


# --- digest, team copies, export ------------------------------------------------------------------------------
def test_the_file_is_part_of_the_digest(cat_dir):
    before = load_catalog(cat_dir).digest
    path = cat_dir / FILE
    edit(path, '        torchvision: "==0.21.*"\n', '        torchvision: "==0.21.*"  # reviewed\n')
    commented = load_catalog(cat_dir).digest
    assert commented != before  # any byte: as every catalog file
    edit(path, '        torchvision: "==0.21.*"  # reviewed\n', '        torchvision: "==0.21.0"\n')
    changed = load_catalog(cat_dir)
    assert changed.digest not in (before, commented)
    assert changed.companions("torch", "2.6.0")["torchvision"] == "==0.21.0"


def test_a_team_copy_without_the_file_loads_with_no_companions(cat_dir, tmp_path, monkeypatch):
    with_file = load_catalog(cat_dir).digest
    (cat_dir / FILE).unlink()
    catalog = load_catalog(cat_dir)
    assert catalog.companions("torch", "2.6.0") == {} and catalog.companion_names("torch") == frozenset()
    assert catalog.companion_rows.path is None and catalog.digest != with_file
    # the digest of a copy made before companions.yaml existed is the one its locks recorded
    assert catalog.digest == load_catalog(cat_dir).digest
    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    out = export_catalog(tmp_path / "again")
    assert not (out / FILE).exists() and load_catalog(out).digest == catalog.digest
    # and refresh says why it leaves companions alone, reading no companion listing
    index = FakeIndex()
    result = refresh(cat_dir, index)
    assert not result.companions.changed and "does not exist" in result.companions.notes[0]
    assert not any(p in url for url in index.session.gets for p in ("torchvision", "xformers", "tf-keras"))
    result.apply()
    assert not (cat_dir / FILE).exists()


def test_export_copies_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    out = export_catalog(tmp_path / "team")
    assert (out / FILE).read_bytes() == (packaged_dir() / FILE).read_bytes()
    assert load_catalog(out).companions("torch", "2.6.0") == load_catalog(packaged_dir()).companions("torch", "2.6.0")


# --- refresh ---------------------------------------------------------------------------------------------------
def test_refresh_proposes_the_companions_of_each_new_release(cat_dir):
    index = FakeIndex()
    result = refresh(cat_dir, index)
    comp = result.companions
    assert comp.changed and comp.filename == FILE
    by = {(e["framework"], e["version"]): e for e in comp.entries}
    assert list(by) == [("torch", "2.16"), ("jax", "0.13.0"), ("tensorflow", "2.22")]
    torch = by[("torch", "2.16")]
    assert torch["packages"] == {"triton": "~=3.10.0", "torchvision": "==0.31.*", "torchaudio": "==2.16.*",
                                 "xformers": "==0.0.36"}
    assert torch["sources"] == ["pypi_index"]
    note = torch["note"]
    assert note.startswith(f"refreshed from the package index {TODAY}: torch 2.16.0's Requires-Dist triton~=3.10.0")
    assert "torchvision 0.31.0's Requires-Dist torch==2.16.0" in note
    # torchaudio 2.16.0 names no torch: the rule, said as one, in the row and the notes
    assert "torchaudio 2.16.0 names no torch requirement: paired with torch 2.16 by the same-number rule" in note
    assert any("torchaudio paired by the same-number rule, not metadata - review" in n for n in comp.notes)
    assert "files.example.invalid/made-up/torchvision-0.31.0" in note
    assert by[("jax", "0.13.0")]["packages"] == {
        "jaxlib": "==0.13.0", **{f"jax-cuda{m}-{k}": "==0.13.0" for m in (12, 13, 14) for k in ("plugin", "pjrt")}}
    tf = by[("tensorflow", "2.22")]["packages"]
    assert tf["tf-keras"] == "==2.22.*" and tf["nvidia-cudnn-cu12"] == ">=9.10.2.21,<10.0"
    # the companions already paired were not read again (torchvision 0.29.x: the 2.14 row admits them)
    assert not any(n.startswith(("torchvision-0.29", "torchaudio-2.11", "xformers-0.0.3", "torchtext"))
                   for n in index.metadata_reads if not n.startswith("xformers-0.0.36"))
    # only new rows: the existing lines stay byte for byte
    assert not [line for line in comp.diff().splitlines()[2:] if line.startswith("-")]
    summary = json.loads(json.dumps(result.summary()))
    assert summary["companions"]["file"].endswith(FILE) and summary["files"][-1].endswith(FILE)
    assert any(n.startswith("companions: torch 2.16: new companions row") for n in summary["notes"])
    read = {r["package"] for r in summary["companions"]["index_reads"]}
    assert read >= {"triton", "torchvision", "jaxlib", "tf-keras"}
    result.apply()
    catalog = load_catalog(cat_dir)
    assert catalog.companions("torch", "2.16.0") == torch["packages"]
    assert catalog.companions("jax", "0.13.0")["jax-cuda14-pjrt"] == "==0.13.0"
    assert catalog.companions("tensorflow", "2.22.0")["tf-keras"] == "==2.22.*"
    assert not refresh(cat_dir).changed  # the next run finds nothing new


def test_refresh_adds_a_companion_a_known_row_lacks(cat_dir):
    name = "torchvision-0.30.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    index = FakeIndex(drop_versions=NOTHING_NEW, extra_files={"torchvision": [made_up(name)]},
                      metadata={name: made_up_metadata("torchvision", "0.30.0", "numpy", "torch==2.15.0")})
    result = refresh(cat_dir, index, frameworks=("torch",))
    assert [r.changed for r in result.results] == [False] and result.companions.changed
    assert index.metadata_reads == [name]  # only the release no row admitted
    changed = [line for line in result.companions.diff().splitlines()[2:] if line[:1] in "+-"]
    assert changed == [
        "-      sources: [pypi_metadata_torch_triton]",
        "+      sources: [pypi_metadata_torch_triton, pypi_index]",
        f'+        torchvision: "==0.30.*"  # refreshed from the package index {TODAY}: torchvision 0.30.0\'s '
        f"Requires-Dist torch==2.15.0; METADATA read: https://files.example.invalid/made-up/{name}"]
    assert result.companions.notes == ("torch 2.15: adds torchvision ==0.30.*",)
    result.apply()
    assert load_catalog(cat_dir).companions("torch", "2.15.0") == {"triton": "~=3.9.0", "torchvision": "==0.30.*"}


def test_refresh_widens_an_exact_range_and_warns_where_it_cannot(cat_dir):
    post = "xformers-0.0.35.post1-py39-none-manylinux_2_28_x86_64.whl"
    tv = "torchvision-0.32.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    index = FakeIndex(drop_versions=NOTHING_NEW,
                      extra_files={"xformers": [made_up(post)], "torchvision": [made_up(tv)]},
                      metadata={post: made_up_metadata("xformers", "0.0.35.post1", "torch==2.10.0"),
                                tv: made_up_metadata("torchvision", "0.32.0", "torch==2.14.1")})
    result = refresh(cat_dir, index, frameworks=("torch",))
    comp = result.companions
    assert comp.notes == ("torch 2.10: xformers >=0.0.34,<=0.0.35 -> >=0.0.34,<=0.0.35.post1",)
    # torchvision 0.32.0 pins a torch 2.14 patch, but the row holds the 0.29 series: said, not changed
    (warning,) = comp.warnings
    assert warning.startswith("torch 2.14: the index says torchvision ==0.32.* (torchvision 0.32.0's Requires-Dist "
                              "torch==2.14.1")
    assert warning.endswith("the row says ==0.29.* - not changed, review by hand")
    assert '+        xformers: ">=0.0.34,<=0.0.35.post1"  # was >=0.0.34,<=0.0.35; refreshed' in comp.diff()
    result.apply()
    catalog = load_catalog(cat_dir)
    assert catalog.companions("torch", "2.10.0")["xformers"] == ">=0.0.34,<=0.0.35.post1"
    assert catalog.companions("torch", "2.14.1")["torchvision"] == "==0.29.*"
    assert "pypi_index" in catalog.companion_rows.row("torch", "2.10.0").sources


def test_a_new_patch_widens_the_series_pin_it_read(cat_dir):
    # 2.14.1 is new to the catalog, and its (edited) wheel pins triton 3.8.1 where the row has 3.8.0
    edit(cat_dir / "pytorch.yaml", 'patches: ["2.14.0", "2.14.1"]', 'patches: ["2.14.0"]')
    edit(cat_dir / FILE, 'triton: "~=3.8.0"', 'triton: "==3.8.0"')
    meta = recorded(W2141).replace("triton~=3.8.0;", "triton==3.8.1;")
    result = refresh(cat_dir, FakeIndex(drop_versions=NOTHING_NEW, metadata={W2141: meta}), frameworks=("torch",))
    assert result.results[0].added_patches == ("2.14.1",)
    comp = result.companions
    assert "torch 2.14: triton ==3.8.0 -> >=3.8.0,<=3.8.1" in comp.notes
    assert "torch 2.14.0: no Linux x86_64 wheel on the index; not read" in comp.notes  # not in the recording
    result.apply()
    assert load_catalog(cat_dir).companions("torch", "2.14.1")["triton"] == ">=3.8.0,<=3.8.1"


def test_refresh_pairs_nothing_with_an_excluded_release(cat_dir):
    with open(cat_dir / "pytorch.yaml", "a") as f:
        f.write('\nexcluded:\n  - {version: "2.16.0", reason: "broken", sources: [pypi_index]}\n')
    result = refresh(cat_dir, FakeIndex(drop_versions=FRAMEWORKS_NEW[1:]), frameworks=("torch",))
    assert not result.changed
    assert "torchvision 0.31.0 pairs with torch 2.16, which the catalog does not have; not paired" in \
        result.companions.notes


def test_a_row_missing_from_the_file_is_proposed_again(cat_dir):
    before = snapshot(cat_dir)
    drop_companions(cat_dir, "tensorflow", "2.21")
    result = refresh(cat_dir, FakeIndex(drop_versions=NOTHING_NEW), frameworks=("tensorflow",))
    (entry,) = result.companions.entries
    assert (entry["framework"], entry["version"]) == ("tensorflow", "2.21")
    assert entry["packages"] == load_catalog(packaged_dir()).companions("tensorflow", "2.21.0")  # the same facts
    result.apply()
    assert load_catalog(cat_dir).companions("tensorflow", "2.21.0") == entry["packages"]
    assert snapshot(cat_dir)["pytorch.yaml"] == before["pytorch.yaml"]


def test_refresh_refuses_a_layout_it_does_not_edit(cat_dir):
    edit(cat_dir / FILE, '      packages:\n        triton: "~=3.9.0"\n', '      packages: {triton: "~=3.9.0"}\n')
    name = "torchvision-0.30.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    index = FakeIndex(drop_versions=NOTHING_NEW, extra_files={"torchvision": [made_up(name)]},
                      metadata={name: made_up_metadata("torchvision", "0.30.0", "torch==2.15.0")})
    with pytest.raises(CatalogError, match="torch 2.15 row has no one-line 'sources: \\[...\\]' and block"):
        refresh(cat_dir, index, frameworks=("torch",))


def test_refresh_needs_the_catalog_loaded_from_its_directory(cat_dir, tmp_path):
    (tmp_path / "other").mkdir()
    other = copy_catalog(tmp_path / "other")
    drop_companions(other, "torch", "2.15")
    with pytest.raises(CatalogError, match="not loaded from"):
        refresh_catalog(load_catalog(other), FakeIndex(drop_versions=NOTHING_NEW), today=TODAY, data_dir=cat_dir)


def test_the_proposed_file_parses_back_to_the_rows(cat_dir):
    result = refresh(cat_dir)
    doc = yaml.safe_load(result.companions.proposed_text)
    assert [r["version"] for r in doc["companions"]["torch"]][-2:] == ["2.15", "2.16"]
    assert doc["companions"]["jax"][-1]["version"] == "0.13.0"


def test_specifier_helpers():
    assert exact_spec(["0.0.34"]) == "==0.0.34"
    assert exact_spec(["0.0.35", "0.0.34", "0.0.34.post1"]) == ">=0.0.34,<=0.0.35"
    assert series_spec(["0.21.0"]) == ("==0.21.*", None)
    spec, warn = series_spec(["0.16.2", "0.17.0", "0.17.2"])
    assert spec == "==0.17.*" and "several series" in warn


def test_an_empty_framework_section_gets_its_first_row(cat_dir):
    path = cat_dir / FILE
    text = path.read_text()
    path.write_text(text[:text.index("  tensorflow:\n")] + "  tensorflow: []\n")
    result = refresh(cat_dir, FakeIndex(drop_versions=NOTHING_NEW[:3]), frameworks=("tensorflow",))
    versions = [e["version"] for e in result.companions.entries]
    assert versions[-1] == "2.22" and "2.21" in versions  # every row is missing: each is proposed
    result.apply()
    assert load_catalog(cat_dir).companions("tensorflow", "2.22.0")["tf-keras"] == "==2.22.*"
