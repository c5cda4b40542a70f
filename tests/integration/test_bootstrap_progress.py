"""A real debootstrap's phases as envkit reads them (``images.base.DebootstrapCount``): retrieving the packages, then
extracting, unpacking and configuring each against that count, ending with all of them; the base is imported under a
test tag and removed."""

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.network]
REF = "envkit-test/bootstrap-phases:r22"


def test_a_real_bootstrap_reports_each_phase_against_the_packages_it_retrieved(engine):
    from envkit.images.base import bootstrap
    from envkit.lock import BaseImage

    recipe = {"suite": "bookworm", "variant": "minbase", "mirror": "http://deb.debian.org/debian"}
    phases, said = [], []
    try:
        info = bootstrap(engine, BaseImage(ref=REF, digest=None, distro="debian", suite="bookworm", bootstrap=recipe),
                         said.append, phases.append)
        assert info.id
    finally:
        try:
            engine.client.images.remove(REF, force=True)
        except Exception:  # noqa: BLE001 - not made (the test failed before the import)
            pass
    retrieved = max(p.done for p in phases if p.phase == "retrieving")
    assert retrieved > 50  # bookworm minbase: 88 packages
    order = list(dict.fromkeys(p.phase for p in phases))
    assert order == ["retrieving", "extracting", "unpacking", "configuring"], order
    for phase in order[1:]:
        counts = [p.done for p in phases if p.phase == phase]
        assert counts == sorted(counts) and counts[-1] == retrieved, (phase, counts[-5:])
        assert {p.total for p in phases if p.phase == phase} == {retrieved}
