"""Multiple devices: effax on JAX's SPMD machinery (8 host CPU devices)."""

import functools as ft

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_transparent
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

params = fx.State[dict[str, jax.Array]]("params")
dropout = fx.RandomKey("dropout")
lr = fx.Ask[jax.Array]("lr")
losses = fx.Emit[jax.Array]("losses")

N_DEVICES = 8


@pytest.fixture(scope="module")
def mesh():
    assert jax.device_count() >= N_DEVICES, (
        "these tests need 8 devices: tests/conftest.py sets "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8 unless XLA_FLAGS is already set"
    )
    return Mesh(np.array(jax.devices()[:N_DEVICES]), ("data",))


def data():
    x = jax.random.normal(jax.random.key(0), (32, 4))
    y = x @ jnp.array([1.0, -2.0, 3.0, 0.5]) + 0.25
    return x, y


def init_params():
    return {"w": jnp.zeros(4), "b": jnp.zeros(())}


def local_loss(p, x, y):
    keep = jax.random.bernoulli(dropout.next_key(), 0.9, x.shape)
    pred = jnp.where(keep, x / 0.9, 0.0) @ p["w"] + p["b"]
    return jnp.mean((pred - y) ** 2)


def train_step(x, y):
    """Global step: the whole batch, keys drawn once for the global arrays."""
    loss, grads = jax.value_and_grad(local_loss)(params.get(), x, y)
    params.modify(lambda p: jax.tree.map(lambda a, g: a - lr.ask() * g, p, grads))
    losses.emit(loss)
    return loss


def sharded_step(x, y):
    """Per-device step for shard_map: local keys, the loss averaged across devices.

    The parameters are replicated, so shard_map sums their gradient across devices
    by itself; averaging the loss makes that the gradient of the global mean.
    """

    def global_loss(p):
        local = local_loss(p, x, y)
        return jax.lax.pmean(local, "data"), local

    (loss, local), grads = jax.value_and_grad(global_loss, has_aux=True)(params.get())
    params.modify(lambda p: jax.tree.map(lambda a, g: a - lr.ask() * g, p, grads))
    losses.emit(local)
    return loss


def handlers(p):
    return fx.handlers(
        params.init(p),
        dropout.seed(jax.random.key(1)),
        lr.provide(jnp.float32(0.1)),
        losses.collect(),
    )


def test_jit_with_shardings_matches_single_device(mesh):
    x, y = data()
    batch = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    p0 = jax.device_put(init_params(), replicated)

    step = fx.handle(
        train_step,
        transform=ft.partial(jax.jit, in_shardings=(batch, batch), out_shardings=replicated),
    )
    with handlers(p0) as hs:
        sharded = [step(xs, ys) for _ in range(3)], hs[params], hs[dropout].counter
    with handlers(init_params()) as hs:
        single = [train_step(x, y) for _ in range(3)], hs[params], hs[dropout].counter
    assert_transparent(sharded[0], single[0])
    np.testing.assert_allclose(sharded[1]["w"], single[1]["w"], rtol=1e-5, atol=1e-6)
    assert sharded[2] == single[2] == 3
    # the state keeps its sharding
    for leaf in jax.tree.leaves(sharded[1]):
        assert leaf.sharding.is_equivalent_to(replicated, leaf.ndim)


def test_shard_map_matches_per_device_loop_and_draws_distinct_keys(mesh):
    x, y = data()
    step = fx.shard_map(sharded_step, mesh=mesh, in_specs=(P("data"), P("data")), out_specs=P())
    with handlers(init_params()) as hs:
        loss = fx.jit(step)(x, y)
        ours = loss, hs[params], hs[dropout].counter, hs[losses]

    # the same step, one device at a time: device d folds its index into one key
    with handlers(init_params()) as hs:
        key = jax.random.fold_in(jax.random.key(1), 0)
        p = params.get()
        shard_losses, shard_grads = [], []
        for d, (xd, yd) in enumerate(
            zip(jnp.split(x, N_DEVICES), jnp.split(y, N_DEVICES), strict=True)
        ):
            with dropout.seed(jax.random.fold_in(key, d)):
                loss_d, grads_d = jax.value_and_grad(local_loss)(p, xd, yd)
            shard_losses.append(loss_d)
            shard_grads.append(grads_d)
        grads = jax.tree.map(lambda *g: jnp.mean(jnp.stack(g), axis=0), *shard_grads)
        params.set(jax.tree.map(lambda a, g: a - 0.1 * g, p, grads))
        theirs = jnp.mean(jnp.stack(shard_losses)), hs[params], 1, [jnp.stack(shard_losses)]
    assert_transparent(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1]["w"], theirs[1]["w"], rtol=1e-5, atol=1e-6)
    assert ours[2] == 1
    np.testing.assert_allclose(ours[3][0], theirs[3][0], rtol=1e-5)
    # distinct keys per device: the per-device losses differ
    assert len(set(np.asarray(ours[3][0]).round(6).tolist())) == N_DEVICES


def test_shard_map_shared_keys_draw_the_same_key_everywhere(mesh):
    def draw(x):
        return x + jax.random.uniform(dropout.next_key())

    with dropout.seed(0) as stream:
        out = fx.shard_map(draw, mesh=mesh, in_specs=P("data"), out_specs=P("data"), keys="shared")(
            jnp.zeros(N_DEVICES)
        )
        assert stream.value.counter == 1
    assert len(set(np.asarray(out).tolist())) == 1
    with dropout.seed(0):
        out = fx.shard_map(draw, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(
            jnp.zeros(N_DEVICES)
        )
    assert len(set(np.asarray(out).tolist())) == N_DEVICES
