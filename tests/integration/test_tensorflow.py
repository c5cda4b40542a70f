"""A TensorFlow image end to end on the real engine: `envkit build examples/frameworks.yaml --image tf`
builds the lock's tensorflow[and-cuda] closure (cuDNN, cuBLAS, NCCL, ... as nvidia-*-cu12 wheels)
and verifies it with the payload's TensorFlow path; no GPU here, so every GPU-only check must be
skipped.

Cold, this is the suite's largest build (6.84 GB; about 284 s on 2 cores with the trixie base
bootstrapped, docs/images.md); the image is kept, so a later run finds it by its lock and context
hashes and only verifies (the module then takes about 13 s).

The build and its verification as tests/stacks/tf/stack.yaml says are test_stacks.py's; the build is shared with
it (``stack_build``, once per session); here, what only this framework's image shows.
"""

import json

import pytest

from envkit.certify.verdict import decide
from envkit.payload.harness import run_payload
from envkit.engine.protocol import RunOptions
from envkit.frameworks import TENSORFLOW, expected
from tests.integration.conftest import envkit
from tests.integration.stacks import load_stack

pytestmark = pytest.mark.integration

STACK = load_stack("tf")
LOCK = STACK.lock


@pytest.fixture(scope="module")
def tf_build(stack_build):
    """tests/stacks/tf/ built (once per session: test_stacks.py verifies it as the stack says)."""
    return stack_build("tf")


def test_certify_without_a_gpu_and_a_mismatch_are_judged_on_the_host(tf_build, engine, tmp_path):
    image, locked = tf_build
    proc = envkit("certify", image["tag"], "--no-gpus", "--lock", LOCK, "--reports", tmp_path / "r",
                  "--store", tmp_path / "h.sqlite", "--json")
    assert proc.returncode == 0, proc.stderr
    cert = json.loads(proc.stdout)["certificate"]
    assert (cert["status"], cert["gpu_model"]) == ("verified", "none")
    assert {c["status"] for c in cert["checks"] if c["name"] in TENSORFLOW.gpu_checks} == {"skipped"}

    wrong = expected(locked) | {"cudnn": "9.28.1.4", "tensorflow": "2.19.1"}
    result = run_payload(engine, image["tag"], wrong)
    assert result.status == "failed"
    assert {m.split(":")[0] for m in result.mismatches} == {"cudnn_version", "tensorflow_version"}
    status, reasons = decide(result.raw, wrong, gpu_requested=False)
    assert status == "failed"
    assert "cuDNN: the lock expects 9.28.1.4 but the image has 9.28.0.42 (compared on every component)" in reasons
    assert "tensorflow: the lock expects 2.19.1 but the image has 2.20.0" in reasons


GPU_PATHS_ON_CPU = """
import json, sys
sys.path.insert(0, "/opt/envkit/envkit_check")  # as `python3 /opt/envkit/envkit_check` runs it
import envkit_check_tf as e
import tensorflow as tf
out = {"bf16": e.tf_mlp_train(tf, "/CPU:0", tf.bfloat16, 40, width=256, lr=0.02),
       "fp16": e.tf_mlp_train(tf, "/CPU:0", tf.float16, 40, width=256, lr=0.02, loss_scale=128.0),
       "tflops": e.tf_matmul_tflops(tf, "/CPU:0", tf.bfloat16, n=256, iters=3, windows=3, warmup_s=0.05),
       "memory": e.tf_memory_probe(tf, "CPU:0", mib=16)}
try:
    e.tf_mlp_train(tf, "/GPU:0", tf.float32, 2)
except RuntimeError as exc:
    out["no_gpu"] = str(exc)
print(json.dumps(out))
"""


def test_gpu_code_paths_run_on_the_cpu_device_inside_the_image(tf_build, engine):
    """The GPU checks' tensorflow code (mixed-precision train step, timed matmul, allocator readings)
    runs here on the CPU device: what a GPU run adds is the device, not untried code. A step asked
    for on a GPU that tensorflow quietly placed on the CPU is caught."""
    image, _ = tf_build
    # tensorflow keeps allocator stats on the CPU device only through oneDNN's allocator, which it turns on
    # by itself only on CPUs with AVX-512 (VNNI/BF16) or AMX; on others (this AMD EPYC, AVX2) the memory
    # probe's get_memory_info("CPU:0") raises "Allocator stats not available". On a GPU it reads GPU:0.
    result = engine.run(image["tag"], ["python3", "-c", GPU_PATHS_ON_CPU],
                        RunOptions(timeout=300, env={"TF_ENABLE_ONEDNN_OPTS": "1"}))
    assert result.exit_code == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for dtype in ("bf16", "fp16"):
        train = out[dtype]
        assert train["dtype"] == {"bf16": "bfloat16", "fp16": "float16"}[dtype]
        assert train["last_loss"] < train["first_loss"], train
    assert out["tflops"] > 0
    assert out["memory"]["written"] and out["memory"]["during_mib"] - out["memory"]["before_mib"] >= 16
    assert out["no_gpu"].startswith("the train step ran on /job:localhost/replica:0/task:0/device:CPU:0, not on /GPU:0")


GPU_KERNELS = """
import json
from tensorflow.python.framework import dtypes, kernels
found = {}
for op in ("MatMul", "Tanh", "TanhGrad", "AddV2", "Mul", "Sum", "Cast", "Fill"):
    types = set()
    for k in kernels.get_registered_kernels_for_op(op).kernel:
        if k.device_type == "GPU":
            types.update(dtypes.as_dtype(t).name for c in k.constraint for t in c.allowed_values.list.type)
    found[op] = sorted(types)
print(json.dumps(found))
"""


def test_the_gpu_steps_ops_have_gpu_kernels_for_both_half_types(tf_build, engine):
    """tensorflow places an op it cannot run on the GPU on the CPU without a word; the mixed-precision
    step's ops must have bfloat16 and float16 GPU kernels in this build (read from its kernel registry,
    no GPU needed)."""
    image, _ = tf_build
    result = engine.run(image["tag"], ["python3", "-c", GPU_KERNELS], RunOptions(timeout=120))
    assert result.exit_code == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for op, types in found.items():
        assert {"bfloat16", "float16", "float32"} <= set(types), (op, types)


CPU_ALLREDUCE = """
import json, sys
sys.path.insert(0, "/opt/envkit/envkit_check")  # as `python3 /opt/envkit/envkit_check` runs it
import envkit_check_tf_allreduce as e
out = e.cpu_allreduce(2)
import tensorflow as tf
try:  # the GPU check's own cross-device op on the same two devices
    e.tf_allreduce(tf, out["report"]["devices"], tf.distribute.NcclAllReduce(), 1024, 2)
except Exception as exc:
    out["nccl"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def test_nccl_allreduce_code_runs_on_two_logical_cpu_devices_inside_the_image(tf_build, engine):
    """The test hook `cpu_allreduce` (docs/payload.md) runs nccl_allreduce's own code, tf_allreduce and
    the verdict, on two logical CPU devices with HierarchicalCopyAllReduce, which shares NcclAllReduce's
    batched all-reduce and differs only in how packs are summed: 1 + 2 on both devices. With
    NcclAllReduce itself the graph builds (an NcclAllReduce node over both devices, every input placed)
    and fails only because the op has GPU kernels alone."""
    image, _ = tf_build
    result = engine.run(image["tag"], ["python3", "-c", CPU_ALLREDUCE], RunOptions(timeout=120))
    assert result.exit_code == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    report, check = out["report"], out["check"]
    assert report["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert (report["world_size"], report["platform"], report["correct"], report["sums"]) == (2, "cpu", True, [3.0, 3.0])
    assert report["seconds"] > 0
    assert check["status"] == "passed", check
    assert check["message"].startswith("2-CPU all_reduce of 1 MiB: bus bandwidth ")
    assert check["value"]["op"] == "MirroredStrategy all_reduce, HierarchicalCopyAllReduce"
    assert out["nccl"].startswith("InvalidArgumentError: No OpKernel was registered to support Op 'NcclAllReduce'")
    assert "num_devices=2" in out["nccl"] and "device='GPU'" in out["nccl"]
