"""Layers with effect rows, written against effects imported under other names."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

import effax as fx
from b5lib import effects
from b5lib.effects import acts as taps
from b5lib.effects import dropout as drop
from b5lib.effects import losses as loss_log
from b5lib.effects import steps as counter
from b5lib.effects import temperature as temp


@fx.uses(temp)
def scaled(x: jax.Array) -> jax.Array:
    return x * temp.ask()


@fx.uses(temp, counter)
def counted(x: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 1)
    return scaled(x)


@fx.uses(drop)
def noisy(x: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(drop.next_key(), 0.9, x.shape)
    return jnp.where(keep, x / 0.9, 0.0)


@fx.uses(loss_log)
def report(x: jax.Array) -> jax.Array:
    loss_log.emit(jnp.sum(x**2))
    return jnp.tanh(x)


@fx.uses(taps)
def tapped(x: jax.Array) -> jax.Array:
    h = taps.tap("block0/hidden", jnp.tanh(2.0 * x))
    return taps.tap("block0/out", h + 1.0)


@fx.uses(effects.gain)
def amplified(x: jax.Array) -> jax.Array:
    return x * effects.gain.ask()


@fx.uses(*effects.TRAIN_ROW)
def sgd_update(w: jax.Array, g: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 1)
    loss_log.emit(jnp.sum(g**2))
    return w - effects.learning_rate.ask() * g


@fx.uses(effects.run_tag)
def tag_length(x: jax.Array) -> jax.Array:
    return x * len(effects.run_tag.ask())


@fx.uses(effects.label)
def relabel(suffix: str) -> str:
    return effects.label.modify(lambda s: s + suffix)


@fx.uses(effects.total)
def accumulate(x: jax.Array) -> jax.Array:
    effects.total.set(effects.total.get() + 0.5)
    return x


double_scaled = functools.partial(scaled)


class Dense:
    """A tiny dense layer whose call draws dropout and counts calls."""

    def __init__(self, n: int) -> None:
        self.w = jnp.eye(n) * 0.5

    @fx.uses(drop, counter)
    def __call__(self, x: jax.Array) -> jax.Array:
        counter.modify(lambda n: n + 1)
        return noisy(x @ self.w)


class Thermostat:
    """A property with a row: reading it performs the temperature."""

    @property
    @fx.uses(temp)
    def reading(self) -> jax.Array:
        return temp.ask() + 0.0
