"""Key streams: Metropolis and Langevin samplers, chains under vmap, generators."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp

import effax as fx
from effax import random as fxr
from b6lib.effects import noise, temperature

target_scale = fx.Ask[jax.Array]("target_scale")
accepted = fx.State[jax.Array]("accepted")


@fx.uses(target_scale)
def log_density(x: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum((x / target_scale.ask()) ** 2)


@fx.uses(fx.rng, target_scale, accepted)
def mh_step(x: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
    proposal = x + 0.5 * fxr.normal(x.shape)
    log_ratio = log_density(proposal) - log_density(x)
    accept = jnp.log(fxr.uniform()) < log_ratio
    accepted.modify(lambda n: n + accept.astype(jnp.int32))
    x = jnp.where(accept, proposal, x)
    return x, x


@fx.uses(fx.rng, target_scale, accepted)
def chain(x0: jax.Array, n: int = 50) -> jax.Array:
    _, xs = fx.scan(mh_step, x0, None, length=n)
    return xs


# case: a Metropolis chain compiled under a seeded default stream
with fx.handlers(fx.rng.seed(0), target_scale.provide(jnp.float32(1.0)), accepted.init(jnp.int32(0))) as hs:
    samples = fx.jit(chain, static_argnums=1)(jnp.zeros(2), 50)
rate = int(hs[accepted]) / 50

# case: the chain with the acceptance counter forgotten
with fx.rng.seed(0), target_scale.provide(jnp.float32(1.0)):
    samples_bad = fx.jit(chain, static_argnums=1)(jnp.zeros(2), 50)  # E: effax-unhandled

# case: the chain with the stream left unseeded
with target_scale.provide(jnp.float32(1.0)), accepted.init(jnp.int32(0)):
    unseeded = chain(jnp.zeros(2), 10)  # E: effax-unhandled

# case: many chains, one key per chain
with fx.rng.seed(1), target_scale.provide(jnp.float32(2.0)), accepted.init(jnp.zeros(4, jnp.int32)):
    many = fx.vmap(lambda x0: fx.scan(mh_step, x0, None, length=10)[1], state="batched")(jnp.zeros((4, 2)))

# case: a vmapped lambda drawing from a stream nobody seeded
jittered = fx.vmap(lambda x: x + fxr.normal())(jnp.zeros(4))  # E: effax-unhandled
with noise.seed(0):
    jittered_other = fx.vmap(lambda x: x + fxr.normal(stream=noise))(jnp.zeros(4))
with noise.seed(0):
    jittered_default = fx.vmap(lambda x: x + fxr.normal(), keys="shared")(jnp.zeros(4))  # E: effax-unhandled


# case: a row naming the noise stream, drawing from it by name
@fx.uses(noise)
def perturb(x: jax.Array, sigma: float = 0.1) -> jax.Array:
    return x + sigma * fxr.normal(x.shape, stream=noise)


with noise.seed(jax.random.key(3)):
    perturbed = perturb(jnp.zeros(3))


# case: a row naming the noise stream, drawing from the default one
@fx.uses(noise)
def perturb_default(x: jax.Array, sigma: float = 0.1) -> jax.Array:
    return x + sigma * fxr.normal(x.shape)  # E: effax-undeclared


with noise.seed(0), fx.rng.seed(0):
    perturbed_bad = perturb_default(jnp.zeros(3))


# case: Langevin dynamics: a gradient of the log density under the target's scale
@fx.uses(fx.rng, target_scale, temperature)
def langevin(x: jax.Array, _: None) -> tuple[jax.Array, None]:
    eps = 0.01
    g = fx.grad(log_density)(x)
    x = x + eps * g + jnp.sqrt(2 * eps * temperature.ask()) * fxr.normal(x.shape)
    return x, None


with fx.handlers(fx.rng.seed(2), target_scale.provide(jnp.float32(1.0)), temperature.provide(jnp.float32(1.0))):
    x_final, _ = fx.jit(lambda x0: fx.scan(langevin, x0, None, length=20))(jnp.ones(2))

# case: Langevin at module level without a temperature
with fx.rng.seed(2), target_scale.provide(jnp.float32(1.0)):
    x_hot, _ = fx.scan(langevin, jnp.ones(2), None, length=5)  # E: effax-unhandled


# case: a sampler class: methods with rows, a method handed to fx.scan
class Sampler:
    def __init__(self, step_size: float) -> None:
        self.step_size = step_size

    @fx.uses(fx.rng, target_scale)
    def step(self, x: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
        proposal = x + self.step_size * fxr.normal(x.shape)
        keep = jnp.log(fxr.uniform()) < log_density(proposal) - log_density(x)
        x = jnp.where(keep, proposal, x)
        return x, x

    @fx.uses(fx.rng, target_scale)
    def run(self, x0: jax.Array, n: int) -> jax.Array:
        return fx.scan(self.step, x0, None, length=n)[1]


sampler = Sampler(0.3)
with fx.rng.seed(4), target_scale.provide(jnp.float32(1.0)):
    draws_ok = sampler.run(jnp.zeros(2), 10)

# case: the sampler run with the default stream only
with fx.rng.seed(4):
    draws_bad = sampler.run(jnp.zeros(2), 10)  # E: effax-unhandled
with fx.rng.seed(4):
    draws_bad2 = Sampler(0.1).run(jnp.zeros(2), 10)  # E: effax-unhandled


# case: a while loop until a traced limit, and a fori loop accumulating draws
@fx.uses(fx.rng, target_scale)
def first_passage() -> jax.Array:
    return fx.while_loop(lambda x: x < target_scale.ask(), lambda x: x + fxr.uniform(), jnp.asarray(0.0))


with fx.rng.seed(5), target_scale.provide(jnp.float32(3.0)):
    passage = first_passage()
    total = fx.fori_loop(0, 4, lambda i, acc: acc + fxr.exponential(), jnp.asarray(0.0))

# case: the while loop's limit not provided; a fori loop with no stream
with fx.rng.seed(5):
    passage_bad = first_passage()  # E: effax-unhandled
total_bad = fx.fori_loop(0, 4, lambda i, acc: acc + fxr.exponential(), jnp.asarray(0.0))  # E: effax-unhandled


# case: a branch that draws only when asked to, under fx.cond
@fx.uses(fx.rng)
def maybe_noise(x: jax.Array) -> jax.Array:
    return fx.cond(x.sum() > 0, lambda: x + fxr.normal(x.shape), lambda: x)


with fx.rng.seed(6):
    noisy_pos = fx.jit(maybe_noise)(jnp.ones(2))
    noisy_map = fx.map(maybe_noise, jnp.ones((3, 2)))

# case: fx.map over the branch with no stream installed
noisy_map_bad = fx.map(maybe_noise, jnp.ones((3, 2)))  # E: effax-unhandled


# case: a pure entry point seeding the stream from a key argument, under jax.jit
@jax.jit
@fx.uses()
def entry(x: jax.Array, key: jax.Array) -> jax.Array:
    with fx.rng.seed(key):
        return maybe_noise(x)


entry_out = entry(jnp.ones(2), jax.random.key(9))


# case: a generator drawing samples lazily, consumed under a seeded stream
def sample_stream(n: int) -> Iterator[jax.Array]:
    for _ in range(n):
        yield fxr.normal((2,))


with fx.rng.seed(7):
    streamed = [s for s in sample_stream(3)]

# case: the generator consumed with no stream installed (a generator has no row)
streamed_bad = [s for s in sample_stream(2)]  # limit: a generator function cannot declare a row; calls of functions without a row are not checked


# case: a prior table as a static Ask, hashable as a tuple of pairs
priors = fx.Ask[tuple[tuple[str, float], ...]]("priors", static=True)
prior_table = fx.Ask[dict[str, float]]("prior_table", static=True)


@fx.uses(priors, fx.rng)
def draw_prior() -> dict[str, jax.Array]:
    return {name: scale * fxr.normal() for name, scale in priors.ask()}


with priors.provide((("mu", 1.0), ("sigma", 0.5))), fx.rng.seed(8):
    prior_draw = fx.jit(draw_prior)()

# case: the prior table given as a dict to a static Ask
with prior_table.provide({"mu": 1.0, "sigma": 0.5}):  # E: effax-handler-type
    pass


# case: a vectorised density that draws jitter from a stream outside its row
@fx.uses(target_scale)
def jittered_density(xs: jax.Array) -> jax.Array:
    return fx.vmap(lambda x: log_density(x) + 0.01 * fxr.normal())(xs)  # E: effax-undeclared


with target_scale.provide(jnp.float32(1.0)), fx.rng.seed(9):
    densities = jittered_density(jnp.ones((3, 2)))
