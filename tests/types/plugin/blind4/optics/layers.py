"""Layers with declared rows. A helper module: no cases, no errors expected."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import jax
import jax.numpy as jnp

import effax as fx
from optics.effects import LAYER_ROW, acts, bn, losses, lr, mode, noise, step_count, temperature

F = TypeVar("F", bound=Callable[..., jax.Array])


@fx.uses(lr)
def sgd_update(w: jax.Array, g: jax.Array) -> jax.Array:
    return w - lr.ask() * g


@fx.uses(*LAYER_ROW)
def counted_update(w: jax.Array, g: jax.Array) -> jax.Array:
    step_count.modify(lambda n: n + 1)
    return sgd_update(w, g)


@fx.uses(temperature)
def soften(logits: jax.Array) -> jax.Array:
    return jax.nn.softmax(logits / temperature.ask())


@fx.uses(noise)
def jitter(x: jax.Array, scale: float = 0.01) -> jax.Array:
    return x + scale * jax.random.normal(noise.next_key(), x.shape)


@fx.uses(acts)
def tapped_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    h = acts.tap("mlp/hidden", jnp.tanh(x @ w1))
    return acts.tap("mlp/out", h @ w2)


@fx.uses(losses)
def report_loss(x: jax.Array) -> jax.Array:
    loss = jnp.mean(x**2)
    losses.emit(loss)
    return loss


@fx.uses(bn)
def running_mean(name: str, x: jax.Array) -> jax.Array:
    mean = bn.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1]))
    bn.set(f"{name}/mean", 0.9 * mean + 0.1 * jnp.mean(x, axis=0))
    return x - mean


@fx.uses(mode)
def activation(x: jax.Array) -> jax.Array:
    return jnp.tanh(x) if mode.ask() == "tanh" else jax.nn.relu(x)


def logged(fn: F) -> F:
    """A decorator of our own that keeps the signature (placed *below* @uses)."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> jax.Array:
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]  # pyright: ignore[reportReturnType]


@fx.uses(lr)
@logged
def logged_update(w: jax.Array, g: jax.Array) -> jax.Array:
    return w - lr.ask() * g


class Dense:
    """A plain-Python layer whose call has a row."""

    def __init__(self, w: jax.Array) -> None:
        self.w = w

    @fx.uses(acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        return acts.tap("dense", x @ self.w)


class NoisyDense(Dense):
    @fx.uses(acts, noise)
    def __call__(self, x: jax.Array) -> jax.Array:
        return jitter(super().__call__(x))


class Meter:
    """Reads the step count through a property with a row."""

    @property
    @fx.uses(step_count)
    def steps(self) -> jax.Array:
        return step_count.get()
