"""A score model trained by denoising score matching, and an annealed Langevin sampler."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

import effax as fx
from b7lib.effects import losses, lr, step_count
from b7lib.interceptors import ClipLosses, MuteLosses, halve_losses

sigma_max = fx.Ask[jax.Array]("sigma_max")
n_steps = fx.Ask[int]("n_steps", static=True, default=10)
schedule = fx.Ask[str]("schedule", static=True, default="geometric")
score_params = fx.State[dict[str, jax.Array]]("score_params")
sample_noise = fx.RandomKey("sample_noise")
grad_norms = fx.Emit[jax.Array]("grad_norms")

DIM = 2


def init_score_params(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (DIM + 1, 16)) * 0.3,
        "w2": jax.random.normal(k2, (16, DIM)) * 0.3,
    }


def score_net(p: dict[str, jax.Array], x: jax.Array, sigma: jax.Array) -> jax.Array:
    h = jnp.tanh(jnp.concatenate([x, jnp.log(sigma)[None]]) @ p["w1"])
    return (h @ p["w2"]) / sigma


@fx.uses(sigma_max, n_steps, schedule)
def sigmas() -> jax.Array:
    top = sigma_max.ask()
    if schedule.ask() == "geometric":
        return top * jnp.geomspace(1.0, 0.01, n_steps.ask())
    return top * jnp.linspace(1.0, 0.01, n_steps.ask())


@fx.uses(sigma_max, n_steps, schedule, fx.rng)
def dsm_loss(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    levels = sigmas()
    i = fx.random.randint((), 0, levels.shape[0])
    sigma = levels[i]
    eps = fx.random.normal(x.shape)
    pred = score_net(p, x + sigma * eps, sigma)
    return jnp.sum((sigma * pred + eps) ** 2)


TRAIN_ROW = (sigma_max, n_steps, schedule, fx.rng, score_params, lr, losses, step_count)


@fx.uses(*TRAIN_ROW)
def train_step(x: jax.Array) -> jax.Array:
    loss, g = fx.value_and_grad(dsm_loss)(score_params.get(), x)
    score_params.modify(lambda p: jax.tree.map(lambda a, b: a - lr.ask() * b, p, g))
    step_count.modify(lambda n: n + 1)
    losses.emit(loss)
    return loss  # E: no-any-return


@fx.uses(sigma_max, n_steps, schedule, fx.rng, score_params, lr, step_count)
def train_step_quiet(x: jax.Array) -> jax.Array:
    loss, g = fx.value_and_grad(dsm_loss)(score_params.get(), x)
    score_params.modify(lambda p: jax.tree.map(lambda a, b: a - lr.ask() * b, p, g))
    step_count.modify(lambda n: n + 1)
    losses.emit(loss)  # E: effax-undeclared
    return loss  # E: no-any-return


@fx.uses(sigma_max, n_steps, schedule, score_params, sample_noise)
def langevin(x0: jax.Array, step_size: float = 0.01) -> jax.Array:
    levels = sigmas()
    p = score_params.get()

    def body(i: jax.Array, x: jax.Array) -> jax.Array:
        sigma = levels[i]
        eps = step_size * (sigma / levels[-1]) ** 2
        noise = jax.random.normal(sample_noise.next_key(), x.shape)
        return x + eps * score_net(p, x, sigma) + jnp.sqrt(2 * eps) * noise

    return fx.fori_loop(0, levels.shape[0], body, x0)


@fx.uses(sigma_max, n_steps, schedule, score_params)
def langevin_no_stream(x0: jax.Array) -> jax.Array:
    levels = sigmas()
    p = score_params.get()

    def body(i: jax.Array, x: jax.Array) -> jax.Array:
        noise = jax.random.normal(sample_noise.next_key(), x.shape)
        return x + 0.01 * score_net(p, x, levels[i]) + 0.1 * noise

    return fx.fori_loop(0, levels.shape[0], body, x0)  # E: effax-undeclared


data = jax.random.normal(jax.random.key(0), (8, DIM)) * jnp.array([1.0, 0.3])
p0 = init_score_params(jax.random.key(1))
train_handlers = (
    sigma_max.provide(jnp.float32(5.0)),
    score_params.init(p0),
    lr.provide(jnp.float32(1e-3)),
    step_count.init(jnp.int32(0)),
)

# case: training steps, eager and compiled, under a full set of handlers
with fx.handlers(*train_handlers, fx.rng.seed(0), losses.collect()) as hs:
    for x in data[:3]:
        train_step(x)
    compiled_train = fx.jit(train_step)
    for x in data[3:]:
        compiled_train(x)

# case: a training step with no key stream seeded
with fx.handlers(*train_handlers, losses.collect()):
    train_step(data[0])  # E: effax-unhandled

# case: a compiled training step with no loss collector
with fx.handlers(*train_handlers, fx.rng.seed(0)):
    fx.jit(train_step)(data[0])  # E: effax-unhandled

# case: a halving interceptor in front of a collector
with fx.handlers(*train_handlers, fx.rng.seed(0), losses.collect(), halve_losses):
    train_step(data[0])

# case: the halving interceptor has nothing to forward to
with fx.handlers(*train_handlers, fx.rng.seed(0), halve_losses):
    train_step(data[0])  # E: effax-unhandled

# case: a muting interceptor subclass answers by itself
with fx.handlers(*train_handlers, fx.rng.seed(0), MuteLosses(losses, ())):
    train_step(data[1])

# case: a clipping interceptor subclass forwards to nothing
with fx.handlers(*train_handlers, fx.rng.seed(0)), ClipLosses(losses, ()):
    train_step(data[1])  # E: effax-unhandled

# case: the quiet step declares no losses but emits one (a collector outside)
with fx.handlers(*train_handlers, fx.rng.seed(0), losses.collect()):
    train_step_quiet(data[2])

# case: handled and compiled in one go, all handlers bound to the step
bound_step = fx.handle(
    train_step,
    sigma_max.provide(jnp.float32(5.0)),
    score_params.init(p0),
    lr.provide(jnp.float32(1e-3)),
    step_count.init(jnp.int32(0)),
    fx.rng.seed(1),
    losses.discard(),
    transform=jax.jit,
)
loss_a = bound_step(data[0])

# case: handled with the learning rate and key stream left to the caller
partly_bound = fx.handle(
    train_step, sigma_max.provide(jnp.float32(5.0)), score_params.init(p0), losses.discard()
)
with lr.provide(jnp.float32(1e-3)), step_count.init(jnp.int32(0)), fx.rng.seed(2):
    loss_b = partly_bound(data[0])

# case: the same partly handled step called with nothing around it
partly_bound(data[0])  # E: effax-unhandled

# case: sampling with every handler installed
with fx.handlers(sigma_max.provide(jnp.float32(5.0)), score_params.init(p0), sample_noise.seed(3)):
    sample = langevin(jnp.zeros(DIM))
    sample_fast = fx.jit(functools.partial(langevin, step_size=0.02))(jnp.zeros(DIM))

# case: sampling through functools.partial without the sampler's stream
with fx.handlers(sigma_max.provide(jnp.float32(5.0)), score_params.init(p0)):
    functools.partial(langevin, step_size=0.02)(jnp.zeros(DIM))  # E: effax-unhandled

# case: a sampler whose row forgets its noise stream
with fx.handlers(sigma_max.provide(jnp.float32(5.0)), score_params.init(p0), sample_noise.seed(3)):
    langevin_no_stream(jnp.zeros(DIM))

# case: the noise levels read at module level with no provider
levels_now = sigmas()  # E: effax-unhandled

# case: the noise levels with a provider and the default step count
with sigma_max.provide(jnp.float32(math.e)):
    levels_now = sigmas()
    with n_steps.provide(4), schedule.provide("linear"):
        levels_short = sigmas()


@fx.uses(sigma_max, n_steps, schedule, score_params, fx.rng)
def checkpointed_loss(x: jax.Array) -> jax.Array:
    loss_fn = fx.checkpoint(dsm_loss)
    return loss_fn(score_params.get(), x)


@fx.uses(sigma_max, score_params, fx.rng)
def checkpointed_loss_narrow(x: jax.Array) -> jax.Array:
    loss_fn = fx.checkpoint(dsm_loss)
    with n_steps.provide(5):
        return loss_fn(score_params.get(), x)  # E: effax-undeclared


# case: a rematerialised loss under its handlers
with fx.handlers(sigma_max.provide(jnp.float32(5.0)), score_params.init(p0), fx.rng.seed(4)):
    remat_loss = checkpointed_loss(data[0])

# case: a rematerialised loss whose row omits the schedule (provided outside)
with fx.handlers(sigma_max.provide(jnp.float32(5.0)), score_params.init(p0), fx.rng.seed(4)):
    with schedule.provide("linear"):
        checkpointed_loss_narrow(data[0])

# case: gradient norms reported per step
with grad_norms.collect() as norms, fx.rng.seed(5), sigma_max.provide(jnp.float32(2.0)):
    g = fx.grad(dsm_loss)(p0, data[0])
    grad_norms.emit(jnp.sqrt(sum(jnp.sum(v**2) for v in g.values())))

# case: gradient norms emitted with no collector
grad_norms.emit(jnp.float32(0.0))  # E: effax-unhandled

# case: a step count started as a Python int, updated eagerly only
with step_count.init(jnp.int32(0)) as counter:
    for _ in range(3):
        step_count.modify(lambda n: n + 1)
