"""One meaning per flag: docs/cli.md's flag table matches every command's --help; old spellings still work with a
deprecation note; the group's flags are read after the subcommand (and --json before it); `envkit lock` writes."""

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from envkit.cli import main
from envkit.cli.flags import hoist_global_flags

ROOT = Path(__file__).resolve().parents[3]
ROW = re.compile(r"^\| `(--[a-z-]+)[^`]*` \| [^|]+ \| (.+) \|$", re.M)


def flags_table() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text[text.index("## Flags\n"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return {flag: set(re.findall(r"`([a-z -]+)`", where)) if where != "every command" else {"*"}
            for flag, where in ROW.findall(section)}


def commands(group=main, path=()) -> dict[str, click.Command]:
    found = {}
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            found.update(commands(cmd, (*path, name)))
        else:
            found[" ".join((*path, name))] = cmd
    return found


def help_flags(path: str) -> set[str]:
    """The long flags a command's --help lists."""
    out = CliRunner().invoke(main, [*path.split(), "--help"])
    assert out.exit_code == 0, out.output
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)", out.output.split("Options:")[1], re.M))


def test_the_flag_table_matches_every_commands_help():
    table = flags_table()
    assert {"--lock", "--out", "--store", "--registry", "--json", "--reports", "--bundle"} <= set(table)
    every = commands()
    helps = {path: help_flags(path) for path in every}
    for flag, where in table.items():
        having = {path for path, flags in helps.items() if flag in flags}
        assert having == (set(every) if where == {"*"} else where), f"docs/cli.md's row for {flag} is stale"


def test_old_spellings_still_work_with_a_deprecation_note(monkeypatch, tmp_path):
    seen = {}

    def bundle_spec(spec, out_dir, engine, **kw):
        seen["out"] = out_dir
        raise SystemExit(0)

    monkeypatch.setattr("envkit.app.build.bundle_spec", bundle_spec)
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: object())
    result = CliRunner().invoke(main, ["bundle", "make", "team.yaml", "--out", str(tmp_path / "b")])
    assert seen["out"] == tmp_path / "b"
    assert "--out is deprecated here and will go in the next release: use --bundle" in result.stderr
    seen.clear()
    result = CliRunner().invoke(main, ["bundle", "make", "team.yaml", "--bundle", str(tmp_path / "c")])
    assert seen["out"] == tmp_path / "c" and "deprecated" not in result.stderr
    assert "--out" not in CliRunner().invoke(main, ["bundle", "make", "--help"]).output  # hidden


@pytest.mark.parametrize("given, read", [
    (["build", "t.yaml", "-v"], ["-v", "build", "t.yaml"]),
    (["lock", "t.yaml", "--debug", "--check"], ["--debug", "lock", "t.yaml", "--check"]),
    (["--json", "ls"], ["ls", "--json"]),
    (["--json", "bundle", "make", "t.yaml"], ["bundle", "make", "t.yaml", "--json"]),
    (["run", "img", "--", "python", "-v"], ["run", "img", "--", "python", "-v"]),
    (["run", "img", "python", "-v"], ["run", "img", "python", "-v"]),  # the job's own flags
    (["--json", "run", "img", "--", "x"], ["run", "--json", "img", "--", "x"]),
    (["nosuch", "-v"], ["nosuch", "-v"]),
])
def test_global_flags_are_read_after_the_subcommand(given, read):
    assert hoist_global_flags(given, main.commands) == read


def test_lock_writes_the_lock_and_check_only_checks(write_spec, monkeypatch):
    from envkit.app import resolve as pipeline
    from envkit.lock import load_lock

    committed = load_lock(ROOT / "examples" / "team.lock")
    spec = write_spec((ROOT / "examples" / "team.yaml").read_text())
    monkeypatch.setattr(pipeline, "resolve", lambda *a, **k: committed)
    checked = CliRunner().invoke(main, ["lock", str(spec), "--check", "--json"])
    assert checked.exit_code != 0 and not spec.with_suffix(".lock").exists()  # no lock: --check writes none
    wrote = CliRunner().invoke(main, ["lock", str(spec), "--json"])
    assert wrote.exit_code == 0, wrote.output
    assert json.loads(wrote.stdout)["written"] is True and spec.with_suffix(".lock").exists()
    again = CliRunner().invoke(main, ["lock", str(spec), "-v", "--json"])  # -v after the subcommand
    assert again.exit_code == 0 and json.loads(again.stdout)["written"] is False


def _key_options(name: str) -> dict[str, click.Option]:
    return {path: p for path, cmd in commands().items() for p in cmd.params
            if isinstance(p, click.Option) and p.name == name}


@pytest.mark.parametrize("name, flag, env", [("signing_key", "--signing-key", "$ENVKIT_SIGNING_KEY"),
                                             ("trusted_keys", "--trusted-keys", "$ENVKIT_TRUSTED_KEYS")])
def test_the_key_options_are_one_helper_each(name, flag, env):
    """``--signing-key`` and ``--trusted-keys``: made by ``cli.flags``'s helper on every command (spelling, metavar,
    no click default, the environment variable named in the help from ``trust.names``), written nowhere else."""
    options = _key_options(name)
    assert set(options) == {"signing_key": {"bundle make", "certify", "nightly"},
                            "trusted_keys": {"bundle build", "ls", "pull", "run", "show"}}[name]
    for path, option in options.items():
        assert option.opts == [flag] and option.default is None and option.envvar is None, path
        assert "(comma-separated .pub files" in option.help if name == "trusted_keys" else "encrypted: " in option.help
        assert f"default: {env}" in (option.help or ""), path
    written = [p for p in (ROOT / "envkit" / "cli").glob("*.py") if f'"{flag}"' in p.read_text()]
    assert [p.name for p in written] == ["flags.py"]


def test_the_cli_names_the_key_variables_without_loading_cryptography():
    import subprocess
    import sys

    code = "import sys, envkit.cli; print('cryptography' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"
