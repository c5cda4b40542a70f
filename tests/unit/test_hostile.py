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
    with pytest.raises(SpecError, match="the limit is"):
        load_spec(path)


def test_valid_pep508_marker_is_accepted_and_stays_out_of_run_lines(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(spec_text("pip", "numpy>=2; python_version >= '3.10'"))
    spec = load_spec(path)
    assert list(spec.images[0].pip) == ["numpy>=2; python_version >= '3.10'"]
