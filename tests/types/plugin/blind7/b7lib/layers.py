"""Small layers that perform effects, each with its row declared."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

import effax as fx

from .effects import MODEL_ROW, acts, bn_stats, dropout_key, init_key, temperature, train_mode


@fx.uses(init_key)
def init_dense(n_in: int, n_out: int) -> dict[str, jax.Array]:
    w = jax.random.normal(init_key.next_key(), (n_in, n_out)) / jnp.sqrt(n_in)
    return {"w": w, "b": jnp.zeros(n_out)}


@fx.uses(acts)
def dense(p: dict[str, jax.Array], x: jax.Array, site: str = "dense") -> jax.Array:
    return acts.tap(site, x @ p["w"] + p["b"])


@fx.uses(train_mode, dropout_key)
def dropout(x: jax.Array, rate: float = 0.1) -> jax.Array:
    if not train_mode.ask():
        return x
    keep = jax.random.bernoulli(dropout_key.next_key(), 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


@fx.uses(*MODEL_ROW)
def block(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return dropout(jax.nn.gelu(dense(p, x, "block")))


@fx.uses(temperature)
def softmax_t(logits: jax.Array) -> jax.Array:
    return jax.nn.softmax(logits / temperature.ask())


@fx.uses(bn_stats)
def batch_norm(name: str, x: jax.Array) -> jax.Array:
    mean = bn_stats.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1]))
    bn_stats.set(f"{name}/mean", 0.9 * mean + 0.1 * jax.lax.stop_gradient(jnp.mean(x, axis=0)))
    return x - mean


@fx.uses(fx.rng)
def jitter(x: jax.Array, scale: float = 0.01) -> jax.Array:
    return x + scale * fx.random.normal(x.shape)


def plain_relu(x: jax.Array) -> jax.Array:
    """No effects: a function without a row."""
    return jax.nn.relu(x)


small_jitter = functools.partial(jitter, scale=0.001)
