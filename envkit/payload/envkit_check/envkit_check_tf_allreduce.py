"""envkit payload, TensorFlow's all-reduce: nccl_allreduce through tf.distribute, and the test hook
that runs the same code on logical CPU devices.

``tf_allreduce`` takes the devices and the cross-device implementation as parameters: the check
passes every GPU and ``tf.distribute.NcclAllReduce``; ``cpu_allreduce`` (a test hook, never part of
a run) passes logical CPU devices and ``tf.distribute.HierarchicalCopyAllReduce``, which shares
NcclAllReduce's batched all-reduce (packing, unpacking, the mirrored result) and differs only in how
the packs are summed. tensorflow comes through the context or the hook's own import.

Standard library + tensorflow (2.20 tried; Python 3.9+). Reference: docs/payload.md, "TensorFlow images".
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List

from envkit_check_core import Check, Context, allreduce_plan, allreduce_verdict, timed_rounds


def tf_allreduce(tf: Any, devices: List[str], cross_device_ops: Any, numel: int, iters: int,
                 clock: Callable[[], float] = time.perf_counter) -> Dict[str, Any]:
    """A MirroredStrategy over `devices` whose replicas sum `numel` float32 each with
    ReplicaContext.all_reduce, batched by `cross_device_ops`: one sum checked on every device, then
    `iters` chained all-reduces in one tf.function (no per-call dispatch between them) that returns one
    element per device (no large result leaves the function), called once untimed (tracing, communicator
    setup) and once timed until those elements are read back."""
    strategy = tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)
    world = len(devices)

    def filled(fill: Callable[[int], float]) -> Any:
        def on_device(value_ctx: Any) -> Any:
            rank = value_ctx.replica_id_in_sync_group
            with tf.device(devices[rank]):
                return tf.fill((numel,), fill(rank))
        return strategy.experimental_distribute_values_from_function(on_device)

    def chained(rounds: int, keep: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def replica(t: Any) -> Any:
            t = tf.identity(t)  # made under the replica's device scope: NCCL refuses unplaced inputs
            for _ in range(rounds):
                t = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, t)
            return keep(t)
        return tf.function(lambda x: strategy.run(replica, args=(x,)))

    def results(x: Any) -> List[Any]:
        return list(strategy.experimental_local_results(x))

    def ready(x: Any) -> None:
        for t in results(x):
            t.numpy()  # a device-to-host copy: waits for the collectives that produce t

    summed = results(chained(1, lambda t: t)(filled(lambda r: r + 1.0)))  # each device: 1 + 2 + ... + world
    correct = all(bool(tf.reduce_all(tf.equal(t, world * (world + 1) / 2))) for t in summed)
    # timed on zeros (the sums stay finite however many ranks and iterations), from the same input each call
    zeros, timed = filled(lambda r: 0.0), chained(iters, lambda t: t[:1])
    _, seconds = timed_rounds(lambda _: timed(zeros), ready, None, 1, 1, clock)
    return {"world_size": world, "correct": correct, "sums": [float(t[0]) for t in summed], "numel": numel,
            "iters": iters, "seconds": seconds, "platform": "gpu" if "GPU" in devices[0].upper() else "cpu"}


def allreduce_value(ctx: Context, cross_device_ops: Any) -> Dict[str, Any]:
    return {"nccl": ctx.facts.get("nccl"), "op": f"MirroredStrategy all_reduce, {type(cross_device_ops).__name__}",
            "NCCL_ALGO": os.environ.get("NCCL_ALGO")}


def check_tf_allreduce(ctx: Context) -> Check:
    tf, world = ctx.tf, len(ctx.gpu_devices)
    devices, ops = [f"/GPU:{i}" for i in range(world)], tf.distribute.NcclAllReduce()
    numel, iters = allreduce_plan(world)
    report = tf_allreduce(tf, devices, ops, numel, iters)
    return allreduce_verdict(ctx, report, allreduce_value(ctx, ops), "all_reduce",
                             single="one replica, which tensorflow returns as it is without calling NCCL")


def cpu_allreduce(world: int = 2, numel: int = 2**18, iters: int = 3) -> Dict[str, Any]:
    """Test hook, never part of a run: nccl_allreduce's code (tf_allreduce, the verdict) on `world` logical
    CPU devices with HierarchicalCopyAllReduce (NcclAllReduce has no CPU kernel). Must run before
    tensorflow initialises its devices (a fresh process). docs/payload.md."""
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * world)
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    ops = tf.distribute.HierarchicalCopyAllReduce()
    report = tf_allreduce(tf, devices, ops, numel, iters)
    ctx = Context(expect={}, mode="verify", t0=0.0, framework="tensorflow", tf=tf, facts={"nccl": None})
    check = allreduce_verdict(ctx, report, allreduce_value(ctx, ops), "all_reduce")
    return {"report": dict(report, devices=devices), "check": check.to_json()}
