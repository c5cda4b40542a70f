"""The JAX and TensorFlow refresh, and the refresh of several frameworks at once, on recorded
index answers (tests/unit/refreshfake.py; the recordings: tests/unit/data/refresh/README.md).

The recorded listings hold real jax 0.12.0/0.12.0.1 (+ plugins) and tensorflow 2.14.0,
2.15.0, 2.21.0 and 2.22.0rc0 files, and MADE-UP jax 0.13.0 (a cuda14 extra, Python 3.13+,
a cuda13 plugin needing CUDA runtime 13.2) and tensorflow 2.21.1 and 2.22.0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from envkit.frameworks import FRAMEWORKS
from envkit.resolve.candidates import candidates
from envkit.catalog.files import CATALOG_ENV, load_catalog
from envkit.catalog.refresh.run import parse_frameworks, refresh_catalog
from envkit.catalog.refresh.jax import refresh as refresh_jax
from envkit.catalog.refresh.tensorflow import refresh as refresh_tf
from envkit.errors import CatalogError
from packaging.requirements import Requirement

from tests.unit.refreshfake import TODAY, FakeIndex, copy_catalog, drop_companions, edit, recorded, snapshot

MADE_UP = "https://files.example.invalid/made-up/"
JAX13 = "jax-0.13.0-py3-none-any.whl"
P13 = "jax_cuda13_plugin-0.13.0-cp315-cp315-manylinux_2_27_x86_64.whl"
P14 = "jax_cuda14_plugin-0.13.0-cp315-cp315-manylinux_2_27_x86_64.whl"
REAL_JAX = "jax-0.12.0.1-py3-none-any.whl"
REAL_P12 = "jax_cuda12_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl"
REAL_P13 = "jax_cuda13_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl"
TF221 = "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"
TF2211 = "tensorflow-2.21.1-cp312-cp312-manylinux_2_27_x86_64.whl"
TF222 = "tensorflow-2.22.0-cp312-cp312-manylinux_2_27_x86_64.whl"
NO_JAX_NEWS = ("0.13.0",)
NO_TF_NEWS = ("2.21.1", "2.22.0")


@pytest.fixture
def cat_dir(tmp_path) -> Path:
    return copy_catalog(tmp_path)


def jax_run(directory, index=None):
    return refresh_jax(load_catalog(directory), index or FakeIndex(), today=TODAY, data_dir=directory)


def tf_run(directory, index=None):
    return refresh_tf(load_catalog(directory), index or FakeIndex(), today=TODAY, data_dir=directory)


def changed_lines(result) -> list[str]:
    return [line for line in result.diff().splitlines()[2:] if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def without(text: str, *needles: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not any(n in line for n in needles))


# --- JAX ---------------------------------------------------------------------------------------
def test_jax_new_release_with_a_new_cuda_major(cat_dir):
    index = FakeIndex()
    result = jax_run(cat_dir, index)
    assert result.framework == "jax" and result.added_patches == ("0.13.0",) and result.changed
    assert index.metadata_reads == [JAX13, P14, P13, "jax_cuda12_plugin-0.13.0-cp315-cp315-manylinux_2_27_x86_64.whl"]
    (entry,) = result.entries
    assert entry["versions"][0] == "0.13.0" and entry["python_min"][-1] == {"since": "0.13.0", "python": "3.13"}
    assert entry["python_max"] == "3.14"  # one value for every version: a warning, never raised
    cuda14, cuda13 = entry["extras"][0], entry["extras"][1]
    assert cuda14 == {"extra": "cuda14", "since": "0.13.0", "min_cc": "7.5",
                      "built_with": [{"since": "0.13.0", "cuda": "14.0"}], "cudnn": ">=10.0.0.1,<11.0", "nccl": ">=3.0.1"}
    assert cuda13["built_with"][-1] == {"since": "0.13.0", "cuda": "13.2"}  # the plugin's runtime floor rose
    text = result.proposed_text
    # every change names the metadata it came from, and what was carried forward says so
    assert f"jax's METADATA {MADE_UP}{JAX13}" in text and f"{MADE_UP}{P14}" in text
    assert 'min_cc: "7.5"  # carried forward from cuda13: not in wheel metadata - review' in text
    assert "carried forward, not in wheel metadata - review: min_cc (cuda14 7.5, cuda13 7.5, cuda12 5.2)" in text
    assert any("python_max (3.14) is one value for every version" in w for w in result.warnings)
    assert any("jax-cuda12-plugin requires cudnn >=9.10.2.21,<10.0" in w for w in result.warnings)
    assert any("jax[cuda14]" in w and "envkit.frameworks.JAX" in w for w in result.warnings)
    read = result.reads[0].to_json()
    assert read["source"] == MADE_UP + JAX13 and read["jaxlib"] == "0.13.0"
    assert [(p["extra"], p["version"], p["pjrt"]) for p in read["extras"]] == \
        [("cuda14", "0.13.0", "0.13.0"), ("cuda13", "0.13.0", "0.13.0"), ("cuda12", "0.13.0", "0.13.0")]
    # the old lines stay: only the versions' first line and cuda13's built_with line are replaced
    removed = [line for line in changed_lines(result) if line.startswith("-")]
    assert len(removed) == 2 and removed[0].startswith('-  versions: ["0.12.0.1"') and "built_with" in removed[1]


def test_jax_new_patch_from_real_metadata(cat_dir):
    edit(cat_dir / "jax.yaml", '["0.12.0.1", "0.12.0", ', '["0.12.0", ')
    drop_companions(cat_dir, "jax", "0.12.0.1")
    index = FakeIndex(drop_versions=NO_JAX_NEWS)
    result = jax_run(cat_dir, index)
    assert result.added_patches == ("0.12.0.1",)
    assert index.metadata_reads == [REAL_JAX, REAL_P13, REAL_P12]  # the cp312 wheels: the requested Python
    assert yaml.safe_load(result.proposed_text)["jax"]["versions"][:2] == ["0.12.0.1", "0.12.0"]
    assert yaml.safe_load(result.proposed_text)["jax"]["python_min"] == yaml.safe_load(result.current_text)["jax"]["python_min"]
    read = result.reads[0].to_json()
    assert read["jaxlib"] == "0.12.0.1" and read["python_range"] == {"min": "3.12", "max": "3.15"}
    cuda13 = read["extras"][0]
    assert (cuda13["plugin"], cuda13["pjrt"], cuda13["cuda_runtime"], cuda13["cudnn"], cuda13["nccl"]) == \
        ("jax-cuda13-plugin", "0.12.0.1", "13.0.48", ">=9.12.0.46,<10.0", ">=2.27.7")
    assert cuda13["source"].startswith("https://files.pythonhosted.org/") and cuda13["source"].endswith(REAL_P13)
    # nothing but the version and its comment lines: the extras' facts agree or are carried forward
    added = [line for line in changed_lines(result) if line.startswith("+")]
    assert all(line.startswith(("+  #", '+  versions: ["0.12.0.1",', '+             "0.12.0"')) for line in added)
    assert "CUDA toolkit built_with (cuda13 13.0, cuda12 12.9)" in result.proposed_text


def test_jax_nothing_new(cat_dir):
    index = FakeIndex(drop_versions=NO_JAX_NEWS)
    result = jax_run(cat_dir, index)
    assert not result.changed and result.diff() == "" and result.entries == () and index.metadata_reads == []
    assert result.notes == ("ignored 1 jax version(s) older than the catalog's oldest (0.4.26)",)


def test_jax_plugin_metadata_missing_a_field_adds_nothing(cat_dir):
    index = FakeIndex(metadata={P13: without(recorded(P13), "nvidia-cudnn")})
    result = jax_run(cat_dir, index)
    assert not result.changed and result.entries == ()
    assert f"0.13.0: jax-cuda13-plugin 0.13.0's METADATA ({MADE_UP}{P13}) gives no nvidia-cudnn range in its " \
           "with-cuda extra; not added" in result.warnings


def test_jax_release_without_a_cuda_plugin_requirement_adds_nothing(cat_dir):
    index = FakeIndex(metadata={JAX13: without(recorded(JAX13), "jax-cuda14-plugin[with-cuda]")})
    result = jax_run(cat_dir, index)
    assert not result.changed
    assert any("has no jax-cuda14-plugin[with-cuda] requirement in its cuda14 extra" in w for w in result.warnings)


def test_jax_release_that_drops_an_extra_is_not_added(cat_dir):
    index = FakeIndex(metadata={JAX13: without(recorded(JAX13), '"cuda12"')})
    result = jax_run(cat_dir, index)
    assert not result.changed
    assert any("has no cuda12 extra, but the catalog's cuda12 extra has no end" in w for w in result.warnings)


def test_jax_only_release_takes_the_newest_plugin_in_its_range(cat_dir):
    text = recorded(JAX13).replace("jax-cuda12-plugin[with-cuda]<=0.13.0,>=0.13.0",
                                   "jax-cuda12-plugin[with-cuda]<=0.12.9,>=0.12.0")
    index = FakeIndex(metadata={JAX13: text})
    result = jax_run(cat_dir, index)
    cuda12 = result.reads[0].to_json()["extras"][2]
    assert (cuda12["extra"], cuda12["version"]) == ("cuda12", "0.12.0.1")
    assert REAL_P12 in index.metadata_reads and result.added_patches == ("0.13.0",)


def test_jax_apply_and_the_catalog_loads(cat_dir):
    before = snapshot(cat_dir)
    result = jax_run(cat_dir)
    assert result.apply() == cat_dir / "jax.yaml"
    after = snapshot(cat_dir)
    assert {k for k in after if after[k] != before[k]} == {"jax.yaml"} and after.keys() == before.keys()
    jax = load_catalog(cat_dir).jax
    assert jax.python_range("0.13.0").min == "3.13" and jax.python_range("0.12.0.1").min == "3.12"
    assert next(e for e in jax.extras if e.extra == "cuda13").cuda_for("0.13.0") == "13.2"
    assert next(e for e in jax.extras if e.extra == "cuda13").cuda_for("0.12.0.1") == "13.0"
    found = candidates(Requirement("jax==0.13.0"), load_catalog(cat_dir))
    assert [(c.variant, c.cuda, c.min_cc) for c in found] == [("cuda14", "14.0", "7.5"), ("cuda13", "13.2", "7.5"),
                                                             ("cuda12", "12.9", "5.2")]
    assert not jax_run(cat_dir).changed  # a second refresh finds nothing more


# --- TensorFlow --------------------------------------------------------------------------------
def test_tf_new_series_and_new_patch(cat_dir):
    index = FakeIndex()
    result = tf_run(cat_dir, index)
    assert result.framework == "tensorflow"
    assert result.added_series == ("2.22",) and result.added_patches == ("2.21.1",)
    assert index.metadata_reads == [TF2211, TF222]
    new_patch, new_series = result.entries
    assert new_patch == {"version": "2.21", "patches": ["2.21.0", "2.21.1"], "python": {"min": "3.10", "max": "3.13"},
                         "cuda": "12.5", "cudnn": "9.3", "arches": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]}
    # 2.22.0's wheels: cp310..cp314 (the macOS one does not count); and-cuda: runtime >=12.5.82, cudnn >=9.10.2.21
    assert new_series == {"version": "2.22", "patches": ["2.22.0"], "python": {"min": "3.10", "max": "3.14"},
                          "cuda": "12.5", "cudnn": "9.10"}
    lines = changed_lines(result)
    arches = "arches: [sm_60, sm_70, sm_80, sm_89, compute_90]}  # arches: wheel_arches_tensorflow_2_21_0 (2026-12-03)"
    assert lines[0] == ('-    - {version: "2.21", patches: ["2.21.0"], python: {min: "3.10", max: "3.13"}, cuda: "12.5", '
                        'cudnn: "9.3", ' + arches)
    assert lines[1] == ('+    - {version: "2.21", patches: ["2.21.0", "2.21.1"], python: {min: "3.10", max: "3.13"}, '
                        f'cuda: "12.5", cudnn: "9.3", {arches}; 2.21.1: {MADE_UP}{TF2211}')
    assert lines[2].startswith('+    - {version: "2.22", patches: ["2.22.0"]') and len(lines) == 3
    assert f"refreshed from the package index {TODAY}: {MADE_UP}{TF222}" in lines[2]
    assert "min_driver is file-wide, not in wheel metadata: carried forward - review" in lines[2]
    # the recorded index serves no byte ranges: no arches for the row, the file-wide list applies, said so
    assert "arches unread" in lines[2] and "arches:" not in lines[2].split("#")[0]
    read = result.reads[-1].to_json()
    assert (read["cuda_runtime"], read["cudnn"], read["nccl"]) == ("12.5.82", "9.10.2.21", ">=2.30.7,<3.0")
    assert "tensorflow-2.22.0rc0" not in " ".join(index.metadata_reads)  # pre-releases are not read


def test_tf_rederives_the_real_2_21_row(cat_dir):
    path = cat_dir / "tensorflow.yaml"
    known = next(line for line in path.read_text().splitlines(keepends=True) if '{version: "2.21"' in line)
    path.write_text(path.read_text().replace(known, ""))
    drop_companions(cat_dir, "tensorflow", "2.21")
    index = FakeIndex(drop_versions=NO_TF_NEWS)
    result = tf_run(cat_dir, index)
    assert index.metadata_reads == [TF221] and result.added_series == ("2.21",)
    # the same facts as the catalog's row; its arches come from the wheel, which the recorded index cannot serve
    assert {k: v for k, v in yaml.safe_load(known.strip()[2:]).items() if k != "arches"} == result.entries[0]


def test_tf_nothing_new_and_a_superseded_release_is_skipped(cat_dir):
    index = FakeIndex(drop_versions=NO_TF_NEWS)
    result = tf_run(cat_dir, index)
    assert not result.changed and result.diff() == "" and index.metadata_reads == []
    assert "2.15.0: skipped - the 2.15 row lists its post-release, which replaces it" in result.notes


def test_tf_metadata_missing_a_field_adds_nothing(cat_dir):
    index = FakeIndex(drop_versions=("2.21.1",), metadata={TF222: without(recorded(TF222), "nvidia-cudnn")})
    result = tf_run(cat_dir, index)
    assert not result.changed and result.entries == ()
    assert f"2.22.0: its METADATA ({MADE_UP}{TF222}) gives no nvidia-cudnn version in the and-cuda extra; " \
           "not added" in result.warnings


def test_tf_new_patch_with_other_pins_is_flagged(cat_dir):
    text = recorded(TF2211).replace("nvidia-cudnn-cu12<10.0,>=9.3.0.75", "nvidia-cudnn-cu12<10.0,>=9.10.2.21")
    result = tf_run(cat_dir, FakeIndex(drop_versions=("2.22.0",), metadata={TF2211: text}))
    assert result.added_patches == ("2.21.1",)
    assert any(w.startswith("2.21.1: the index wheel gives CUDA 12.5, cuDNN 9.10") and "only the patches" in w
               for w in result.warnings)


def test_tf_apply_and_the_catalog_loads(cat_dir):
    result = tf_run(cat_dir)
    result.apply()
    tf = load_catalog(cat_dir).tensorflow
    assert [r.version for r in tf.releases][-2:] == ["2.21", "2.22"]
    found = candidates(Requirement("tensorflow==2.22.0"), load_catalog(cat_dir))
    assert [(c.version, c.cuda, c.cudnn) for c in found] == [("2.22.0", "12.5", "9.10")]


# --- several frameworks at once ---------------------------------------------------------------------
def test_all_frameworks_one_diff_one_apply(cat_dir):
    before = snapshot(cat_dir)
    result = refresh_catalog(load_catalog(cat_dir), FakeIndex(), today=TODAY, data_dir=cat_dir)
    assert [r.framework for r in result.results] == list(FRAMEWORKS)
    summary = json.loads(json.dumps(result.summary()))
    assert summary["changed"] and list(summary["frameworks"]) == ["torch", "jax", "tensorflow"]
    assert summary["frameworks"]["torch"]["added_series"] == ["2.16"]
    assert summary["frameworks"]["jax"]["added_patches"] == ["0.13.0"]
    assert summary["frameworks"]["tensorflow"]["added_series"] == ["2.22"]
    assert [s["file"] for s in summary["frameworks"].values()] == \
        [str(cat_dir / n) for n in ("pytorch.yaml", "jax.yaml", "tensorflow.yaml")]
    # companions.yaml: the rows of the new releases, after the frameworks' files
    assert summary["files"] == [s["file"] for s in summary["frameworks"].values()] + [str(cat_dir / "companions.yaml")]
    assert [e["framework"] + " " + e["version"] for e in summary["companions"]["entries"]] == \
        ["torch 2.16", "jax 0.13.0", "tensorflow 2.22"]
    assert [line for line in summary["diff"].splitlines() if line.startswith("--- ")] == \
        ["--- a/pytorch.yaml", "--- a/jax.yaml", "--- a/tensorflow.yaml", "--- a/companions.yaml"]
    assert any(w.startswith("jax: 0.13.0:") for w in summary["warnings"])
    assert snapshot(cat_dir) == before  # nothing written before apply
    assert result.apply() == [cat_dir / "pytorch.yaml", cat_dir / "jax.yaml", cat_dir / "tensorflow.yaml",
                              cat_dir / "companions.yaml"]
    catalog = load_catalog(cat_dir)
    assert catalog.torch_release("2.16.0") and "0.13.0" in catalog.jax.versions
    assert catalog.companions("torch", "2.16.0")["torchvision"] == "==0.31.*"
    assert not refresh_catalog(catalog, FakeIndex(), today=TODAY, data_dir=cat_dir).changed


def test_apply_writes_nothing_when_one_file_changed_meanwhile(cat_dir):
    result = refresh_catalog(load_catalog(cat_dir), FakeIndex(), today=TODAY, data_dir=cat_dir)
    (cat_dir / "tensorflow.yaml").write_text(result.result("tensorflow").current_text + "# edited\n")
    before = snapshot(cat_dir)
    with pytest.raises(CatalogError, match="tensorflow.yaml changed since the refresh"):
        result.apply()
    assert snapshot(cat_dir) == before  # pytorch.yaml and jax.yaml not written either


def test_one_framework_reads_only_its_own_listing(cat_dir):
    index = FakeIndex()
    result = refresh_catalog(load_catalog(cat_dir), index, today=TODAY, frameworks=["tensorflow"], data_dir=cat_dir)
    assert [r.framework for r in result.results] == ["tensorflow"]
    # and its companion's (tf-keras), for companions.yaml
    assert index.session.gets == ["https://index.invalid/simple/tensorflow/", "https://index.invalid/simple/tf-keras/"]


def test_unknown_framework_is_refused():
    assert parse_frameworks(()) == tuple(FRAMEWORKS) and parse_frameworks(["jax", "torch"]) == ("torch", "jax")
    with pytest.raises(CatalogError, match="no refresh for framework") as err:
        parse_frameworks(["mxnet"])
    assert "torch, jax, tensorflow" in err.value.hint


def test_the_catalog_must_come_from_data_dir(cat_dir):
    edit(cat_dir / "jax.yaml", '["0.12.0.1", "0.12.0", ', '["0.12.0", ')
    with pytest.raises(CatalogError, match="not loaded from"):
        refresh_jax(load_catalog(), FakeIndex(), today=TODAY, data_dir=cat_dir)


# --- the CLI and nightly -----------------------------------------------------------------------------
def test_cli_frameworks_are_the_resolver_frameworks():
    from envkit.cli import main

    exclude = main.commands["catalog"].commands["exclude"]
    assert tuple(next(p for p in exclude.params if p.name == "framework").type.choices) == tuple(FRAMEWORKS)


def test_cli_refresh_one_framework_json_and_apply(cat_dir, monkeypatch):
    from envkit.cli import main

    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    monkeypatch.setattr("envkit.app.catalog.PackageIndex", lambda: FakeIndex())
    before = snapshot(cat_dir)
    result = CliRunner().invoke(main, ["catalog", "refresh", "--framework", "jax", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc["frameworks"]) == ["jax"] and doc["frameworks"]["jax"]["added_patches"] == ["0.13.0"]
    assert doc["files"] == [str(cat_dir / "jax.yaml"), str(cat_dir / "companions.yaml")]  # + jax 0.13.0's companions
    assert doc["applied"] is False  # proposed, not written
    assert snapshot(cat_dir) == before
    result = CliRunner().invoke(main, ["catalog", "refresh", "--framework", "tensorflow", "--framework", "jax", "--apply"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("--- a/jax.yaml") and "--- a/tensorflow.yaml" in result.stdout
    after = snapshot(cat_dir)
    assert {k for k in after if after[k] != before[k]} == {"jax.yaml", "tensorflow.yaml", "companions.yaml"}
    bad = CliRunner().invoke(main, ["catalog", "refresh", "--framework", "mxnet"])
    assert bad.exit_code == 2 and "torch" in bad.stderr


def test_nightly_refresh_framework_needs_refresh_catalog():
    from envkit.cli import main

    result = CliRunner().invoke(main, ["nightly", "team.yaml", "--refresh-framework", "jax"])
    assert result.exit_code == 2 and "--refresh-catalog" in result.stderr


def test_nightly_refresh_of_jax_and_tensorflow_applies_to_a_team_catalog(cat_dir, tmp_path, monkeypatch):
    from envkit.app.nightly import refresh_catalog_step

    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    doc = refresh_catalog_step(tmp_path / "reports", index=FakeIndex(), today=TODAY, frameworks=("jax", "tensorflow"))
    assert doc["applied"] and doc["files"] == [str(cat_dir / n) for n in ("jax.yaml", "tensorflow.yaml",
                                                                        "companions.yaml")]
    assert list(doc["frameworks"]) == ["jax", "tensorflow"]
    tf = doc["frameworks"]["tensorflow"]
    assert (tf["added_series"], tf["added_patches"]) == (["2.22"], ["2.21.1"])
    assert [w.split(" (")[0] for w in tf["warnings"]] == ["2.22: arches unread"]  # no byte ranges recorded
    diff = Path(doc["diff"]).read_text()
    assert diff.startswith("--- a/jax.yaml") and "pytorch.yaml" not in diff
    load_catalog(cat_dir)


def test_jax_gap_version_never_adds_since_rows_before_existing_ones(cat_dir):
    # 0.12.0.1 is re-read as a gap version (0.13.0 stays known) whose cuda13 plugin needs CUDA 13.2
    edit(cat_dir / "jax.yaml", '["0.12.0.1", "0.12.0", ', '["0.13.0", "0.12.0", ')
    drop_companions(cat_dir, "jax", "0.12.0.1")
    text = recorded(REAL_P13).replace("nvidia-cuda-runtime>=13.0.48", "nvidia-cuda-runtime>=13.2.51")
    result = jax_run(cat_dir, FakeIndex(metadata={REAL_P13: text}))
    assert result.added_patches == ("0.12.0.1",)
    assert "jax-cuda13-plugin needs CUDA runtime >= 13.2.51" in " ".join(result.warnings)
    entry = yaml.safe_load(result.proposed_text)["jax"]
    assert entry["versions"][:3] == ["0.13.0", "0.12.0.1", "0.12.0"]
    assert entry["extras"][0]["built_with"] == [{"since": "0.7.2", "cuda": "13.0"}]
