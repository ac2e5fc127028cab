"""Sample sites and a Bayesian linear-regression model, written with effects."""

from __future__ import annotations

import functools as ft
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx

from .counting import sites

latent = fx.RandomKey("latent")
log_density = fx.State[jax.Array]("log_density")
observations = fx.Ask[jax.Array]("observations")
design = fx.Ask[jax.Array]("design")
noise_scale = fx.Ask[float]("noise_scale", static=True)

SAMPLE_ROW = (latent, log_density, sites)
MODEL_ROW = (*SAMPLE_ROW, observations, design, noise_scale)


def normal_logpdf(x: jax.Array, loc: jax.Array, scale: jax.Array | float) -> jax.Array:
    z = (x - loc) / scale
    return jnp.sum(-0.5 * z**2 - jnp.log(scale) - 0.5 * math.log(2 * math.pi))


@fx.uses(*SAMPLE_ROW)
def sample_normal(loc: jax.Array, scale: jax.Array) -> jax.Array:
    z = loc + scale * fx.random.normal(jnp.shape(loc), stream=latent)
    log_density.modify(lambda lp: lp + normal_logpdf(z, loc, scale))
    sites.tick()
    return z


@fx.uses(log_density, sites)
def observe(value: jax.Array, loc: jax.Array, scale: float) -> None:
    log_density.modify(lambda lp: lp + normal_logpdf(value, loc, scale))
    sites.tick()


@fx.uses(*MODEL_ROW)
def regression() -> jax.Array:
    x = design.ask()
    w = sample_normal(jnp.zeros(x.shape[1]), jnp.ones(x.shape[1]))
    observe(observations.ask(), x @ w, noise_scale.ask())
    return w


@fx.uses(sites, observations, design, noise_scale)
def log_joint(w: jax.Array) -> jax.Array:
    """The model's log density at `w`, evaluated in a fresh accumulator."""
    with log_density.init(jnp.zeros(())) as acc:
        observe(observations.ask(), design.ask() @ w, noise_scale.ask())
        log_density.modify(lambda lp: lp + normal_logpdf(w, jnp.zeros_like(w), 1.0))
    return acc.value


standard_normal = ft.partial(sample_normal, scale=jnp.ones(()))
prior_draw: Callable[[], jax.Array] = lambda: fx.random.normal((3,), stream=latent)
