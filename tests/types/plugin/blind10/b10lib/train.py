"""A training module: a loss, an SGD step with a row, and a compiled entry point."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import TRAIN_ROW, dropout, losses, lr, params, step_count, training
from b10lib.layers import dense, drop


@fx.uses(training, dropout)
def mlp_loss(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = drop(jnp.tanh(x @ p["w"] + p["b"]))
    return jnp.mean((jnp.sum(h, axis=-1) - y) ** 2)


@fx.uses(params, lr, training, *TRAIN_ROW)
def sgd_step(x: jax.Array, y: jax.Array) -> jax.Array:
    p = params.get()
    value, g = jax.value_and_grad(mlp_loss)(p, x, y)
    params.set(jax.tree.map(lambda a, b: a - lr.ask() * b, p, g))
    step_count.modify(lambda n: n + 1)
    losses.emit(value)
    return value  # E: no-any-return


compiled_step = fx.jit(sgd_step)


@fx.uses(params)
def predict(x: jax.Array) -> jax.Array:
    return dense(params.get(), x)


def fresh_params(n_in: int = 3, n_out: int = 4) -> dict[str, jax.Array]:
    return {"w": jnp.full((n_in, n_out), 0.1), "b": jnp.zeros(n_out)}
