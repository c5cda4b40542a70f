"""Releases left out on purpose (the catalog's ``excluded:`` rows): validation with file:line, the
digest, the resolver and explain, `catalog refresh` skipping them, and `envkit catalog exclude`.

Catalogs are copies of the packaged one (tests/unit/refreshfake.py); the index is the recorded one
(torch 2.16.0, jax 0.13.0, tensorflow 2.21.1 and 2.22.0 are new there); resolves use
test_resolve's fake indexes and closure. No network.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from envkit.catalog.files import CATALOG_ENV, load_catalog
from envkit.catalog.releases import lists_release
from envkit.catalog.refresh.run import refresh_catalog
from envkit.catalog.refresh.exclude import exclude_release, source_key
from envkit.errors import CatalogError, ResolutionError
from envkit.lock import Lock, canonical
from envkit.app.resolve import drift
from envkit.resolve.plan import plan, spec_digest

from tests.unit.lockfixtures import make_image, make_lock
from tests.unit.refreshfake import TODAY, FakeIndex, copy_catalog, snapshot
from tests.unit.resolve.test_resolve import load, make_spec, run

BLOCK = "\nexcluded:\n"


@pytest.fixture
def cat_dir(tmp_path) -> Path:
    return copy_catalog(tmp_path)


def exclude(directory: Path, filename: str, *rows: str) -> None:
    """Append an ``excluded:`` block of ``rows`` (YAML lines, two-space indented) to a catalog file."""
    with open(directory / filename, "a") as f:
        f.write(BLOCK + "".join(r + "\n" for r in rows))


def row(version: str, reason: str = "hangs in NCCL all-reduce on H100", sources: str = "[pypi_index]") -> str:
    return f'  - {{version: "{version}", reason: "{reason}", sources: {sources}}}'


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


# --- validation ---------------------------------------------------------------------------------
def test_rows_load_with_their_file_line_and_sources(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.14.1"), row("2.16.0", "not tested here"))
    exclude(cat_dir, "jax.yaml", row("0.12.0.1"))
    catalog = load_catalog(cat_dir)
    first, second = catalog.exclusions("torch")
    assert (first.version, first.reason) == ("2.14.1", "hangs in NCCL all-reduce on H100")
    assert first.sources[0][0] == "pypi_index" and "package index" in first.sources[0][1]
    assert first.location.path == str(cat_dir / "pytorch.yaml")
    assert first.location.line == line_of(cat_dir / "pytorch.yaml", '{version: "2.14.1"') and first.where.startswith("pytorch.yaml:")
    assert catalog.excluded("torch", "2.14.1.0") is first  # compared as versions
    assert catalog.excluded("torch", "2.14.0") is None and catalog.excluded("jax", "2.14.1") is None
    assert [e.framework for e in catalog.exclusions()] == ["torch", "torch", "jax"]
    assert lists_release(catalog, "torch", "2.14.1") and not lists_release(catalog, "torch", "2.16.0")
    assert lists_release(catalog, "jax", "0.12.0.1")


def test_an_empty_list_and_no_list_are_no_exclusions(cat_dir):
    assert load_catalog(cat_dir).exclusions() == ()
    (cat_dir / "tensorflow.yaml").write_text((cat_dir / "tensorflow.yaml").read_text() + "excluded: []\n")
    assert load_catalog(cat_dir).exclusions() == ()


@pytest.mark.parametrize("bad, message, column_at", [
    ('  - {version: "2.14.1", sources: [pypi_index]}', "excluded[0] has no reason (why the release is left out)", "{"),
    ('  - {version: "2.14.1", reason: "  ", sources: [pypi_index]}', "excluded[0].reason: String should have", "reason"),
    ('  - {version: "2.14.1", reason: "r"}', "excluded[0] has no sources (keys of sources.yaml", "{"),
    ('  - {version: "2.14.1", reason: "r", sources: []}', "excluded[0].sources: ", "sources"),
    ('  - {version: "2.14.1", reason: "r", sources: [no_such_key]}', "unknown source 'no_such_key'", "no_such_key"),
    ('  - {version: "two", reason: "r", sources: [pypi_index]}', "excluded[0].version 'two' is not a version", "version"),
    ('  - {version: "2.14", reason: "r", sources: [pypi_index]}', "'2.14' names a series, not a release", "version"),
    ('  - {version: "2.14.1+cu130", reason: "r", sources: [pypi_index]}', "names a local version", "version"),
    ('  - {version: 2.5, reason: "r", sources: [pypi_index]}', "excluded[0].version: Input should be a valid string",
     "version"),
    ('  - {version: "2.14.1", reason: "r", sources: [pypi_index], added: "soon"}', "'soon' is not an ISO date", "added"),
    ('  - {version: "2.14.1", reason: "r", sources: [pypi_index], why: "x"}', "excluded[0]: unknown key 'why'", "why"),
])
def test_a_bad_row_fails_at_its_file_and_line(cat_dir, bad, message, column_at):
    exclude(cat_dir, "pytorch.yaml", bad)
    path = cat_dir / "pytorch.yaml"
    with pytest.raises(CatalogError) as err:
        load_catalog(cat_dir)
    assert message in err.value.message
    line = len(path.read_text().splitlines())
    assert str(err.value.location) == f"{path}:{line}:{bad.index(column_at) + 1}"
    assert err.value.hint and str(err.value).startswith(f"{path}:{line}:")


def test_the_row_hint_shows_the_shape_and_the_doc(cat_dir):
    exclude(cat_dir, "jax.yaml", '  - {version: "0.12.0", sources: [pypi_index]}')
    with pytest.raises(CatalogError) as err:
        load_catalog(cat_dir)
    assert "reason:" in err.value.hint and "docs/catalog.md" in err.value.hint


def test_a_duplicate_row_names_the_first(cat_dir):
    exclude(cat_dir, "tensorflow.yaml", row("2.21.0"), row("2.21.0.0", "again"))
    with pytest.raises(CatalogError, match="tensorflow 2.21.0.0 is already excluded at .*tensorflow.yaml:") as err:
        load_catalog(cat_dir)
    assert err.value.location.line == line_of(cat_dir / "tensorflow.yaml", "again")


def test_not_a_list_and_not_in_a_framework_file(cat_dir):
    (cat_dir / "jax.yaml").write_text((cat_dir / "jax.yaml").read_text() + 'excluded: {version: "0.12.0"}\n')
    with pytest.raises(CatalogError, match="'excluded' must be a list of rows") as err:
        load_catalog(cat_dir)
    assert err.value.location.line == len((cat_dir / "jax.yaml").read_text().splitlines())
    (cat_dir.parent / "second").mkdir()
    cat_dir2 = copy_catalog(cat_dir.parent / "second")
    exclude(cat_dir2, "cuda.yaml", row("12.4.1"))
    with pytest.raises(CatalogError, match="excluded"):  # only framework files hold exclusions
        load_catalog(cat_dir2)


# --- digest and drift ---------------------------------------------------------------------------------
def test_the_digest_changes_with_exclusions_and_a_lock_drifts(cat_dir):
    before = load_catalog(cat_dir)
    spec = load(make_spec("torch==2.14.*"))
    lock = make_lock(make_image(name="img"))
    lock = Lock.model_validate({**lock.model_dump(), "spec_digest": spec_digest(spec), "catalog_digest": before.digest})
    assert drift(spec, before, lock) == []
    exclude(cat_dir, "pytorch.yaml", row("2.14.1"))
    one = load_catalog(cat_dir)
    assert one.digest != before.digest
    assert drift(spec, one, lock) == ["the catalog changed since the lock was written"]
    text = (cat_dir / "pytorch.yaml").read_text()
    (cat_dir / "pytorch.yaml").write_text(text.replace("hangs in NCCL", "hangs in NCCL (confirmed)"))
    assert load_catalog(cat_dir).digest not in (before.digest, one.digest)  # a reason edit is a change too


def test_the_fleets_gpu_order_and_repeats_do_not_make_a_lock_stale(cat_dir):
    """``fleet.gpus`` is a set to the resolver, so the spec digest takes it as one; a lock that kept the older
    digest (the GPUs in their order) still matches its spec, so upgrading does not fail ``--locked`` runs."""
    catalog = load_catalog(cat_dir)
    spec = load(make_spec(gpus=("H100", "A100")))
    legacy = "sha256:" + hashlib.sha256(canonical(spec.model_dump(mode="json"))).hexdigest()
    assert spec_digest(spec) != legacy
    for other in (("A100", "H100"), ("H100", "A100", "H100")):
        assert spec_digest(load(make_spec(gpus=other))) == spec_digest(spec)
    assert spec_digest(load(make_spec(gpus=("A100",)))) != spec_digest(spec)
    lock = make_lock(make_image(name="img"))
    new, old = (Lock.model_validate({**lock.model_dump(), "spec_digest": d, "catalog_digest": catalog.digest})
                for d in (spec_digest(spec), legacy))
    reordered = load(make_spec(gpus=("A100", "H100")))
    assert drift(spec, catalog, new) == drift(reordered, catalog, new) == drift(spec, catalog, old) == []
    changed = ["the spec changed since the lock was written"]
    assert drift(reordered, catalog, old) == changed  # an old lock learns the new digest at its next resolve
    assert drift(load(make_spec(gpus=("H100",))), catalog, new) == changed


# --- the resolver and explain ---------------------------------------------------------------------------
def test_a_range_picks_the_next_allowed_release_and_explain_says_why(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.14.1"))
    catalog = load_catalog(cat_dir)
    (p,) = plan(load(make_spec("torch==2.14.*")), catalog)
    assert p.chosen.version == "2.14.0"
    decision = next(d for d in p.decisions if d.topic == "torch")
    assert decision.rejected and all(r.startswith("torch 2.14.1 (") for r in decision.rejected)
    why = decision.rejected[0]
    assert "excluded on purpose (pytorch.yaml:" in why and "hangs in NCCL all-reduce on H100" in why
    assert "source: pypi_index (" in why
    assert "the catalog also lists it as a release - the exclusion wins" in why
    image = run_image_with(catalog, "torch==2.14.*")
    assert image.framework_version == "2.14.0"  # the lock too
    assert any("excluded on purpose" in r for d in image.decisions for r in d.rejected)


def run_image_with(catalog, framework, **kw):
    return run(catalog, framework=framework, **kw).images[0]


def test_the_packaged_catalog_plans_as_before_without_exclusions():
    (p,) = plan(load(make_spec("torch==2.14.*")), load_catalog())
    assert p.chosen.version == "2.14.1"


def test_a_pin_of_an_excluded_release_fails_at_the_spec_line_with_the_way_out(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.14.1", sources="[pypi_index, pt_live_2_15]"))
    text = make_spec("torch==2.14.1")
    with pytest.raises(ResolutionError) as err:
        plan(load(text), load_catalog(cat_dir))
    e = err.value
    assert str(e.location) == f"team.yaml:{line_of_text(text, 'framework:')}:5"
    assert "pins torch==2.14.1, which the catalog leaves out on purpose: hangs in NCCL all-reduce on H100" in e.message
    assert "source: pypi_index (" in e.message and "pt_live_2_15 (" in e.message
    assert "pick another version: torch==2.14.0 (the newest allowed 2.14 release that fits this image; " \
           "the newest overall is 2.15.0)" in e.hint
    assert f"remove the exclusion (its row at {cat_dir / 'pytorch.yaml'}:" in e.hint
    assert e.exit_code == 4


def line_of_text(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_pin_of_an_excluded_release_the_catalog_never_listed_fails_too(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.16.0", "not validated yet"))
    with pytest.raises(ResolutionError, match="pins torch==2.16.0, which the catalog leaves out on purpose: not validated"):
        plan(load(make_spec("torch==2.16.0")), load_catalog(cat_dir))


def test_a_range_of_only_excluded_releases_names_them_and_never_suggests_one(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.14.1"), row("2.15.0", "also bad"))
    with pytest.raises(ResolutionError, match="no torch build satisfies") as err:
        plan(load(make_spec("torch>=2.14.1")), load_catalog(cat_dir))
    assert "torch 2.15.0 (cu132): excluded on purpose" in err.value.hint
    assert "use torch==2.14.0 (" in err.value.hint  # the newest allowed, not 2.15.0 or 2.14.1


def test_jax_and_tensorflow_exclusions(cat_dir):
    exclude(cat_dir, "jax.yaml", row("0.12.0.1", "plugin crash"))
    exclude(cat_dir, "tensorflow.yaml", row("2.20.0", "no"))
    catalog = load_catalog(cat_dir)
    (p,) = plan(load(make_spec("jax[cuda13]>=0.10", base="debian:13")), catalog)
    assert p.chosen.version == "0.12.0"
    assert any("plugin crash" in r for d in p.decisions for r in d.rejected)
    with pytest.raises(ResolutionError, match=r"pins jax\[cuda13\]==0.12.0.1, which the catalog leaves out") as err:
        plan(load(make_spec("jax[cuda13]==0.12.0.1", base="debian:13")), catalog)
    assert "jax==0.12.0 (the newest allowed 0.12 release" in err.value.hint
    with pytest.raises(ResolutionError, match=r"tensorflow\[and-cuda\]==2.20.0, which the catalog leaves out on purpose: no"):
        plan(load(make_spec("tensorflow[and-cuda]==2.20.0", base="debian:13", gpus=("A100",))), catalog)


def test_explain_cli_shows_the_rejected_release(cat_dir, tmp_path, monkeypatch):
    from envkit.cli import main

    exclude(cat_dir, "pytorch.yaml", row("2.14.1"))
    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    spec = tmp_path / "team.yaml"
    spec.write_text(make_spec("torch==2.14.*"))
    result = CliRunner().invoke(main, ["explain", str(spec), "img"])
    assert result.exit_code == 0, result.output
    assert "img: torch 2.14.0 (cu130)" in result.stdout
    assert "    rejected torch 2.14.1 (cu130): excluded on purpose (pytorch.yaml:" in result.stdout
    assert "the exclusion wins" in result.stdout
    spec.write_text(make_spec("torch==2.14.1"))
    result = CliRunner().invoke(main, ["explain", str(spec), "img", "--json"])
    assert result.exit_code == 4
    doc = json.loads(result.stdout)
    assert doc["error"] == "ResolutionError" and doc["location"] == f"{spec}:{line_of(spec, 'framework:')}:5"
    assert "torch==2.14.0" in doc["hint"]


# --- catalog refresh --------------------------------------------------------------------------------
def test_refresh_skips_excluded_releases_of_every_framework_and_says_why(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.16.0", "a broken wheel"))
    exclude(cat_dir, "jax.yaml", row("0.13.0", "needs CUDA 14"))
    exclude(cat_dir, "tensorflow.yaml", row("2.21.1", "regression"))
    index = FakeIndex()
    result = refresh_catalog(load_catalog(cat_dir), index, today=TODAY, data_dir=cat_dir)
    torch, jax, tf = result.results
    assert (torch.changed, torch.added_series, [s["version"] for s in torch.skipped]) == (False, (), ["2.16.0"])
    assert (jax.changed, jax.added_patches, [s["version"] for s in jax.skipped]) == (False, (), ["0.13.0"])
    assert (tf.added_series, tf.added_patches) == (("2.22",), ())  # 2.22.0 is still proposed
    assert [s["version"] for s in tf.skipped] == ["2.21.1"] and '"2.21.1"]' not in tf.proposed_text
    assert yaml.safe_load(tf.proposed_text)["tensorflow"]["releases"][-2]["patches"] == ["2.21.0"]
    # nothing was read for an excluded release
    assert not any(n.startswith(("torch-2.16.0", "jax-0.13.0", "tensorflow-2.21.1")) for n in index.metadata_reads)
    summary = result.summary()
    skipped = summary["skipped"]
    assert [(s["framework"], s["version"], s["reason"]) for s in skipped] == [
        ("torch", "2.16.0", "a broken wheel"), ("jax", "0.13.0", "needs CUDA 14"), ("tensorflow", "2.21.1", "regression")]
    assert skipped[0]["location"].startswith(f"{cat_dir / 'pytorch.yaml'}:") and "pypi_index" in skipped[0]["sources"]
    assert summary["frameworks"]["jax"]["skipped"][0]["version"] == "0.13.0"
    json.dumps(summary)
    result.apply()  # tensorflow's proposal applies beside the exclusion rows
    after = load_catalog(cat_dir)
    assert [e.version for e in after.exclusions()] == ["2.16.0", "0.13.0", "2.21.1"]
    assert any(r.version == "2.22" for r in after.tensorflow.releases)


def test_refresh_edits_files_that_hold_exclusions_of_other_releases(cat_dir):
    exclude(cat_dir, "pytorch.yaml", row("2.99.0"))
    exclude(cat_dir, "jax.yaml", row("0.99.0"))
    exclude(cat_dir, "tensorflow.yaml", row("2.99.0"))
    result = refresh_catalog(load_catalog(cat_dir), FakeIndex(), today=TODAY, data_dir=cat_dir)
    assert result.summary()["skipped"] == []
    assert [r.changed for r in result.results] == [True, True, True]
    result.apply()
    catalog = load_catalog(cat_dir)
    assert len(catalog.exclusions()) == 3 and "0.13.0" in catalog.jax.versions
    assert catalog.torch_release("2.16.0") is not None
    assert yaml.safe_load((cat_dir / "pytorch.yaml").read_text())["excluded"][0]["version"] == "2.99.0"


def test_cli_refresh_reports_skipped_in_json_and_text(cat_dir, monkeypatch):
    from envkit.cli import main

    exclude(cat_dir, "jax.yaml", row("0.13.0", "needs CUDA 14"))
    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    monkeypatch.setattr("envkit.app.catalog.PackageIndex", lambda: FakeIndex())
    result = CliRunner().invoke(main, ["catalog", "refresh", "--framework", "jax", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [(s["framework"], s["version"]) for s in doc["skipped"]] == [("jax", "0.13.0")]
    assert doc["frameworks"]["jax"]["skipped"][0]["reason"] == "needs CUDA 14" and not doc["changed"]
    result = CliRunner().invoke(main, ["catalog", "refresh", "--framework", "jax"])
    assert result.exit_code == 0, result.output
    assert "skipped: jax 0.13.0, excluded on purpose (" in result.stderr and "needs CUDA 14 (source: pypi_index)" in result.stderr
    assert "the catalog is up to date with the index" in result.stdout


# --- envkit catalog exclude ----------------------------------------------------------------------------
def test_exclude_writes_a_row_and_a_source_then_refresh_and_resolve_obey_it(cat_dir):
    before = snapshot(cat_dir)
    old = load_catalog(cat_dir).digest
    done = exclude_release("torch", "2.16.0", reason="  segfaults at import  ",
                           source="https://github.com/pytorch/pytorch/issues/1", today=TODAY, data_dir=cat_dir)
    key = source_key("torch", "2.16.0")
    assert key == "excluded_torch_2_16_0"
    assert done.written == (cat_dir / "sources.yaml", cat_dir / "pytorch.yaml")
    assert done.sources == {key: "https://github.com/pytorch/pytorch/issues/1"} and not done.listed
    after = snapshot(cat_dir)
    assert {k for k in after if after[k] != before[k]} == {"sources.yaml", "pytorch.yaml"}
    text = (cat_dir / "pytorch.yaml").read_text()
    assert text.startswith(before["pytorch.yaml"].decode())  # appended; nothing else moved
    assert text.endswith(f'excluded:\n  - version: "2.16.0"\n    reason: "segfaults at import"\n'
                         f'    sources: [{key}]\n    added: "{TODAY}"\n')
    catalog = load_catalog(cat_dir)
    assert catalog.digest != old
    (ex,) = catalog.exclusions()
    assert (ex.version, ex.reason, ex.added, ex.sources) == ("2.16.0", "segfaults at import", TODAY,
                                                             ((key, "https://github.com/pytorch/pytorch/issues/1"),))
    # a second row goes under the first; a sources.yaml key is used as it is
    second = exclude_release("torch", "2.14.1", reason="hangs", source="pypi_index", today=TODAY, data_dir=cat_dir)
    assert second.written == (cat_dir / "pytorch.yaml",) and second.listed
    assert [e.version for e in load_catalog(cat_dir).exclusions("torch")] == ["2.16.0", "2.14.1"]
    result = refresh_catalog(load_catalog(cat_dir), FakeIndex(), today=TODAY, frameworks=("torch",), data_dir=cat_dir)
    assert not result.changed and [s["version"] for s in result.summary()["skipped"]] == ["2.16.0"]


def test_exclude_replaces_an_empty_flow_list(cat_dir):
    path = cat_dir / "jax.yaml"
    path.write_text(path.read_text() + "excluded: []  # none yet\n")
    exclude_release("jax", "0.12.0", reason="r", source="pypi_index", today=TODAY, data_dir=cat_dir)
    assert load_catalog(cat_dir).excluded("jax", "0.12.0").reason == "r"
    assert "excluded: []" not in path.read_text()


@pytest.mark.parametrize("args, message", [
    (("torch", "2.14"), "names a series"),
    (("torch", "2.14.1+cu130"), "local version"),
    (("torch", "latest"), "is not a version"),
    (("mxnet", "1.9.1"), "no catalog file for framework"),
])
def test_exclude_refuses_bad_input_and_writes_nothing(cat_dir, args, message):
    before = snapshot(cat_dir)
    with pytest.raises(CatalogError, match=message):
        exclude_release(*args, reason="r", source="pypi_index", today=TODAY, data_dir=cat_dir)
    with pytest.raises(CatalogError, match="needs a reason"):
        exclude_release("torch", "2.16.0", reason=" ", source="pypi_index", today=TODAY, data_dir=cat_dir)
    with pytest.raises(CatalogError, match="needs a source"):
        exclude_release("torch", "2.16.0", reason="r", source="", today=TODAY, data_dir=cat_dir)
    for reason in ("two\nlines", "a \x1b[31mcolour\x1b[0m", "x" * 501):  # it is echoed, and a catalog line
        with pytest.raises(CatalogError, match="one line of at most 500 characters"):
            exclude_release("torch", "2.16.0", reason=reason, source="pypi_index", today=TODAY, data_dir=cat_dir)
    assert snapshot(cat_dir) == before


def test_exclude_refuses_a_generated_key_that_says_something_else(cat_dir):
    path = cat_dir / "sources.yaml"
    path.write_text(path.read_text() + '  excluded_torch_2_16_0: "another text"\n')
    with pytest.raises(CatalogError, match="already has excluded_torch_2_16_0 with another text"):
        exclude_release("torch", "2.16.0", reason="r", source="https://x.invalid/1", today=TODAY, data_dir=cat_dir)
    done = exclude_release("torch", "2.16.0", reason="r", source="another text", today=TODAY, data_dir=cat_dir)
    assert done.written == (cat_dir / "pytorch.yaml",)  # the same text: the key is reused


def test_cli_exclude_json_into_the_team_catalog(cat_dir, monkeypatch):
    from envkit.cli import main

    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    args = ["catalog", "exclude", "tensorflow", "2.21.0", "--reason", "XLA miscompiles", "--source",
            "https://github.com/tensorflow/tensorflow/issues/2", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["framework"], doc["version"], doc["reason"], doc["also_listed"]) == \
        ("tensorflow", "2.21.0", "XLA miscompiles", True)
    assert doc["catalog"] == str(cat_dir) and doc["files"] == [str(cat_dir / "sources.yaml"), str(cat_dir / "tensorflow.yaml")]
    assert doc["sources"] == {"excluded_tensorflow_2_21_0": "https://github.com/tensorflow/tensorflow/issues/2"}
    assert "+  - version: \"2.21.0\"" in doc["diff"]
    assert load_catalog().excluded("tensorflow", "2.21.0").reason == "XLA miscompiles"
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 2
    err = json.loads(again.stdout)
    assert err["error"] == "CatalogError" and "already excluded at" in err["message"]
    human = CliRunner().invoke(main, ["catalog", "exclude", "jax", "0.12.0", "--reason", "r", "--source", "pypi_index"])
    assert human.exit_code == 0, human.output
    assert human.stdout.startswith("--- a/jax.yaml") and "excluded jax 0.12.0 in" in human.stderr
    assert "also lists jax 0.12.0 as a release; the exclusion wins" in human.stderr
    missing = CliRunner().invoke(main, ["catalog", "exclude", "torch", "2.16.0", "--reason", "r"])
    assert missing.exit_code == 2 and "--source" in missing.stderr


def test_the_nightly_refresh_document_lists_what_it_skipped(cat_dir, monkeypatch, tmp_path):
    from envkit.app.nightly import refresh_catalog_step

    exclude(cat_dir, "jax.yaml", row("0.13.0", "needs CUDA 14"))
    monkeypatch.setenv(CATALOG_ENV, str(cat_dir))
    doc = refresh_catalog_step(tmp_path / "reports", index=FakeIndex(), today=TODAY, frameworks=("jax",))
    assert [(s["version"], s["reason"]) for s in doc["frameworks"]["jax"]["skipped"]] == [("0.13.0", "needs CUDA 14")]


def _exclude_after(start, report, directory: str, version: str) -> None:
    """Child process: once both have started, exclude ``version``; report None or the error."""
    start.wait(timeout=60)
    try:
        exclude_release("torch", version, reason="race", source=f"https://example.com/{version}", today=TODAY,
                        data_dir=directory)
        report.put((version, None))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        report.put((version, repr(exc)))


def test_two_excludes_at_once_keep_both_rows(cat_dir):
    """Each reads, proposes and writes under the directory's lock: the second adds to the first's file (both used
    to succeed, and the second's write dropped the first's row)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start, report = ctx.Barrier(2), ctx.Queue()
    children = [ctx.Process(target=_exclude_after, args=(start, report, str(cat_dir), v)) for v in ("2.98.0", "2.97.0")]
    for child in children:
        child.start()
    results = dict(report.get(timeout=120) for _ in children)
    for child in children:
        child.join(timeout=30)
    assert results == {"2.98.0": None, "2.97.0": None}
    catalog = load_catalog(cat_dir)
    assert catalog.excluded("torch", "2.98.0") is not None and catalog.excluded("torch", "2.97.0") is not None
