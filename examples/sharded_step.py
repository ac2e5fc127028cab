"""A data-parallel training step on 8 host CPU devices, written two ways.

1. *Global view*: the step is written for the whole batch and compiled with
   ``effax.handle(step, transform=functools.partial(jax.jit, in_shardings=...,
   out_shardings=...))``. The batch is split over the mesh's ``"data"`` axis; the
   parameters (an `effax.State`) stay replicated, and XLA inserts the collectives.
   It computes what the single-device step computes.
2. *Per-device view*: the step is written for one shard and mapped with
   `effax.shard_map`; the loss is averaged with ``lax.pmean``, each device draws its
   own dropout keys (the stream's ``keys="split"`` policy), and the per-device
   losses come out of `effax.Emit` stacked along a new leading axis, one per device.

Run: python examples/sharded_step.py [--quick]
"""

from __future__ import annotations

import os

# Eight CPU devices: must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import functools as ft
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import effax as fx

N_DEVICES = 8

Params = dict[str, jax.Array]

params = fx.State[Params]("params")
dropout = fx.RandomKey("dropout")
lr = fx.Ask[jax.Array]("lr")
device_losses = fx.Emit[jax.Array]("device_losses")

TRUE_W = jnp.array([1.0, -2.0, 3.0, 0.5])


def make_mesh() -> Mesh:
    if jax.device_count() < N_DEVICES:
        raise RuntimeError(
            f"this example needs {N_DEVICES} devices but JAX sees {jax.device_count()}: run "
            f"with XLA_FLAGS=--xla_force_host_platform_device_count={N_DEVICES}"
        )
    return Mesh(np.array(jax.devices()[:N_DEVICES]), ("data",))


def make_data(n: int = 256) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(0), (n, 4))
    return x, x @ TRUE_W + 0.25


def mse(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)


# --- 1. the global view: jit with shardings --------------------------------------


def global_step(x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = jax.value_and_grad(mse)(params.get(), x, y)
    params.modify(lambda p: jax.tree.map(lambda a, g: a - lr.ask() * g, p, grads))
    return loss


# --- 2. the per-device view: shard_map -------------------------------------------


def noisy_mse(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(dropout.next_key(), 0.9, x.shape)  # this device's key
    return mse(p, jnp.where(keep, x / 0.9, 0.0), y)


def per_device_step(x: jax.Array, y: jax.Array) -> jax.Array:
    def global_loss(p: Params) -> tuple[jax.Array, jax.Array]:
        local = noisy_mse(p, x, y)
        return jax.lax.pmean(local, "data"), local

    # The parameters are replicated, so shard_map sums their gradient over the
    # devices; averaging the loss makes that the gradient of the global mean.
    (loss, local), grads = jax.value_and_grad(global_loss, has_aux=True)(params.get())
    params.modify(lambda p: jax.tree.map(lambda a, g: a - lr.ask() * g, p, grads))
    device_losses.emit(local)
    return loss


def main(steps: int = 100) -> dict[str, Any]:
    mesh = make_mesh()
    batch = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    x, y = make_data()
    p0 = {"w": jnp.zeros(4), "b": jnp.zeros(())}

    # 1. global view: one compiled program over 8 devices
    step = fx.handle(
        global_step,
        transform=ft.partial(jax.jit, in_shardings=(batch, batch), out_shardings=replicated),
    )
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    with fx.handlers(params.init(jax.device_put(p0, replicated)), lr.provide(jnp.float32(0.1))):
        sharded_losses = [float(step(xs, ys)) for _ in range(steps)]
        sharded_params = params.get()
    print(f"jit with shardings: loss {sharded_losses[0]:.4f} -> {sharded_losses[-1]:.6f}")
    print(f"  x is split over {len(xs.sharding.device_set)} devices; the parameters stay")
    w_sharding = sharded_params["w"].sharding
    assert isinstance(w_sharding, NamedSharding)  # what out_shardings asked for
    print(f"  replicated: {w_sharding.spec}")

    # the same steps on one device, for comparison
    with fx.handlers(params.init(p0), lr.provide(jnp.float32(0.1))):
        single = fx.jit(global_step)
        single_losses = [float(single(x, y)) for _ in range(steps)]
        single_params = params.get()
    gap = float(jnp.max(jnp.abs(sharded_params["w"] - single_params["w"])))
    print(f"  max |w_sharded - w_single| = {gap:.2e}")

    # 2. per-device view: shard_map, dropout keys split per device
    mapped = fx.jit(
        fx.shard_map(per_device_step, mesh=mesh, in_specs=(P("data"), P("data")), out_specs=P())
    )
    with fx.handlers(
        params.init(p0),
        lr.provide(jnp.float32(0.1)),
        dropout.seed(0),
        device_losses.collect(),
    ) as hs:
        mapped_losses = [float(mapped(x, y)) for _ in range(steps)]
    per_device = hs[device_losses][-1]
    print(f"shard_map: loss {mapped_losses[0]:.4f} -> {mapped_losses[-1]:.4f}")
    print(f"  last step's per-device losses {np.array2string(np.asarray(per_device), precision=4)}")
    print(f"  dropout keys drawn by the stream: {hs[dropout].counter} (one per step)")
    return {
        "sharded_losses": sharded_losses,
        "single_losses": single_losses,
        "sharded_params": sharded_params,
        "single_params": single_params,
        "mapped_losses": mapped_losses,
        "device_losses": hs[device_losses],
        "keys_drawn": hs[dropout].counter,
        "mesh": mesh,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (20 steps)")
    main(20 if parser.parse_args().quick else 100)
