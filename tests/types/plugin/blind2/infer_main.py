"""Posterior inference for probkit's regression model: importance sampling and MH."""

from __future__ import annotations

import functools as ft
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx
from probkit import (
    SAMPLE_ROW,
    design,
    latent,
    log_density,
    log_joint,
    noise_scale,
    observations,
    prior_draw,
    regression,
    rejections,
    sites,
    standard_normal,
)
from probkit.model import normal_logpdf

X_DATA = jax.random.normal(jax.random.key(0), (50, 3))
Y_DATA = X_DATA @ jnp.array([1.0, -2.0, 0.5])
acceptance = fx.State[float]("acceptance")  # a running acceptance rate, host side


@fx.uses(latent, rejections, observations, design, noise_scale)
def mh_step(w: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
    proposal = w + 0.1 * fx.random.normal(w.shape, stream=latent)
    with sites.tally():
        log_ratio = log_joint(proposal) - log_joint(w)
    accept = jnp.log(fx.random.uniform(stream=latent)) < log_ratio
    rejections.tick_if(~accept)
    new_w = jnp.where(accept, proposal, w)
    return new_w, new_w


@fx.uses(latent, rejections, observations, design, noise_scale)
def chain(w0: jax.Array, n: int) -> jax.Array:
    _, ws = fx.scan(mh_step, w0, None, length=n)
    return ws


run_chain = fx.handle(
    chain,
    observations.provide(Y_DATA),
    design.provide(X_DATA),
    noise_scale.provide(0.1),
    transform=ft.partial(jax.jit, static_argnums=1),
)


@fx.uses(acceptance)
def record(accepted: bool) -> None:
    acceptance.modify(lambda a: 0.99 * a + 0.01 * float(accepted))


def repeat(fn: Callable[[], jax.Array], n: int) -> list[jax.Array]:
    return [fn() for _ in range(n)]


# case: importance weights with local accumulators
@fx.uses(latent, observations, design, noise_scale)
def log_weight() -> jax.Array:
    with fx.handlers(log_density.init(jnp.zeros(())), sites.tally()) as hs:
        regression()
    return hs[log_density]


# case: particles batched with effax.vmap
particles = fx.vmap(log_weight, in_axes=None, axis_size=64, keys="split")


@fx.uses(latent, observations, design, noise_scale)
def log_evidence() -> jax.Array:
    w = particles()
    return jax.nn.logsumexp(w) - jnp.log(w.shape[0])


# case: the accumulators forget the site counter
@fx.uses(latent, observations, design, noise_scale)
def log_weight_nosites() -> jax.Array:
    with log_density.init(jnp.zeros(())) as acc:
        regression()  # E: effax-undeclared
    return acc.value


# case: a user-defined operation outside the row
@fx.uses(log_density)
def observe_many(values: jax.Array, loc: jax.Array) -> None:
    for v in values:
        log_density.modify(lambda lp: lp + normal_logpdf(v, loc, 1.0))
        sites.tick()  # E: effax-undeclared


# case: a derived user-defined operation outside the row
@fx.uses(latent)
def thin(ws: jax.Array) -> jax.Array:
    keep = fx.random.uniform(ws.shape[:1], stream=latent) < 0.5
    rejections.tick_if(jnp.sum(~keep) > 0)  # E: effax-undeclared
    return ws[keep]


# case: Metropolis chain with effax.scan
@fx.uses(latent, rejections, observations, design, noise_scale)
def two_chains(w0: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    first = chain(w0, n)
    _, second = fx.scan(mh_step, first[-1], None, length=n)
    return first, second


# case: the chain's row forgets the rejection counter
@fx.uses(latent, observations, design, noise_scale)
def chain_norej(w0: jax.Array, n: int) -> jax.Array:
    _, ws = fx.scan(mh_step, w0, None, length=n)  # E: effax-undeclared
    return ws


# case: a scan body lambda draws from a stream outside the row
@fx.uses(log_density)
def random_walk(n: int) -> jax.Array:
    final, path = fx.scan(lambda x, _: (x + fx.random.normal(stream=latent), x), jnp.zeros(()), None, length=n)  # E: effax-undeclared
    log_density.modify(lambda lp: lp - 0.5 * jnp.sum(path**2))
    return final


# case: the default stream is not the declared one
@fx.uses(latent)
def jitter(w: jax.Array) -> jax.Array:
    return w + 1e-3 * fx.random.normal(w.shape)  # E: effax-undeclared


# case: the sampler draws from the declared stream
@fx.uses(latent)
def jitter_ok(w: jax.Array) -> jax.Array:
    return w + 1e-3 * fx.random.normal(w.shape, stream=latent)


# case: compiled chain at module level
with fx.handlers(latent.seed(0), rejections.tally()) as chain_hs:
    samples = run_chain(jnp.zeros(3), 500)
print(samples.mean(axis=0), chain_hs[rejections])


# case: compiled chain with no key stream
with rejections.tally():
    more = run_chain(jnp.zeros(3), 100)  # E: effax-unhandled


# case: the observed data is never provided
with fx.handlers(latent.seed(1), log_density.init(jnp.zeros(())), sites.tally()):
    with design.provide(X_DATA), noise_scale.provide(0.5):
        draw = regression()  # E: effax-unhandled


# case: the acceptance rate starts from an int
with acceptance.init(0):  # E: effax-handler-type
    record(True)


# case: the acceptance rate starts from a float
with acceptance.init(0.0) as rate:
    for flag in (True, False, True):
        record(flag)
print(rate.value)


# case: an effect passed in as a parameter
@fx.uses(log_density)
def draw_from(stream: fx.RandomKey, shape: tuple[int, ...]) -> jax.Array:
    return jax.random.normal(stream.next_key(), shape)  # limit


# case: a lambda handed to a helper of our own
@fx.uses(log_density)
def draws() -> list[jax.Array]:
    return repeat(lambda: fx.random.normal(stream=latent), 4)  # limit


# case: a lambda kept in another module's variable
@fx.uses(log_density)
def prior_samples() -> jax.Array:
    return prior_draw()  # limit


# case: the library's partial under the library's row
@fx.uses(*SAMPLE_ROW)
def two_standard() -> jax.Array:
    return standard_normal(jnp.zeros(())) + standard_normal(jnp.ones(()))


# case: the library's partial without the site counter
@fx.uses(latent, log_density)
def standard_pair() -> jax.Array:
    a = standard_normal(jnp.zeros(()))  # E: effax-undeclared
    return a


# case: the library's partial at module level without an accumulator
with latent.seed(3), sites.tally():
    z0 = standard_normal(jnp.zeros(()))  # E: effax-unhandled
