"""A small training module: rows declared from shared tuples and single effects."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import TRAIN_ROW, dropout, losses, lr, params, steps, training
from b9lib.layers import count, drop, report


@fx.uses(training, dropout)
def forward(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    h = drop(jnp.tanh(x @ p["w"]), 0.2)
    return h @ p["v"]


@fx.uses(training, dropout)
def loss_fn(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((forward(p, x) - y) ** 2)


@fx.uses(*TRAIN_ROW, params, lr, losses)
def sgd_step(x: jax.Array, y: jax.Array) -> jax.Array:
    count()
    value, g = jax.value_and_grad(loss_fn)(params.get(), x, y)
    params.set(jax.tree.map(lambda a, b: a - lr.ask() * b, params.get(), g))
    return report(value)


def init_params(n_in: int, n_hidden: int) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "w": jax.random.normal(k1, (n_in, n_hidden)) * 0.3,
        "v": jax.random.normal(k2, (n_hidden, 1)) * 0.3,
    }


@fx.uses(steps)
def bump_twice() -> jax.Array:
    steps.modify(lambda n: n + 1)
    return steps.modify(lambda n: n + 1)
