"""One training program, run by `test_multi_process.py` in 2 processes x 4 CPU devices
(``python tests/two_processes.py PROCESS_ID PORT``) and in one process x 8 devices.

effax is imported at the top, before ``jax.distributed.initialize()``, as a
program imports its libraries.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import effax as fx

weights = fx.State[jax.Array]("weights")
steps = fx.State[jax.Array]("steps")


def step(x):
    """A data-parallel step: the batch is split over devices, the weights are
    replicated (every device reduces the same gradient), and each device draws its
    own dropout key from the split stream."""
    keep = jax.random.bernoulli(fx.rng.next_key(), 0.5, x.shape)
    grad = jax.lax.pmean(jnp.mean(jnp.where(keep, x, 0.0), axis=0), "d")
    weights.set(weights.get() - 0.1 * grad)
    steps.set(steps.get() + 1)
    return jax.random.key_data(fx.rng.next_key())[None]  # this device's next key


def run(mesh: Mesh) -> dict:
    """Three steps under `effax.shard_map`, then three under `effax.jit`."""
    replicated = NamedSharding(mesh, PartitionSpec())
    batch = NamedSharding(mesh, PartitionSpec("d"))
    x = jax.make_array_from_callback(
        (16, 2), batch, lambda index: np.arange(32.0, dtype=np.float32).reshape(16, 2)[index]
    )
    sharded = fx.shard_map(
        step, mesh=mesh, in_specs=PartitionSpec("d"), out_specs=PartitionSpec("d")
    )
    jitted = fx.jit(lambda x: weights.set(weights.get() + jnp.mean(x, axis=0)))
    with fx.handlers(
        weights.init(jax.device_put(jnp.zeros(2), replicated)),
        steps.init(jax.device_put(jnp.int32(0), replicated)),
        fx.rng.seed(0),
    ) as hs:
        keys = [sharded(x) for _ in range(3)]
        for _ in range(3):
            jitted(x)
        fx.assert_processes_agree(hs)
        saved = fx.snapshot(hs)
    return {
        "weights": np.asarray(hs[weights].addressable_data(0)).tolist(),
        "weights_sharding": str(hs[weights].sharding.spec),
        "steps": int(np.asarray(hs[steps].addressable_data(0))),
        "keys": [multihost_utils.process_allgather(k, tiled=True).tolist() for k in keys],
        "counter": int(saved["rng"]["counter"]),
    }


def misuse() -> dict:
    """What a process seeded differently, or missing a handler, is told."""
    found = {}
    with fx.rng.seed(100 + jax.process_index()) as stream:
        try:
            fx.assert_processes_agree(stream)
        except fx.EffectUsageError as error:
            found["disagree"] = str(error)
    try:
        steps.get()
    except fx.UnhandledEffectError as error:
        found["unhandled"] = str(error)
    return found


def main(process_id: int, port: int) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
    mesh = Mesh(np.array(jax.devices()), ("d",))
    result = {"process": jax.process_index(), "devices": jax.device_count(), **run(mesh)}
    result.update(misuse())
    print("RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
