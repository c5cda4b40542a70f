"""A JAX image end to end on the real engine: `envkit build examples/frameworks.yaml --image jax`
builds the lock's jax[cuda13] closure (cuDNN, cuBLAS, NCCL, ... as nvidia-* wheels) and verifies
it with the payload's JAX path; no GPU here, so every GPU-only check must be skipped.

Cold, this is the suite's second large build (283 s and 4.9 GB on 2 cores, base bootstrap
included; docs/images.md); the image is kept, so a later run finds it by its lock and context
hashes and only verifies (the module then takes about 30 s).

The build and its verification as tests/stacks/jax/stack.yaml says are test_stacks.py's; the build is shared with
it (``stack_build``, once per session); here, what only this framework's image shows.
"""

import json

import pytest

from envkit.certify.verdict import decide
from envkit.payload.harness import run_payload
from envkit.engine.protocol import RunOptions
from envkit.frameworks import JAX, expected
from tests.integration.conftest import envkit
from tests.integration.stacks import load_stack

pytestmark = pytest.mark.integration

STACK = load_stack("jax")
LOCK = STACK.lock


@pytest.fixture(scope="module")
def jax_build(stack_build):
    """tests/stacks/jax/ built (once per session: test_stacks.py verifies it as the stack says)."""
    return stack_build("jax")


def test_certify_without_a_gpu_and_a_mismatch_are_judged_on_the_host(jax_build, engine, tmp_path):
    image, locked = jax_build
    proc = envkit("certify", image["tag"], "--no-gpus", "--lock", LOCK, "--reports", tmp_path / "r",
                  "--store", tmp_path / "h.sqlite", "--json")
    assert proc.returncode == 0, proc.stderr
    cert = json.loads(proc.stdout)["certificate"]
    assert (cert["status"], cert["gpu_model"]) == ("verified", "none")
    assert {c["status"] for c in cert["checks"] if c["name"] in JAX.gpu_checks} == {"skipped"}

    wrong = expected(locked) | {"cudnn": "9.28.0.42", "jaxlib": "0.12.0"}
    result = run_payload(engine, image["tag"], wrong)
    assert result.status == "failed"
    assert {m.split(":")[0] for m in result.mismatches} == {"cudnn_version", "jax_version"}
    status, reasons = decide(result.raw, wrong, gpu_requested=False)
    assert status == "failed"
    assert any(r.startswith("cuDNN: the lock expects 9.28.0.42 but the image has 9.28.1.4") for r in reasons)


GPU_PATHS_ON_CPU = """
import json, sys
sys.path.insert(0, "/opt/envkit/envkit_check")  # as `python3 /opt/envkit/envkit_check` runs it
import envkit_check_jax as e
import jax
cpus = jax.devices("cpu")
train = e.jax_mlp_train(jax, cpus[0], jax.numpy.bfloat16, 40, width=256, lr=0.02)
rate = e.jax_matmul_tflops(jax, cpus[1], jax.numpy.bfloat16, n=256, iters=3, windows=3, warmup_s=0.05)
psum = e.jax_allreduce(jax, cpus, 2**16, 3)
print(json.dumps({"devices": len(cpus), "train": train, "tflops": rate, "psum": psum}))
"""


def test_gpu_code_paths_run_on_cpu_devices_inside_the_image(jax_build, engine):
    """The GPU checks' jax code (bf16 train step, timed matmul, psum under shard_map) runs here on
    four XLA CPU devices: what a GPU run adds is the device, not untried code."""
    image, _ = jax_build
    result = engine.run(image["tag"], ["python3", "-c", GPU_PATHS_ON_CPU],
                        RunOptions(timeout=300, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}))
    assert result.exit_code == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    assert out["train"]["dtype"] == "bfloat16" and out["train"]["last_loss"] < out["train"]["first_loss"]
    assert out["tflops"] > 0
    assert out["psum"]["correct"] is True and out["psum"]["world_size"] == 4 and out["psum"]["seconds"] > 0


CPU_ALLREDUCE = """
import json, sys
sys.path.insert(0, "/opt/envkit/envkit_check")  # as `python3 /opt/envkit/envkit_check` runs it
import envkit_check_jax as e
print(json.dumps(e.cpu_allreduce(2)))
"""


def test_nccl_allreduce_code_runs_on_two_cpu_devices_inside_the_image(jax_build, engine):
    """The test hook `cpu_allreduce` (docs/payload.md) runs nccl_allreduce's own code, jax_allreduce and
    the verdict, on two XLA CPU devices: psum under shard_map sums 1 + 2 on both, and the bandwidth
    arithmetic runs on what it timed. A GPU run adds NCCL as XLA's transport, not untried code."""
    image, _ = jax_build
    result = engine.run(image["tag"], ["python3", "-c", CPU_ALLREDUCE],
                        RunOptions(timeout=120, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}))
    assert result.exit_code == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    report, check = out["report"], out["check"]
    assert (report["world_size"], report["platform"], report["correct"], report["sums"]) == (2, "cpu", True, [3.0, 3.0])
    assert report["seconds"] > 0
    assert check["status"] == "passed", check
    assert check["message"].startswith("2-CPU psum of 1 MiB: bus bandwidth ")
    assert check["value"]["op"] == "jax.lax.psum under shard_map" and check["value"]["nccl_busbw_gbps"] > 0
