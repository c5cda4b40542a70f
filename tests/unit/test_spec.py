"""team.yaml loading: strict keys, grammars, positions, defaults."""

import shutil

import certifi
import pytest

from envkit.catalog.files import load_catalog
from envkit.errors import SpecError
from envkit.resolve.plan import check_gpus
from envkit.spec import load_spec
from tests.conftest import MINIMAL, ROOT


def test_example_spec_loads():
    spec = load_spec(ROOT / "examples" / "team.yaml")
    assert spec.team == "vision"
    target = spec.effective(spec.images[0])
    assert target.base.bootstrap.suite == "bookworm"
    assert target.pip == ("numpy==2.1.*",)


def test_misspelt_key_names_file_line_column_and_allowed_keys(write_spec):
    path = write_spec(MINIMAL.replace("    framework:", "    framwork:"))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    err = exc.value
    assert str(err.location) == f"{path}:8:5"
    assert "framwork" in err.message
    assert "did you mean 'framework'" in err.hint
    assert "allowed keys:" in err.hint and "python" in err.hint


def test_unknown_top_level_key(write_spec):
    path = write_spec(MINIMAL + "imagez: []\n")
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert exc.value.location.line == 9
    assert "'imagez'" in exc.value.message and "did you mean 'images'" in exc.value.hint


@pytest.mark.parametrize(
    "old,new,needle,line",
    [
        ('min_driver: "550.54.15"', 'min_driver: "latest"', "'latest' is not a valid driver version", 4),
        ('min_driver: "550.54.15"', "min_driver: 550.54", "driver", 4),
        ('framework: "torch==2.5.*"', 'framework: "torch=>2.5"', "not a valid requirement", 8),
        ('framework: "torch==2.5.*"', 'framework: "torch @ https://evil.example/t.whl"', "direct URL", 8),
        ("name: torch25", "name: Torch_25", "not a valid name", 7),
    ],
)
def test_malformed_values_name_the_value_and_line(write_spec, old, new, needle, line):
    path = write_spec(MINIMAL.replace(old, new))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert needle in str(exc.value)
    assert exc.value.location.line == line


def test_python_version_must_be_quoted_string(write_spec):
    path = write_spec(MINIMAL + "    python: 3.1O\n")
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert "python" in str(exc.value) and exc.value.location.line == 9


def test_yaml_aliases_are_refused(write_spec):
    path = write_spec(MINIMAL + "defaults:\n  pip: &p [numpy]\nbuild: *p\n")
    with pytest.raises(SpecError, match="aliases are not allowed"):
        load_spec(path)


def test_duplicate_keys_are_refused(write_spec):
    path = write_spec(MINIMAL + "team: other\n")
    with pytest.raises(SpecError, match="duplicate key 'team'") as exc:
        load_spec(path)
    assert exc.value.location.line == 9


def test_unknown_gpu_names_its_line(write_spec):
    path = write_spec(MINIMAL.replace("[A100, H100]", "[A100, H1OO]"))
    spec = load_spec(path)
    with pytest.raises(SpecError) as exc:
        check_gpus(spec, load_catalog())
    assert "'H1OO'" in exc.value.message
    assert exc.value.location.line == 5


def test_spec_version_must_be_1(write_spec):
    path = write_spec(MINIMAL.replace("version: 1", "version: 2"))
    with pytest.raises(SpecError, match="unsupported spec version 2"):
        load_spec(path)


def test_duplicate_image_names(write_spec):
    path = write_spec(MINIMAL + '  - name: torch25\n    framework: "torch==2.6.*"\n')
    with pytest.raises(SpecError, match="used twice"):
        load_spec(path)


def test_base_needs_exactly_one_kind(write_spec):
    path = write_spec(MINIMAL + '    base: {image: "debian:bookworm", bootstrap: {suite: bookworm}}\n')
    with pytest.raises(SpecError, match="exactly one"):
        load_spec(path)


@pytest.mark.parametrize(
    "value",
    ["numpy; rm -rf /", "numpy\nRUN curl evil", "numpy==1.0 && curl x", "$(curl evil)", "`id`", "numpy \\", "{{ 7*7 }}"],
)
def test_hostile_pip_values_are_rejected(write_spec, value):
    import json

    path = write_spec(MINIMAL + f"    pip: [{json.dumps(value)}]\n")
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert exc.value.location.line == 9


@pytest.mark.parametrize("value", ["vim; id", "vim && id", "$(id)", "vim\nid", "Vim"])
def test_hostile_apt_values_are_rejected(write_spec, value):
    import json

    path = write_spec(MINIMAL + f"    apt: [{json.dumps(value)}]\n")
    with pytest.raises(SpecError, match="not a valid Debian package"):
        load_spec(path)


def test_defaults_merge_into_images(write_spec):
    path = write_spec(MINIMAL.replace("images:", 'defaults:\n  pip: ["numpy==2.*"]\n  apt: [git]\nimages:')
                      + '    pip: ["pandas==2.*"]\n')
    spec = load_spec(path)
    t = spec.effective(spec.images[0])
    assert t.pip == ("numpy==2.*", "pandas==2.*")
    assert t.apt == ("git",)


def test_ca_bundle_from_spec_must_exist(write_spec, monkeypatch):
    path = write_spec(MINIMAL + "build:\n  ca_bundle: missing.pem\n")
    spec = load_spec(path)
    with pytest.raises(SpecError, match="is not a file"):
        spec.ca_bundle_path()


def test_ca_bundle_from_environment(write_spec, monkeypatch, tmp_path):
    pem = tmp_path / "proxy.pem"
    shutil.copyfile(certifi.where(), pem)  # real certificates: envkit loads the bundle
    monkeypatch.delenv("PIP_CERT", raising=False)
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(pem))
    assert load_spec(write_spec(MINIMAL)).ca_bundle_path() == pem
    monkeypatch.delenv("ENVKIT_CA_BUNDLE")
    assert load_spec(write_spec(MINIMAL)).ca_bundle_path() is None


def test_a_ca_bundle_without_certificates_is_named_where_it_was_given(write_spec, monkeypatch, tmp_path):
    """Else resolve reports "cannot reach the package index" and blames the network."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    spec = write_spec(MINIMAL + f"build:\n  ca_bundle: {junk}\n")
    with pytest.raises(SpecError) as err:
        load_spec(spec).ca_bundle_path()
    assert err.value.message.startswith(f"build.ca_bundle {str(junk)!r} holds no PEM certificate")
    assert err.value.location.line == MINIMAL.lstrip().count("\n") + 2
    monkeypatch.delenv("ENVKIT_CA_BUNDLE", raising=False)
    monkeypatch.setenv("PIP_CERT", str(junk))
    with pytest.raises(SpecError, match=r"^\$PIP_CERT \(.*junk.pem\) holds no PEM certificate"):
        load_spec(write_spec(MINIMAL)).ca_bundle_path()


@pytest.mark.parametrize("text, at, started", [
    ('version: 1\nteam: vision\nfleet:\n  gpus: [A100, H100\n  min_driver: "550.54.15"\n', "5:13", "line 4, column 9"),
    ('version: 1\nteam: "vision\nfleet: {}\n', "4:1", "line 2, column 7"),
])
def test_an_unclosed_bracket_or_quote_says_where_it_opened(write_spec, text, at, started):
    """YAML finds the problem lines later; the error also names where the construct began."""
    spec = write_spec(text)
    with pytest.raises(SpecError) as exc:
        load_spec(spec)
    assert str(exc.value.location) == f"{spec}:{at}"
    assert f"which starts at {started}: is a bracket or quote there left open?" in exc.value.message


def test_an_indentation_error_is_not_blamed_on_a_bracket(write_spec):
    spec = write_spec('version: 1\nteam: vision\nimages:\n  - name: a\n    framework: "torch==2.5.*"\n'
                      '   pip: ["numpy"]\n')
    with pytest.raises(SpecError) as exc:
        load_spec(spec)
    assert "check the indentation of the lines after it" in exc.value.message and "bracket" not in exc.value.message
