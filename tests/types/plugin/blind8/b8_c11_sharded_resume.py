"""Data-parallel steps over an 8-device mesh with effax.shard_map, long runs with
donated state, snapshots and resumes, convergence loops with a tolerance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import effax as fx

device_keys = fx.RandomKey("device_keys")
grad_norms = fx.Emit[jax.Array]("grad_norms")
weights = fx.State[jax.Array]("weights")
converge_tol = fx.Ask[jax.Array]("converge_tol")
iterations = fx.State[jax.Array]("iterations")
running_loss = fx.State[float]("running_loss")
mesh_axes = fx.Ask[list[str]]("mesh_axes", static=True)
clip_norm = fx.Ask[float]("clip_norm", default=1.0)

MESH = Mesh(np.array(jax.devices()[:8]), ("d",))
DATA = jnp.arange(32.0).reshape(16, 2) / 16.0


@fx.uses(device_keys, grad_norms)
def local_step(x: jax.Array) -> jax.Array:
    noisy = x + 0.01 * fx.random.normal(x.shape, stream=device_keys)
    grad_norms.emit(jnp.linalg.norm(noisy))
    return noisy * 0.5


sharded_step = fx.shard_map(local_step, mesh=MESH, in_specs=P("d"), out_specs=P("d"))  # E: no-untyped-call


# case: one data-parallel step, keys split per device, norms stacked per device
with device_keys.seed(0), grad_norms.collect() as norms:
    out = sharded_step(DATA)
print("sharded", out.shape, "norms", norms.values[0].shape)


# case: the sharded step at module level with the norms collected but no key stream
with grad_norms.collect():
    out_bad = sharded_step(DATA)  # E: effax-unhandled


# case: a driver whose row lacks the emitted norms of the sharded step
@fx.uses(device_keys)
def drive(x: jax.Array, n: int) -> jax.Array:
    for _ in range(n):
        x = sharded_step(x)  # E: effax-undeclared
    return x


with device_keys.seed(1), grad_norms.collect():
    drive(DATA, 2)


# case: a long run with donated weights, snapshotted and resumed bit for bit
@fx.uses(weights, device_keys, iterations)
def sgd_step(x: jax.Array) -> jax.Array:
    w = weights.get()
    noise = 0.01 * fx.random.normal(w.shape, stream=device_keys)
    g = jnp.mean(x, axis=0) - w
    weights.set(w + 0.1 * g + noise)
    iterations.modify(lambda n: n + 1)
    return jnp.sum(g**2)


donated = fx.jit(sgd_step, donate_state=True)
with fx.handlers(weights.init(jnp.zeros(2)), device_keys.seed(2), iterations.init(jnp.int32(0))) as run1:
    for _ in range(3):
        donated(DATA)
    saved = fx.snapshot(run1)
    loss_a = donated(DATA)
with fx.handlers(weights.init(jnp.zeros(2)), device_keys.seed(3), iterations.init(jnp.int32(0))) as run2:
    fx.restore(saved, run2)
    loss_b = donated(DATA)
print("resumed identical:", bool(loss_a == loss_b), int(run2[iterations]))


# case: a helper that compiles the donated step without the iteration counter in its row
@fx.uses(weights, device_keys)
def warmup(x: jax.Array) -> jax.Array:
    return fx.jit(sgd_step, donate_state=True)(x)  # E: effax-undeclared


with fx.handlers(weights.init(jnp.zeros(2)), device_keys.seed(4), iterations.init(jnp.int32(0))):
    warmup(DATA)


# case: the compiled step's stages: traced and lowered under its handlers
with fx.handlers(weights.init(jnp.zeros(2)), device_keys.seed(5), iterations.init(jnp.int32(0))):
    traced = donated.trace(DATA)
    lowered = donated.lower(DATA)
print("jaxpr outputs", len(traced.jaxpr.out_avals))


# case: a convergence loop whose condition reads the tolerance, none provided
x_conv = fx.while_loop(lambda c: c > converge_tol.ask(), lambda c: c * 0.5, jnp.asarray(1.0))  # E: effax-unhandled


# case: the same loop with the tolerance provided and the iterations counted in a State
with converge_tol.provide(jnp.float32(1e-2)), iterations.init(jnp.int32(0)) as it:
    x_conv = fx.while_loop(
        lambda c: c > converge_tol.ask(), lambda c: (iterations.modify(lambda n: n + 1), c * 0.5)[1], jnp.asarray(1.0)
    )
print("converged in", int(it.value))


# case: a rematerialised step in a function whose row lacks the key stream
@fx.uses(weights, iterations)
def remat_step(x: jax.Array) -> jax.Array:
    return fx.checkpoint(sgd_step)(x)  # E: effax-undeclared


with fx.handlers(weights.init(jnp.zeros(2)), device_keys.seed(6), iterations.init(jnp.int32(0))):
    remat_step(DATA)


# case: the mesh axes given to a static Ask as a list
with mesh_axes.provide(["d"]):  # E: effax-handler-type
    print(mesh_axes.ask())


# case: a running loss average started from the int 0, owned by a compiled handled function
@fx.uses(running_loss)
def average_loss(loss: jax.Array) -> None:
    running_loss.set(0.9 * running_loss.get() + 0.1 * loss)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


with converge_tol.provide(jnp.float32(0.0)):
    averaged = fx.handle(average_loss, running_loss.init(0), transform=jax.jit)  # E: effax-handler-type
    averaged(jnp.float32(2.0))


# case: the same average started from 0.0
averaged_ok = fx.handle(average_loss, running_loss.init(0.0), transform=jax.jit)
averaged_ok(jnp.float32(2.0))


# case: jax.jit of an effectful function, called at module level with nothing installed
@fx.uses(converge_tol)
def below_tol(x: jax.Array) -> jax.Array:
    return x < converge_tol.ask()


flag = jax.jit(below_tol)(jnp.float32(0.5))  # E: effax-unhandled


# case: the pure-entry style: the tolerance installed inside the function jax.jit compiles
@jax.jit
def below_fixed(x: jax.Array) -> jax.Array:
    with converge_tol.provide(jnp.float32(0.1)):
        return below_tol(x)


below_fixed(jnp.float32(0.05))


# case: a traced-bound fori_loop drawing keys; the counter comes out traced
@fx.uses(device_keys)
def random_walk(n: jax.Array) -> jax.Array:
    return fx.fori_loop(0, n, lambda i, c: c + fx.random.normal(stream=device_keys), jnp.asarray(0.0))


with device_keys.seed(7) as ks:
    fx.jit(random_walk)(jnp.int32(5))
print("counter", ks.value.counter)


# case: a switch over lambdas at module level reading the iteration count with no cell
picked = fx.switch(jnp.int32(0), [lambda: iterations.get(), lambda: jnp.int32(0)])  # E: effax-unhandled


# case: fx.map over shards in a function whose row lacks the key stream
@fx.uses(grad_norms)
def per_shard(x: jax.Array) -> jax.Array:
    return fx.map(local_step, x.reshape(4, 4, 2))  # E: effax-undeclared


with device_keys.seed(8), grad_norms.collect():
    per_shard(DATA)


# case: clipping with the default norm, inside the sharded function
@fx.uses(clip_norm)
def clipped(x: jax.Array) -> jax.Array:
    n = jnp.linalg.norm(x)
    return x * jnp.minimum(1.0, clip_norm.ask() / (n + 1e-6))


clipped_out = fx.shard_map(clipped, mesh=MESH, in_specs=P("d"), out_specs=P("d"))(DATA)  # E: no-untyped-call
