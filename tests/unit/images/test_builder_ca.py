"""images.builder.run_build: how the classic builder gets the site CA (a build argument of its non-public
certificates; nothing in the context)."""

from pathlib import Path

import certifi
import pytest

from envkit.images.builder import MAX_ARG, run_build
from envkit.errors import BuildError


class Engine:
    """Records the classic build it is asked for (the engine's side is tested in tests/integration)."""

    def __init__(self):
        self.calls: list[dict] = []

    def build(self, context, tag, labels, **kwargs):
        self.calls.append(kwargs)
        yield from ()


SITE = "-----BEGIN CERTIFICATE-----\nMIIBsite\n-----END CERTIFICATE-----\n"


def test_the_classic_builder_gets_the_sites_certificates_as_a_build_argument(tmp_path, monkeypatch):
    monkeypatch.setattr("envkit.images.builder.site_certificates", lambda path: SITE)
    bundle = tmp_path / "ca.pem"
    bundle.write_text(Path(certifi.where()).read_text())
    engine = Engine()
    list(run_build(engine, tmp_path, "t:1", {}, builder="classic", ca_bundle=bundle))
    assert engine.calls[0]["build_args"] == {"ENVKIT_SITE_CA": SITE}
    list(run_build(engine, tmp_path, "t:1", {}, builder="classic"))
    assert engine.calls[1]["build_args"] is None


def test_too_many_certificates_for_a_build_argument_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr("envkit.images.builder.site_certificates", lambda path: "x" * (MAX_ARG + 1))
    with pytest.raises(BuildError) as err:
        list(run_build(Engine(), tmp_path, "t:1", {}, builder="classic", ca_bundle=tmp_path / "ca.pem"))
    assert "ENVKIT_CA_BUNDLE" in err.value.hint and "--builder buildkit" in err.value.hint
