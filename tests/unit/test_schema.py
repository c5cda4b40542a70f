import json

from envkit.spec import json_schema
from tests.conftest import ROOT


def test_committed_schema_is_current():
    committed = json.loads((ROOT / "schema" / "team.schema.json").read_text())
    assert committed == json_schema(), "schema/team.schema.json is stale: run `make schema`"
