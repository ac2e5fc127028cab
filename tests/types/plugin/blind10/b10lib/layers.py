"""Small layers with effect rows, used from the programs."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import (
    acts,
    bn_stats,
    dropout,
    eps,
    init_key,
    losses,
    noise,
    step_count,
    temperature,
    training,
)


@fx.uses(init_key)
def dense_init(n_in: int, n_out: int) -> dict[str, jax.Array]:
    w = jax.random.normal(init_key.next_key(), (n_in, n_out)) / jnp.sqrt(n_in)
    return {"w": w, "b": jnp.zeros(n_out)}


@fx.uses()
def dense(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return x @ p["w"] + p["b"]


@fx.uses(training, dropout)
def drop(x: jax.Array, rate: float = 0.1) -> jax.Array:
    if training.ask():
        keep = jax.random.bernoulli(dropout.next_key(), 1 - rate, x.shape)
        return jnp.where(keep, x / (1 - rate), 0.0)
    return x


@fx.uses(temperature)
def tempered_softmax(logits: jax.Array) -> jax.Array:
    return jax.nn.softmax(logits / temperature.ask(), axis=-1)


@fx.uses(step_count)
def tick() -> jax.Array:
    return step_count.modify(lambda n: n + 1)


@fx.uses(bn_stats, eps)
def batch_norm(name: str, x: jax.Array) -> jax.Array:
    mean = bn_stats.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1]))
    var = bn_stats.get(f"{name}/var", init=lambda: jnp.ones(x.shape[-1]))
    m = jnp.mean(x, axis=0)
    v = jnp.var(x, axis=0)
    bn_stats.set(f"{name}/mean", 0.9 * mean + 0.1 * jax.lax.stop_gradient(m))
    bn_stats.set(f"{name}/var", 0.9 * var + 0.1 * jax.lax.stop_gradient(v))
    return (x - m) / jnp.sqrt(v + eps.ask())


@fx.uses(acts)
def tapped_mlp(p1: dict[str, jax.Array], p2: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    h = acts.tap("mlp/hidden", jnp.tanh(dense(p1, x)))
    return acts.tap("mlp/out", dense(p2, h))


@fx.uses(losses)
def report_loss(value: jax.Array) -> jax.Array:
    losses.emit(value)
    return value


@fx.uses(noise)
def jitter(x: jax.Array, sigma: float = 0.01) -> jax.Array:
    return x + sigma * fx.random.normal(x.shape, stream=noise)


class Linear:
    """A linear layer whose constructor draws its weights."""

    @fx.uses(init_key)
    def __init__(self, n_in: int, n_out: int) -> None:
        self.p = dense_init(n_in, n_out)

    @fx.uses()
    def __call__(self, x: jax.Array) -> jax.Array:
        return dense(self.p, x)

    @property
    @fx.uses(temperature)
    def scaled_weight(self) -> jax.Array:
        return self.p["w"] / temperature.ask()


class Block:
    """Linear, dropout and a step counter."""

    @fx.uses(init_key)
    def __init__(self, dim: int) -> None:
        self.lin = Linear(dim, dim)

    @fx.uses(training, dropout, step_count)
    def __call__(self, x: jax.Array) -> jax.Array:
        tick()
        return drop(jax.nn.relu(self.lin(x)))
