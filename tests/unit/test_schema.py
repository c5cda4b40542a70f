import json

from envkit.spec import json_schema
from tests.conftest import ROOT


def test_committed_schema_is_current():
    committed = json.loads((ROOT / "schema" / "team.schema.json").read_text())
    assert committed == json_schema(), "schema/team.schema.json is stale: run `make schema`"


def test_the_schema_refuses_what_the_loader_refuses():
    """An editor validating team.yaml against `envkit schema` sees the names and versions the loader refuses."""
    import re

    from envkit.spec import DRIVER_RE
    from envkit.support.grammar import NAME_RE

    schema = json_schema()
    team = schema["properties"]["team"]
    driver = schema["$defs"]["Fleet"]["properties"]["min_driver"]
    assert (team["pattern"], driver["pattern"]) == (NAME_RE.pattern, DRIVER_RE.pattern)
    assert not re.search(team["pattern"], "Vision Team") and re.search(team["pattern"], "vision")
    assert not re.search(driver["pattern"], "9999.1.1") and re.search(driver["pattern"], "550.54.15")
