"""envkit.catalog.refresh's PyTorch half on recorded index answers (tests/unit/refreshfake.py).

Nothing here touches the network. JAX and TensorFlow: test_refresh_frameworks.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from envkit.catalog.files import data_dir, load_catalog
from envkit.catalog.refresh.common import RefreshResult, python_tags, refresh_summary
from envkit.catalog.refresh.torch import refresh, render_row
from envkit.errors import CatalogError
from packaging.version import Version

from tests.unit.refreshfake import DATA, TODAY, FakeIndex, copy_catalog, snapshot

CARRIED_132 = "7.5;8.0;8.6;9.0;10.0;12.0"  # the 2.15 cu132 row's arch list
OTHERS_MADE_UP = ("0.13.0", "2.21.1", "2.22.0")  # the jax/tensorflow listings' made-up releases


W216 = "torch-2.16.0-cp312-cp312-manylinux_2_28_x86_64.whl"


def meta_216(cuda="13.2.3", cudnn="nvidia-cudnn-cu13==9.27.1.3", nccl="nvidia-nccl-cu13==2.31.2") -> str:
    text = (DATA / f"{W216}.METADATA").read_text()
    text = text.replace("]==13.2.3;", f"]=={cuda};")
    text = text.replace("nvidia-cudnn-cu13==9.27.1.3", cudnn).replace("nvidia-nccl-cu13==2.31.2", nccl)
    return text


# --- helpers -------------------------------------------------------------------------------
@pytest.fixture
def cat_dir(tmp_path) -> Path:
    return copy_catalog(tmp_path)


def run(directory: Path, index=None, **kw) -> RefreshResult:
    index = index or FakeIndex()
    return refresh(load_catalog(directory), index, today=TODAY, data_dir=directory, **kw)


def edit(directory: Path, old: str, new: str) -> None:
    path = directory / "pytorch.yaml"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))


def drop_row(directory: Path, series: str) -> None:
    """Remove the series' pytorch.yaml row, and its companions.yaml row (which names it)."""
    for name, head, fields in (("pytorch.yaml", "  - version", "    "), ("companions.yaml", "    - version", "      ")):
        path = directory / name
        lines = path.read_text().splitlines(keepends=True)
        start = lines.index(f'{head}: "{series}"\n')
        end = start + 1
        while end < len(lines) and lines[end].startswith(fields):
            end += 1
        path.write_text("".join(lines[:start] + lines[end:]))


def apply_unified_diff(text: str, diff: str) -> str:
    """A strict applier: every context and '-' line must match where the hunk says."""
    lines = text.splitlines(keepends=True)
    dl = diff.splitlines(keepends=True)
    assert dl[0] == "--- a/pytorch.yaml\n" and dl[1] == "+++ b/pytorch.yaml\n"
    out, pos, i = [], 0, 2
    while i < len(dl):
        m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", dl[i])
        assert m, f"not a hunk header: {dl[i]!r}"
        old_start = int(m[1]) - (0 if m[2] == "0" else 1)
        out.extend(lines[pos:old_start])
        pos = old_start
        i += 1
        while i < len(dl) and not dl[i].startswith("@@"):
            tag, body = dl[i][0], dl[i][1:]
            if tag in " -":
                assert lines[pos] == body, f"hunk does not match at line {pos + 1}"
                pos += 1
            if tag in " +":
                out.append(body)
            assert tag in " -+", f"bad diff line {dl[i]!r}"
            i += 1
    out.extend(lines[pos:])
    return "".join(out)


# --- a new series ----------------------------------------------------------------------------
def test_new_series_from_the_index(cat_dir):
    index = FakeIndex()
    result = run(cat_dir, index)
    assert result.added_series == ("2.16",) and result.added_patches == ()
    (row,) = result.entries
    assert row["version"] == "2.16" and row["patches"] == ["2.16.0"]  # 2.16.0rc1 skipped
    assert row["python"] == {"min": "3.11", "max": "3.15"}  # no macOS cp310, no cp315t/cp316t
    assert row["index_default"] == "cu132"
    assert row["verified"] == "partial" and row["sources"] == ["pypi_index"]
    assert row["variants"] == [{"tag": "cu132", "cuda": "13.2", "status": "stable", "cudnn": "9.27.1.3",
                                "nccl": "2.31.2", "arch_list": CARRIED_132}]
    note = row["note"]
    assert TODAY in note and W216 in note and "cuda/cudnn/nccl read from the Requires-Dist" in note
    # the recorded index serves no byte ranges: the arch list is carried over, with a warning to confirm it
    assert "arch_list carried over from 2.15 cu132 (the wheel could not be read" in note and "check-arches" in note
    assert any(w.startswith("2.16: arch_list 7.5;8.0;8.6;9.0;10.0;12.0 carried over") for w in result.warnings)
    # only the new version's Linux x86_64 wheel was read, once, for the requested Python
    assert set(index.metadata_reads) == {W216}  # the row's pins, then the CUDA check before reading its arches
    (read,) = result.reads
    assert (read.version, read.python, read.cuda, read.tag) == ("2.16.0", "3.12", "13.2.3", "cu132")
    assert any("older than the catalog's oldest series (2.0)" in n for n in result.notes)
    assert any(n.startswith("2.16: new series") for n in result.notes)


def test_proposed_row_is_a_valid_catalog_row_and_renders_in_file_layout(cat_dir):
    result = run(cat_dir)
    text = render_row(result.entries[0])
    assert text.startswith('  - version: "2.16"\n    patches: ["2.16.0"]\n')
    assert yaml.safe_load("releases:\n" + text)["releases"] == [result.entries[0]]
    assert text in result.proposed_text


def test_python_tags_ignore_free_threaded_and_other_platforms():
    index = FakeIndex()
    assert python_tags(index.wheels("torch"), Version("2.16.0")) == [(3, 11), (3, 12), (3, 13), (3, 14), (3, 15)]
    assert python_tags(index.wheels("torch"), Version("2.14.1")) == [(3, 10), (3, 11), (3, 12), (3, 13), (3, 14)]
    assert python_tags(index.wheels("torch"), Version("9.9.9")) == []


def test_falls_back_to_another_python_when_the_requested_one_has_no_wheel(cat_dir):
    w315 = "torch-2.16.0-cp315-cp315-manylinux_2_28_x86_64.whl"
    index = FakeIndex(metadata={w315: meta_216()})
    result = run(cat_dir, index, python="3.10")
    assert set(index.metadata_reads) == {w315}
    assert result.reads[0].python == "3.15" and result.entries[0]["index_default"] == "cu132"


def test_arch_list_from_same_major_when_no_variant_has_the_minor(cat_dir):
    index = FakeIndex(metadata={W216: meta_216(cuda="13.4.0")})
    (row,) = run(cat_dir, index).entries
    assert row["index_default"] == "cu134" and row["variants"][0]["cuda"] == "13.4"
    assert row["variants"][0]["arch_list"] == CARRIED_132  # newest 13.x variant: 2.15 cu132
    assert "carried over from 2.15 cu132" in row["note"]


def test_arch_list_from_same_minor_prefers_it_over_newer_same_major(cat_dir):
    index = FakeIndex(metadata={W216: meta_216(cuda="12.9.1", cudnn="nvidia-cudnn-cu12==9.10.2.21",
                                               nccl="nvidia-nccl-cu12==2.27.3")})
    (row,) = run(cat_dir, index).entries
    assert row["index_default"] == "cu129"
    assert row["variants"][0]["arch_list"] == "7.0;7.5;8.0;8.6;9.0;10.0;12.0+PTX"  # 2.8 cu129
    assert "carried over from 2.8 cu129" in row["note"]


def test_no_arch_list_to_carry_means_no_row_and_a_warning(cat_dir):
    index = FakeIndex(metadata={W216: meta_216(cuda="14.0.1", cudnn="nvidia-cudnn-cu14==10.0.0.1",
                                               nccl="nvidia-nccl-cu14==3.0.0")})
    result = run(cat_dir, index)
    assert result.entries == () and not result.changed and result.diff() == ""
    assert any("no catalog variant has CUDA 14.x" in w for w in result.warnings)


def test_a_wheel_without_a_cuda_pin_is_not_added(cat_dir):
    text = "\n".join(line for line in meta_216().splitlines() if "cuda-toolkit" not in line) + "\n"
    result = run(cat_dir, FakeIndex(metadata={W216: text}))
    assert result.entries == () and any("pins no CUDA runtime" in w for w in result.warnings)


def test_a_gap_series_is_inserted_in_version_order(cat_dir):
    drop_row(cat_dir, "2.14")
    result = run(cat_dir)
    assert result.added_series == ("2.14", "2.16")
    row = result.entries[0]
    assert row["patches"] == ["2.14.1"]  # the recorded listing holds 2.14.1 only
    assert row["variants"][0] == {"tag": "cu130", "cuda": "13.0", "status": "stable", "cudnn": "9.24.0.43",
                                  "nccl": "2.30.7", "arch_list": "7.5;8.0;8.6;9.0;10.0;12.0"}  # 2.13 cu130, as read from its wheel
    assert "carried over from 2.13 cu130" in row["note"]
    versions = [r["version"] for r in yaml.safe_load(result.proposed_text)["releases"]]
    assert versions == sorted(versions, key=Version) and versions[-3:] == ["2.14", "2.15", "2.16"]


# --- a new patch of a known series -------------------------------------------------------------
def test_new_patch_changes_only_the_patches_line(cat_dir):
    edit(cat_dir, 'patches: ["2.14.0", "2.14.1"]', 'patches: ["2.14.0"]')
    index = FakeIndex(drop_versions=("2.16.0",))
    result = run(cat_dir, index)
    assert result.added_patches == ("2.14.1",) and result.added_series == ()
    (row,) = result.entries
    current_214 = next(r for r in yaml.safe_load(result.current_text)["releases"] if r["version"] == "2.14")
    assert row == current_214 | {"patches": ["2.14.0", "2.14.1"]}
    changed = [line for line in result.diff().splitlines()[2:] if line[:1] in "+-"]
    assert changed == ['-    patches: ["2.14.0"]', '+    patches: ["2.14.0", "2.14.1"]']
    # the recorded 2.14.1 wheel agrees with the 2.14 cu130 row: no warning about it
    assert not [w for w in result.warnings if w.startswith("2.14")]
    assert index.metadata_reads == ["torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"]


def test_new_patch_with_different_pins_is_flagged(cat_dir):
    edit(cat_dir, 'cudnn: "9.24.0.43", nccl: "2.30.7", arch_list: "7.5;8.0;8.6;9.0;10.0;12.0"}\n      - {tag: cu132',
         'cudnn: "9.24.0.40", nccl: "2.30.7", arch_list: "7.5;8.0;8.6;9.0;10.0;12.0"}\n      - {tag: cu132')
    edit(cat_dir, 'patches: ["2.14.0", "2.14.1"]', 'patches: ["2.14.0"]')
    result = run(cat_dir, FakeIndex(drop_versions=("2.16.0",)))
    assert result.added_patches == ("2.14.1",)
    assert any("2.14.1: the index wheel pins cudnn 9.24.0.43" in w and "9.24.0.40" in w for w in result.warnings)


def test_both_kinds_at_once(cat_dir):
    edit(cat_dir, 'patches: ["2.14.0", "2.14.1"]', 'patches: ["2.14.0"]')
    result = run(cat_dir)
    assert [r["version"] for r in result.entries] == ["2.14", "2.16"]
    assert apply_unified_diff(result.current_text, result.diff()) == result.proposed_text


# --- nothing new ---------------------------------------------------------------------------------
def test_complete_catalog_yields_empty_result_and_diff(cat_dir):
    index = FakeIndex(drop_versions=("2.16.0",))
    before = snapshot(cat_dir)
    result = run(cat_dir, index)
    assert result.entries == () and result.added_series == () and result.added_patches == ()
    assert not result.changed and result.diff() == "" and result.proposed_text == result.current_text
    assert index.metadata_reads == []
    result.apply(cat_dir)
    assert snapshot(cat_dir) == before
    summary = refresh_summary(result)
    assert summary["changed"] is False and summary["entries"] == [] and summary["diff"] == ""


def test_the_packaged_catalog_is_complete_for_the_recorded_listing():
    index = FakeIndex(drop_versions=("2.16.0",))
    result = refresh(load_catalog(), index, today=TODAY)
    assert not result.changed and result.data_dir == data_dir()


def test_recorded_listing_shows_2_15_python_range_mismatch(cat_dir):
    # the real 2.15.0 wheels are cp311..cp315; a catalog row saying 3.10-3.14 is flagged
    path = cat_dir / "pytorch.yaml"
    text = path.read_text()
    fixed = 'python: {min: "3.11", max: "3.15"}  # the index\'s 2.15.0 wheels: cp311-cp315, Requires-Python >=3.11'
    assert fixed in text
    path.write_text(text.replace(fixed, 'python: {min: "3.10", max: "3.14"}'))
    result = run(cat_dir)
    assert "2.15: the catalog admits Python 3.10-3.14 but the index has Linux x86_64 wheels of 2.15.0 " \
           "for 3.11-3.15 only" in result.warnings


# --- diff, apply, determinism ------------------------------------------------------------------
def test_diff_is_a_valid_unified_diff_of_pytorch_yaml_only(cat_dir):
    result = run(cat_dir)
    diff = result.diff()
    headers = [line for line in diff.splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers == ["--- a/pytorch.yaml", "+++ b/pytorch.yaml"]
    assert apply_unified_diff(result.current_text, diff) == result.proposed_text
    assert not [line for line in diff.splitlines()[2:] if line.startswith("-")]  # pure addition
    # header comments and every existing row stay byte for byte
    assert result.proposed_text.startswith(result.current_text)


def test_nothing_is_written_until_apply(cat_dir):
    before = snapshot(cat_dir)
    result = run(cat_dir)
    result.diff()
    refresh_summary(result)
    assert snapshot(cat_dir) == before


def test_apply_writes_and_the_catalog_still_loads(cat_dir):
    before = snapshot(cat_dir)
    result = run(cat_dir)
    assert result.apply(cat_dir) == cat_dir / "pytorch.yaml"
    after = snapshot(cat_dir)
    assert after.keys() == before.keys()  # no temp files left behind
    assert {k for k in after if after[k] != before[k]} == {"pytorch.yaml"}
    assert after["pytorch.yaml"].decode() == result.proposed_text
    catalog = load_catalog(cat_dir)
    release = catalog.torch_release("2.16.0")
    assert release is not None and release.verified == "partial" and release.python.admits("3.15")
    assert release.variant("cu132").cudnn == "9.27.1.3"
    # a second refresh finds nothing more
    again = run(cat_dir)
    assert again.entries == () and again.diff() == ""


def test_apply_defaults_to_the_directory_read(cat_dir):
    result = run(cat_dir)
    result.apply()
    assert (cat_dir / "pytorch.yaml").read_text() == result.proposed_text


def test_apply_refuses_when_the_file_changed_meanwhile(cat_dir):
    result = run(cat_dir)
    (cat_dir / "pytorch.yaml").write_text(result.current_text + "# edited\n")
    with pytest.raises(CatalogError, match="changed since the refresh"):
        result.apply(cat_dir)
    assert (cat_dir / "pytorch.yaml").read_text().endswith("# edited\n")


def test_apply_refuses_a_proposal_the_catalog_would_reject(cat_dir):
    result = run(cat_dir)
    sources = (cat_dir / "sources.yaml").read_text()
    (cat_dir / "sources.yaml").write_text(re.sub(r"\n  pypi_index: .*", "", sources))
    before = snapshot(cat_dir)
    with pytest.raises(CatalogError, match="unknown sources"):
        result.apply(cat_dir)
    assert snapshot(cat_dir) == before


def test_deterministic(cat_dir):
    a, b = run(cat_dir), run(cat_dir)
    assert a.proposed_text == b.proposed_text and a.diff() == b.diff()
    assert json.dumps(refresh_summary(a), sort_keys=True) == json.dumps(refresh_summary(b), sort_keys=True)


def test_summary_is_json(cat_dir):
    summary = json.loads(json.dumps(refresh_summary(run(cat_dir))))
    assert summary["changed"] is True and summary["added_series"] == ["2.16"]
    assert summary["file"].endswith("pytorch.yaml") and summary["diff"].startswith("--- a/pytorch.yaml")
    assert summary["framework"] == "torch"
    assert summary["index_reads"] == [{"version": "2.16.0", "wheel": W216, "python": "3.12", "cuda": "13.2.3",
                                       "source": f"https://files.example.invalid/made-up/{W216}",
                                       "cudnn": "9.27.1.3", "nccl": "2.31.2", "tag": "cu132",
                                       "python_range": {"min": "3.11", "max": "3.15"}}]
    assert summary["entries"][0]["variants"][0]["arch_list"] == CARRIED_132


# --- refusals ----------------------------------------------------------------------------------
def test_catalog_must_come_from_data_dir(cat_dir):
    edit(cat_dir, 'patches: ["2.14.0", "2.14.1"]', 'patches: ["2.14.0"]')
    with pytest.raises(CatalogError, match="not loaded from"):
        refresh(load_catalog(), FakeIndex(), today=TODAY, data_dir=cat_dir)


def test_today_must_be_a_date(cat_dir):
    with pytest.raises(CatalogError, match="ISO date"):
        refresh(load_catalog(cat_dir), FakeIndex(), today="yesterday", data_dir=cat_dir)


def test_the_pypi_index_source_must_exist(cat_dir):
    sources = (cat_dir / "sources.yaml").read_text()
    (cat_dir / "sources.yaml").write_text(re.sub(r"\n  pypi_index: .*", "", sources))
    for name, key in (("pytorch.yaml", "pt_live_2_15, pypi_index"), ("jax.yaml", "jax_nvidia_requirements, pypi_index"),
                      ("tensorflow.yaml", "tf_pip_doc, pypi_index")):
        path = cat_dir / name
        path.write_text(path.read_text().replace(key, key.removesuffix(", pypi_index")))
    with pytest.raises(CatalogError, match="no source 'pypi_index'"):
        run(cat_dir)


# --- a team's own catalog: ENVKIT_CATALOG and export ------------------------------------------

def test_export_then_env_selects_the_team_copy(tmp_path, monkeypatch):
    from envkit.catalog.files import CATALOG_ENV, FILES, data_dir, export_catalog, packaged_dir

    team = export_catalog(tmp_path / "team-catalog")
    assert sorted(p.name for p in team.iterdir()) == sorted([*(f"{n}.yaml" for n in FILES), "perf.yaml",
                                                             "companions.yaml", "binaries.yaml"])
    assert load_catalog(team).digest == load_catalog(packaged_dir()).digest
    monkeypatch.setenv(CATALOG_ENV, str(team))
    assert data_dir() == team
    (team / "pytorch.yaml").write_text((team / "pytorch.yaml").read_text() + "\n# reviewed\n")
    assert load_catalog().digest != load_catalog(packaged_dir()).digest  # the copy is what loads
    with pytest.raises(CatalogError, match="not an empty directory"):
        export_catalog(team)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_a_missing_team_catalog_says_how_to_make_one(tmp_path, monkeypatch):
    from envkit.catalog.files import CATALOG_ENV

    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(CatalogError, match="cannot load catalog file") as err:
        load_catalog()
    assert "envkit catalog export" in err.value.hint and CATALOG_ENV in err.value.hint


# --- nightly --refresh-catalog -------------------------------------------------------------------

def test_nightly_refresh_applies_to_a_team_catalog_and_keeps_the_diff(cat_dir, tmp_path, monkeypatch):
    from envkit.catalog.files import CATALOG_ENV
    from envkit.app.nightly import refresh_catalog_step

    drop_row(cat_dir, "2.14")
    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    before = load_catalog().digest
    doc = refresh_catalog_step(tmp_path / "reports", index=FakeIndex(drop_versions=OTHERS_MADE_UP), today=TODAY)
    assert doc["changed"] and doc["applied"] and "2.14" in doc["frameworks"]["torch"]["added_series"]
    assert doc["frameworks"]["jax"]["added_patches"] == [] and doc["frameworks"]["tensorflow"]["added_series"] == []
    assert doc["files"] == [str(cat_dir / "pytorch.yaml"), str(cat_dir / "companions.yaml")]
    assert load_catalog().digest != before and '  - version: "2.14"' in (cat_dir / "pytorch.yaml").read_text()
    # the series' companions row is proposed with it: triton from torch 2.14.1, torchvision 0.29.x by their own pins
    assert load_catalog().companions("torch", "2.14.1") == {"triton": "~=3.8.0", "torchvision": "==0.29.*"}
    diff = Path(doc["diff"]).read_text()
    assert diff.startswith("--- a/pytorch.yaml") and '+  - version: "2.14"' in diff
    # the next night finds nothing new and writes nothing
    again = refresh_catalog_step(tmp_path / "reports2", index=FakeIndex(drop_versions=OTHERS_MADE_UP), today=TODAY)
    assert not again["changed"] and again["diff"] is None and not (tmp_path / "reports2").exists()


def test_nightly_refresh_never_edits_the_packaged_catalog(cat_dir, tmp_path, monkeypatch):
    import envkit.catalog.files as catalog_mod
    from envkit.catalog.files import CATALOG_ENV
    from envkit.app.nightly import refresh_catalog_step

    drop_row(cat_dir, "2.14")
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    monkeypatch.setattr(catalog_mod, "packaged_dir", lambda: cat_dir)  # stands in for site-packages
    untouched = snapshot(cat_dir)
    doc = refresh_catalog_step(tmp_path / "reports", index=FakeIndex(), today=TODAY)
    assert doc["changed"] and not doc["applied"] and doc["files"] == []
    assert "envkit catalog export" in doc["note"]
    assert snapshot(cat_dir) == untouched
    diff = Path(doc["diff"]).read_text()
    assert diff.startswith("--- a/pytorch.yaml") and "--- a/jax.yaml" in diff and "--- a/tensorflow.yaml" in diff


def test_nightly_refuses_refresh_with_locked(tmp_path):
    from envkit.errors import LockError
    from envkit.app.nightly import run_nightly

    with pytest.raises(LockError, match="cannot be combined with --locked"):
        run_nightly(tmp_path / "team.yaml", engine=None, store=None, out_root=tmp_path, reports_dir=tmp_path,
                    locked=True, refresh_catalog=True)
