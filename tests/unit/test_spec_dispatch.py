"""team.yaml's dispatch: section: strict, with file:line:col and did-you-mean, and every model in the fleet."""

from __future__ import annotations

import pytest

from envkit.errors import SpecError
from envkit.resolve.plan import spec_digest
from envkit.spec import load_spec
from envkit.spec_dispatch import KubernetesTarget, SlurmTarget
from tests.conftest import MINIMAL

DISPATCH = """
dispatch:
  require: verified
  shared_dir: /shared/envkit
  slurm: {partition: gpu, account: vision, time_limit: "00:30:00"}
  kubernetes: {namespace: ml, runtime_class: nvidia}
  gpus:
    A100: {slurm: {constraint: a100, gres_type: a100}}
    H100: {kubernetes: {node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}, gpus: 2}}
"""


def test_each_model_has_its_target_with_the_shared_settings_under_its_own(write_spec):
    spec = load_spec(write_spec(MINIMAL + DISPATCH))
    a100, h100 = spec.dispatch.target("A100"), spec.dispatch.target("H100")
    assert a100 == SlurmTarget(partition="gpu", account="vision", time_limit="00:30:00", constraint="a100",
                               gres_type="a100")
    assert isinstance(h100, KubernetesTarget) and (h100.namespace, h100.runtime_class, h100.gpus) == ("ml", "nvidia", 2)
    assert spec.dispatch.require == "verified" and spec.dispatch.target("L40S") is None


def test_dispatch_changes_no_lock(write_spec):
    """The lock's spec digest leaves dispatch: out: where the GPUs are reached decides nothing the lock holds."""
    with_dispatch = load_spec(write_spec(MINIMAL + DISPATCH))
    assert spec_digest(with_dispatch) == spec_digest(load_spec(write_spec(MINIMAL, "b.yaml")))


@pytest.mark.parametrize("change, message, line, hint", [
    ("constraint: a100,", "unknown key 'partiton' in dispatch.gpus.A100.slurm", 7, "did you mean 'partition'?"),
    ("A100: {slurm", "dispatch.gpus names 'A10'", 7, "did you mean 'A100'?"),
    ("time_limit", "is not a valid Slurm time limit", 4, None),
    ("both", "give exactly one of 'slurm' or 'kubernetes'", 7, None),
    ("selector", "is not a valid Kubernetes label value", 8, None),
    ("runtime", "'singularity' is not allowed", 7, None),
])
def test_a_mistake_is_named_at_its_line(write_spec, change, message, line, hint):
    text = MINIMAL + DISPATCH
    text = {"constraint: a100,": text.replace("constraint: a100,", "constraint: a100, partiton: x,"),
            "A100: {slurm": text.replace("A100: {slurm", "A10: {slurm"),
            "time_limit": text.replace('"00:30:00"', '"half an hour"'),
            "both": text.replace("gres_type: a100}}", "gres_type: a100}, kubernetes: {}}"),
            "selector": text.replace("NVIDIA-H100-80GB-HBM3", "NVIDIA H100"),
            "runtime": text.replace("gres_type: a100}", "gres_type: a100, runtime: singularity}")}[change]
    with pytest.raises(SpecError) as err:
        load_spec(write_spec(text))
    assert message in err.value.message
    assert err.value.location.line == line + 9  # the line in DISPATCH (dispatch: is 1), after MINIMAL and a blank
    if hint:
        assert hint in err.value.hint


def test_the_fleet_docs_dispatch_example_is_a_valid_spec(write_spec):
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    example = re.search(r"```yaml\n# team.yaml \(beside fleet:, images: \.\.\.\)\n(dispatch:.*?)```", doc, re.S)
    assert example, "docs/fleet.md lost its dispatch: example"
    spec = load_spec(write_spec(MINIMAL.replace("[A100, H100]", "[A100, H100, L40S]") + example.group(1)))
    assert set(spec.dispatch.gpus) == {"A100", "H100", "L40S"}
    assert isinstance(spec.dispatch.target("L40S"), KubernetesTarget)
    assert spec.dispatch.target("H100").account == "vision"
