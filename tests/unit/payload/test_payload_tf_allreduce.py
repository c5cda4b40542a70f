"""TensorFlow's nccl_allreduce (envkit/payload/envkit_check/envkit_check_tf_allreduce.py) and
the all-reduce rules the frameworks share (envkit_check_core), without tensorflow on the host.

tensorflow is faked by what it does for the check only: a MirroredStrategy whose replicas run in
threads and meet in all_reduce, tensors that know their device, and a device clock on which each
collective takes its bus traffic over a bandwidth. The verdicts, the arithmetic and the timing are
the payload's own code. The real tensorflow runs the same code on two logical CPU devices in
tests/integration/test_tensorflow.py.
"""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any, List, Optional

import pytest

from tests.unit.payload_modules import payload_module
from tests.unit.payload.test_payload_jax import FakeStream
from tests.unit.payload.test_payload_tf import EXPECT, NO_GPU, tf_ctx

core, tfm, tfa = (payload_module(f"envkit_check_{m}") for m in ("core", "tf", "tf_allreduce"))


class FakeNccl:
    """tf.distribute.NcclAllReduce()"""


# ----------------------------------------------------------------- the check's rules
def report(world: int, correct: bool = True, seconds: float = 0.1, numel: int = 64 * 2**20, iters: int = 10):
    return {"world_size": world, "correct": correct, "numel": numel, "iters": iters, "seconds": seconds,
            "platform": "gpu"}


@pytest.mark.parametrize("world, correct, floor, status, message", [
    (8, True, None, "passed", "8-GPU all_reduce of 256 MiB: bus bandwidth 47.0 GB/s (no floors in lock)"),
    (8, True, 100.0, "failed", "all-reduce bus bandwidth below the lock's floor: nccl_busbw_gbps 47.0 < floor 100.0"),
    (8, True, 40.0, "passed", "8-GPU all_reduce of 256 MiB: bus bandwidth 47.0 GB/s"),
    (8, False, None, "failed", "all_reduce over 8 GPU(s) returned a wrong sum"),
    (2, False, None, "failed", "all_reduce over 2 GPU(s) returned a wrong sum"),
    (1, True, None, "passed", "all_reduce over 1 GPU returned the right sum (no bandwidth measured)"),
    (1, False, None, "failed", "all_reduce over 1 GPU(s) returned a wrong sum"),
])
def test_allreduce_check(monkeypatch, world, correct, floor, status, message):
    calls = []

    def allreduce(tf, devices, cross_device_ops, numel, iters):
        calls.append((devices, type(cross_device_ops), numel, iters))
        return report(len(devices), correct, numel=numel, iters=iters)

    monkeypatch.setattr(tfa, "tf_allreduce", allreduce)
    expect = {**EXPECT, "perf_floors": {"nccl_busbw_gbps": floor}} if floor else EXPECT
    ctx = tf_ctx(("9.0",) * world, expect, distribute=SimpleNamespace(NcclAllReduce=FakeNccl))
    result = tfm.CHECKS["nccl_allreduce"](ctx)
    assert (result.status, result.message) == (status, message)
    plan = (64 * 2**20, 10) if world > 1 else (2**20, 1)  # 256 MiB of float32 per GPU for bandwidth
    assert calls == [([f"/GPU:{i}" for i in range(world)], FakeNccl, *plan)]
    value = result.value
    assert (value["world_size"], value["nccl"], value["op"]) == (world, "2.32.3", "MirroredStrategy all_reduce, FakeNccl")
    if world > 1 and correct:
        assert (value["size_mib"], value["iters"], value["algbw_gbps"], value["nccl_busbw_gbps"]) == (256, 10, 26.8, 47.0)
    else:
        assert "nccl_busbw_gbps" not in value
    if world == 1 and correct:
        assert value["note"] == "single GPU: one replica, which tensorflow returns as it is without calling NCCL; no bandwidth"


def test_no_gpu_skips_and_never_calls_tensorflow(monkeypatch):
    monkeypatch.setattr(tfa, "tf_allreduce", lambda *a: pytest.fail("ran the all-reduce without a GPU"))
    result = tfm.CHECKS["nccl_allreduce"](tf_ctx(()))
    assert (result.status, result.message, result.value) == ("skipped", NO_GPU, None)


def test_the_check_runs_last_before_telemetry_as_for_jax():
    names = [name for name, _, gpu_only in tfm.REGISTRY if gpu_only]
    assert names[-3:] == ["matmul_tflops", "nccl_allreduce", "telemetry"]


@pytest.mark.parametrize("world, seconds, algbw, busbw", [
    (2, 0.1, 26.8, 26.8),  # busbw = algbw * 2(n-1)/n: 1 for two ranks
    (4, 0.1, 26.8, 40.3),
    (8, 0.1, 26.8, 47.0),
    (8, 0.0125, 214.7, 375.8),
])
def test_bus_bandwidth_arithmetic(world, seconds, algbw, busbw):
    ctx = core.Context(expect={}, mode="certify", t0=0.0)
    result = core.allreduce_verdict(ctx, report(world, seconds=seconds), {}, "all_reduce")
    assert (result.value["algbw_gbps"], result.value["nccl_busbw_gbps"]) == (algbw, busbw)
    assert core.allreduce_rates(256 * 2**20, world, 10, seconds) == {"algbw_gbps": algbw, "nccl_busbw_gbps": busbw}


def test_the_plan():
    assert core.allreduce_plan(8) == core.allreduce_plan(2) == (64 * 2**20, 10)
    assert core.allreduce_plan(1) == (2**20, 1)


def test_timed_rounds_time_only_the_rounds_until_the_device_is_done():
    """Warm-ups (compile, ramp) untimed; the clock stops only when the device finished the last round."""
    stream = FakeStream(1.0, ramp_s=0.5, ramp_factor=0.25, compile_s=2.0)  # 1 unit of work per second when warm
    steps = []

    def step(x):
        steps.append(x)
        stream.launch(0.1)  # 0.1 s of device work per round, returned at once
        return x + 1

    x, seconds = core.timed_rounds(step, stream.block_until_ready, 0, warmups=2, rounds=10, clock=stream.clock)
    assert (x, len(steps)) == (12, 12)
    assert seconds == pytest.approx(1.0, rel=1e-3)  # 10 warm rounds; not the compile, not the slow start
    assert stream.blocks == 2  # once after the warm-ups, once after the rounds


# ------------------------------------- tf_allreduce on a fake MirroredStrategy and device clock
class FakeTensor:
    def __init__(self, value: float, n: int, device: Optional[str], stream: FakeStream):
        self.value, self.n, self.device, self.stream = value, n, device, stream

    def __getitem__(self, _: Any) -> "FakeTensor":
        return self

    def numpy(self) -> float:  # a device-to-host copy waits for the device
        self.stream.block_until_ready(self)
        return self.value

    def __float__(self) -> float:
        return self.numpy()


class FakeCollectiveTF:
    """What tf_allreduce uses of tensorflow. Replicas run in threads and meet in all_reduce, which costs
    its bus traffic (size*2(n-1)/n) on the device clock; a transport that loses `drop` sums wrongly."""

    def __init__(self, stream: FakeStream, drop: Optional[int] = None):
        self.stream, self.drop, self.current, self.strategies, self.fills = stream, drop, None, [], []
        self.local = threading.local()
        self.distribute = SimpleNamespace(MirroredStrategy=self.mirrored, ReduceOp=SimpleNamespace(SUM="sum"),
                                          get_replica_context=lambda: self.local.ctx)

    @contextlib.contextmanager
    def device(self, name: str):
        self.current = name
        yield
        self.current = None

    def fill(self, shape, value):
        self.fills.append((self.current, value))
        return FakeTensor(float(value), shape[0], self.current, self.stream)

    def identity(self, t):
        return t

    def function(self, fn):
        return fn  # FakeStream charges its compile time on the first launch

    def equal(self, t, value):
        return t.value == value

    def reduce_all(self, x):
        return x

    def mirrored(self, devices, cross_device_ops):
        self.strategies.append((list(devices), cross_device_ops))
        tf = self

        class Strategy:
            def experimental_distribute_values_from_function(self, fn):
                return [fn(SimpleNamespace(replica_id_in_sync_group=r)) for r in range(len(devices))]

            def experimental_local_results(self, x):
                return list(x)

            def run(self, fn, args):
                return tf.replicas(fn, args[0])

        return Strategy()

    def replicas(self, fn, inputs: List[FakeTensor]) -> List[FakeTensor]:
        world = len(inputs)
        barrier, slots, out = threading.Barrier(world, timeout=10), [None] * world, [None] * world

        def all_reduce(op, t):
            assert op == "sum"
            rank = self.local.rank
            slots[rank] = t
            barrier.wait()
            total = sum(s.value for r, s in enumerate(slots) if r != self.drop)
            barrier.wait()
            if rank == 0:
                self.stream.launch(t.n * 4 * 2 * (world - 1) / world)  # the collective's bus traffic
            barrier.wait()
            return FakeTensor(total, t.n, t.device, self.stream)

        def replica(rank):
            self.local.rank, self.local.ctx = rank, SimpleNamespace(all_reduce=all_reduce)
            out[rank] = fn(inputs[rank])

        threads = [threading.Thread(target=replica, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out


def test_tf_allreduce_sums_on_every_device_and_times_only_the_chained_rounds():
    busbw = 400e9  # bytes/s of bus traffic
    stream = FakeStream(busbw, ramp_s=0.002, ramp_factor=0.5)
    tf, devices, ops = FakeCollectiveTF(stream), [f"/GPU:{i}" for i in range(8)], FakeNccl()
    result = tfa.tf_allreduce(tf, devices, ops, 64 * 2**20, 10, clock=stream.clock)
    assert tf.strategies == [(devices, ops)]
    assert tf.fills[:8] == [(d, r + 1.0) for r, d in enumerate(devices)]  # each rank's value made on its device
    assert tf.fills[8:] == [(d, 0.0) for d in devices]  # timed on zeros
    assert {k: result[k] for k in ("world_size", "correct", "numel", "iters", "platform")} == {
        "world_size": 8, "correct": True, "numel": 64 * 2**20, "iters": 10, "platform": "gpu"}
    assert result["sums"] == [36.0] * 8
    # the timed call: 10 chained all-reduces at full speed, not the first call's setup or the warm-up
    assert result["seconds"] == pytest.approx(10 * 64 * 2**20 * 4 * 1.75 / busbw, rel=0.01)
    check = core.allreduce_verdict(core.Context(expect={}, mode="certify", t0=0.0), result, {}, "all_reduce")
    assert check.value["nccl_busbw_gbps"] == pytest.approx(busbw / 1e9, rel=0.01)


def test_tf_allreduce_finds_a_wrong_sum():
    stream = FakeStream(400e9)
    result = tfa.tf_allreduce(FakeCollectiveTF(stream, drop=3), [f"/GPU:{i}" for i in range(4)], FakeNccl(), 1024, 2,
                              clock=stream.clock)
    assert result["correct"] is False and result["sums"] == [6.0] * 4  # 1 + 2 + 3: rank 3's 4 was lost


def test_tf_allreduce_names_the_platform_from_the_devices():
    stream = FakeStream(1e9)
    result = tfa.tf_allreduce(FakeCollectiveTF(stream), ["/device:CPU:0", "/device:CPU:1"], FakeNccl(), 16, 2,
                              clock=stream.clock)
    assert (result["platform"], result["correct"]) == ("cpu", True)
