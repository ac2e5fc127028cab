"""Small layers whose effects are declared with effax.uses."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx

from .effects import acts, dropout, running, steps, temperature, training


def init_mlp(key: jax.Array, d_in: int, d_hidden: int, d_out: int) -> dict[str, jax.Array]:
    """Parameters of a two-layer perceptron (pure: no effects)."""
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (d_in, d_hidden)) / jnp.sqrt(d_in),
        "b1": jnp.zeros(d_hidden),
        "w2": jax.random.normal(k2, (d_hidden, d_out)) / jnp.sqrt(d_hidden),
        "b2": jnp.zeros(d_out),
    }


@fx.uses(acts)
def dense(x: jax.Array, w: jax.Array, b: jax.Array, name: str) -> jax.Array:
    return acts.tap(name, jnp.tanh(x @ w + b))


@fx.uses(dropout, training)
def maybe_dropout(x: jax.Array, rate: float = 0.1) -> jax.Array:
    if not training.ask():
        return x
    keep = jax.random.bernoulli(dropout.next_key(), 1 - rate, x.shape)
    return jnp.where(keep, x / (1 - rate), 0.0)


@fx.uses(acts, dropout, training)
def mlp(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    h = dense(x, params["w1"], params["b1"], "mlp/hidden")
    h = maybe_dropout(h)
    return h @ params["w2"] + params["b2"]


@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x / temperature.ask()


@fx.uses(steps)
def tick() -> jax.Array:
    return steps.modify(lambda n: n + 1)


@fx.uses(running)
def normalise(name: str, x: jax.Array) -> jax.Array:
    mean = running.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1]))
    running.set(f"{name}/mean", 0.9 * mean + 0.1 * jax.lax.stop_gradient(jnp.mean(x, axis=0)))
    return x - mean


class Dense:
    """A layer object: its call taps its output."""

    def __init__(self, w: jax.Array, b: jax.Array, name: str) -> None:
        self.w = w
        self.b = b
        self.name = name

    @fx.uses(acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        return acts.tap(self.name, jnp.tanh(x @ self.w + self.b))
