"""Small layers with declared effect rows."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import acts, dropout, init_key, losses, steps, temperature, training, verbose


@fx.uses(init_key)
def glorot(n_in: int, n_out: int) -> jax.Array:
    return jax.random.normal(init_key.next_key(), (n_in, n_out)) / jnp.sqrt(n_in)


@fx.uses()
def dense(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w)


@fx.uses(training, dropout)
def drop(x: jax.Array, rate: float = 0.5) -> jax.Array:
    if training.ask():
        keep = jax.random.bernoulli(dropout.next_key(), 1 - rate, x.shape)
        return jnp.where(keep, x / (1 - rate), 0.0)
    return x


@fx.uses(steps)
def count() -> jax.Array:
    return steps.modify(lambda n: n + 1)


@fx.uses(temperature)
def soften(logits: jax.Array) -> jax.Array:
    return logits / temperature.ask()


@fx.uses(losses)
def report(value: jax.Array) -> jax.Array:
    losses.emit(value)
    return value


@fx.uses(acts)
def tapped_dense(site: str, x: jax.Array, w: jax.Array) -> jax.Array:
    return acts.tap(site, jnp.tanh(x @ w))


@fx.uses(verbose)
def maybe_print(x: jax.Array) -> jax.Array:
    if verbose.ask():
        print(x)
    return x


class Linear:
    """A layer whose constructor draws its weights from `init_key`."""

    @fx.uses(init_key)
    def __init__(self, n_in: int, n_out: int) -> None:
        self.w = glorot(n_in, n_out)
        self.b = jnp.zeros(n_out)

    @fx.uses(acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        return acts.tap("linear", x @ self.w + self.b)

    @property
    @fx.uses(temperature)
    def scaled_w(self) -> jax.Array:
        return self.w / temperature.ask()


class RunningMean:
    """Per-layer state kept in an attribute (the plugin does not track these)."""

    def __init__(self, name: str, size: int) -> None:
        self.stat = fx.State[jax.Array](f"{name}.mean")
        self.size = size

    def init(self) -> fx.Handler[fx.State[jax.Array]]:
        return self.stat.init(jnp.zeros(self.size))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.stat.modify(lambda m: 0.9 * m + 0.1 * jnp.mean(x, axis=0))
        return x - self.stat.get()
