"""A hand-edited catalog (an exported team copy) is checked at load: each value the code computes with has
a grammar, rows that would be silently shadowed are refused, and every refusal is a CatalogError at the
file:line of the value, naming it and what to write (never a traceback later in the resolver)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envkit.catalog.files import CATALOG_ENV, load_catalog, packaged_dir
from envkit.cli import main
from envkit.errors import CatalogError

from tests.unit.refreshfake import copy_catalog, edit

ROOT = Path(__file__).resolve().parents[3]
# torch 2.5's cu124 row, after its cu121 row (2.6 has the same cu124 row after another)
CU124_25 = 'nccl: null, arch_list: "5.0;6.0;7.0;7.5;8.0;8.6;9.0"}\n      - {tag: cu124, cuda: "12.4", status: stable, ' \
           'cudnn: "9.1.0.70", nccl: "2.21.5", arch_list: "5.0;6.0;7.0;7.5;8.0;8.6;9.0"}'
ROW_25 = 'patches: ["2.5.0", "2.5.1"]\n    python: {min: "3.9", max: "3.12"}\n    index_default: cu124'


@pytest.fixture
def cat_dir(tmp_path) -> Path:
    return copy_catalog(tmp_path)


def cu124_25_arches(arch_list: str) -> str:
    head, _, tail = CU124_25.rpartition("5.0;6.0;7.0;7.5;8.0;8.6;9.0")
    return head + arch_list + tail


def line_of(path: Path, needle: str) -> int:
    text = path.read_text()
    assert text.count(needle) == 1, needle
    return text[:text.index(needle)].count("\n") + 1


def test_the_packaged_catalog_loads_with_every_check():
    assert load_catalog(packaged_dir()).digest.startswith("sha256:")


# (file, old, new, the message's fragments, the text at the reported line)
BAD = [
    ("pytorch.yaml", CU124_25, cu124_25_arches("5.0;sm_banana"),
     ["releases.5.variants.2.arch_list", "'5.0;sm_banana' holds 'sm_banana'", "7.5;8.0;9.0a;12.0+PTX"],
     "5.0;sm_banana"),
    ("pytorch.yaml", CU124_25, cu124_25_arches("5.0;8.10"),
     ["holds '8.10'", "one minor digit"], "5.0;8.10"),
    ("pytorch.yaml", CU124_25, cu124_25_arches("5.0;8.0;8.0"),
     ["names '8.0' twice"], "5.0;8.0;8.0"),
    ("pytorch.yaml", CU124_25, CU124_25.replace('cuda: "12.4"', 'cuda: "12.x"'),
     ["releases.5.variants.2.cuda", "'12.x' is not a version of numbers and dots"], '"12.x"'),
    ("pytorch.yaml", ROW_25, ROW_25.replace("index_default: cu124", "index_default: cu999"),
     ["releases.5.index_default", "'cu999' names no variant of torch 2.5", "cu118, cu121, cu124"], "cu999"),
    ("pytorch.yaml", 'patches: ["2.5.0", "2.5.1"]', 'patches: ["2.5.0", "2.5.1", "2.5.1"]',
     ["releases.5.patches.2", "torch '2.5.1' is listed twice", "releases.5.patches.1"], '"2.5.1", "2.5.1"'),
    ("pytorch.yaml", 'patches: ["2.5.0", "2.5.1"]', 'patches: ["2.5.0", "2.6.1"]',
     ["releases.5.patches.1", "'2.6.1' is not a release of the series 2.5"], '"2.6.1"'),
    ("pytorch.yaml", 'patches: ["2.5.0", "2.5.1"]', 'patches: ["2.5.0", "2.5.x"]',
     ["'2.5.x' is not a version"], '"2.5.x"'),
    ("pytorch.yaml", 'python: {min: "3.9", max: "3.12"}\n    index_default: cu124',
     'python: {min: "3.13", max: "3.12"}\n    index_default: cu124',
     ["Python range 3.13-3.12 is empty"], '"3.13", max: "3.12"'),
    ("gpus.yaml", '{cc: "9.0", family: Hopper', '{cc: "9", family: Hopper',
     ["architectures.", ".cc", "'9' is not a compute capability MAJOR.MINOR"], 'cc: "9"'),
    ("gpus.yaml", '{cc: "9.0", family: Hopper', '{cc: "8.9", family: Hopper',
     ["cc '8.9' is already the row architectures."], '{cc: "8.9", family: Hopper'),
    ("gpus.yaml", 'models: ["H100", "H200"', 'models: ["H100", "L4"',
     [".models.1: GPU 'L4' is already a model of architectures.", "(cc 8.9)"], '"H100", "L4"'),
    ("cuda.yaml", '{version: "11.7.0", linux_min: "515.43.04"', '{version: "11.7.0", linux_min: "515.43.O4"',
     ["toolkits.", ".linux_min", "'515.43.O4' is not a version of numbers and dots"], "515.43.O4"),
    ("jax.yaml", 'min_cc: "7.5"', 'min_cc: "sm_75"', ["jax.extras.0.min_cc", "'sm_75'"], 'min_cc: "sm_75"'),
    ("jax.yaml", '"0.12.0.1", "0.12.0",', '"0.12.0.1", "0.12.0.1",',
     ["jax.versions.1", "jax '0.12.0.1' is listed twice"], '"0.12.0.1", "0.12.0.1"'),
    ("tensorflow.yaml", "arches: [sm_60, sm_70, sm_80, sm_89, compute_90]}  # arches: wheel_arches_tensorflow_2_21_0",
     "arches: [sm_60, sm_9, compute_90]}  # arches: wheel_arches_tensorflow_2_21_0",
     ["tensorflow.releases.6.arches.1", "'sm_9' is not a compiled target"], "sm_9,"),
    ("tensorflow.yaml", 'arch_list: "3.5;5.0;6.0;7.0;7.5;8.0+PTX"', 'arch_list: "3.5;5.0;8.0+ptx"',
     ["tensorflow.arch_list", "holds '8.0+ptx'"], "8.0+ptx"),
    ("pytorch.yaml", 'variant_index: "https://download.pytorch.org/whl/{tag}"',
     'variant_index: "https://download.pytorch.org/whl/{variant}"',
     ["variant_index", "one {tag} field"], "{variant}"),
]


@pytest.mark.parametrize("filename, old, new, fragments, at", BAD, ids=[b[3][-1][:40] for b in BAD])
def test_a_bad_value_fails_the_load_at_its_file_and_line(cat_dir, filename, old, new, fragments, at):
    edit(cat_dir / filename, old, new)
    with pytest.raises(CatalogError) as err:
        load_catalog(cat_dir)
    for fragment in fragments:
        assert fragment in err.value.message, err.value.message
    assert err.value.message.startswith("catalog entry ")
    assert err.value.location.path == str(cat_dir / filename)
    assert err.value.location.line == line_of(cat_dir / filename, at)
    assert "docs/catalog.md" in err.value.hint and err.value.exit_code == 2


def test_the_forms_the_code_writes_are_accepted(cat_dir):
    """wheel_arches.to_arch_list spells sm_90a as 9.0a and sm_100f as 10.0f; covers() reads them."""
    edit(cat_dir / "pytorch.yaml", CU124_25, cu124_25_arches("8.0;9.0a;10.0f+PTX"))
    edit(cat_dir / "tensorflow.yaml", "arches: [sm_60, sm_70, sm_80, sm_89, compute_90]}  # arches: wheel_arches_tensorflow_2_21_0",
         "arches: [sm_90a, sm_100f, compute_120]}  # arches: wheel_arches_tensorflow_2_21_0")
    catalog = load_catalog(cat_dir)
    assert catalog.torch_release("2.5").variant("cu124").arches == ("sm_80", "sm_90a", "sm_100f", "compute_100f")


def test_a_key_written_twice_is_refused_at_the_second(cat_dir):
    edit(cat_dir / "pytorch.yaml", ROW_25, ROW_25 + "\n    index_default: cu121")
    with pytest.raises(CatalogError) as err:
        load_catalog(cat_dir)
    first = line_of(cat_dir / "pytorch.yaml", ROW_25) + 2
    assert err.value.message == (f"catalog file pytorch.yaml is not valid YAML: duplicate key 'index_default' "
                                 f"(first at line {first}); keep one")
    assert (err.value.location.line, err.value.location.column) == (first + 1, 5)


def test_a_top_level_key_in_two_files_is_refused(cat_dir):
    (cat_dir / "os.yaml").write_text((cat_dir / "os.yaml").read_text() + 'variant_index: "https://x.invalid/{tag}"\n')
    with pytest.raises(CatalogError, match="top-level key 'variant_index' is already in os.yaml") as err:
        load_catalog(cat_dir)
    assert err.value.location.path == str(cat_dir / "pytorch.yaml")


def test_a_file_that_is_not_utf8_is_named_by_line_and_column(cat_dir):
    path = cat_dir / "gpus.yaml"
    lines = path.read_bytes().split(b"\n")
    lines[6] = lines[6].replace(b"Kepler", b"K\xe9pler", 1)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CatalogError) as err:
        load_catalog(cat_dir)
    assert err.value.message == "catalog file gpus.yaml is not UTF-8 text: byte 0xe9 cannot be decoded"
    column = lines[6].index(b"\xe9") + 1
    assert (err.value.location.path, err.value.location.line, err.value.location.column) == (str(path), 7, column)
    assert "position" not in str(err.value) and "UTF-8" in err.value.hint


def test_explain_and_nightly_json_report_a_bad_arch_list_as_a_catalog_error(cat_dir, tmp_path, monkeypatch):
    """The QA case: a team copy with arch_list "5.0;sm_banana" used to end in a ValueError traceback."""
    edit(cat_dir / "pytorch.yaml", CU124_25, cu124_25_arches("5.0;sm_banana"))
    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    spec = ROOT / "examples" / "team.yaml"
    explain = CliRunner().invoke(main, ["explain", str(spec), "torch25"])
    assert explain.exit_code == 2 and "sm_banana" in explain.stderr and "Traceback" not in explain.output
    assert f"{cat_dir / 'pytorch.yaml'}:{line_of(cat_dir / 'pytorch.yaml', 'sm_banana')}:" in explain.stderr
    resolve = CliRunner().invoke(main, ["resolve", str(spec), "--json"])
    assert resolve.exit_code == 2
    doc = json.loads(resolve.stdout)
    assert doc["error"] == "CatalogError" and "'sm_banana'" in doc["message"]


# --- envkit catalog export under a file ----------------------------------------------------------------

@pytest.mark.parametrize("under", ["sub", "sub/deeper"])
def test_export_under_a_file_says_a_part_of_the_path_is_not_a_directory(tmp_path, monkeypatch, under):
    from envkit.catalog.files import export_catalog

    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("not a directory\n")
    with pytest.raises(NotADirectoryError) as err:
        export_catalog(f"afile/{under}")
    assert err.value.filename == f"afile/{under}" and "(afile is a file)" in err.value.strerror
    result = CliRunner().invoke(main, ["catalog", "export", f"afile/{under}", "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["message"] == f"envkit catalog export: cannot use afile/{under}: Not a directory (afile is a file)"
    assert "a part of that path is a file" in doc["hint"] and "File exists" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing left beside it
