"""Training utilities shared by the programs: losses and updates with declared rows."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx

from .effects import acts, dropout, learning_rate, losses, steps, training
from .layers import mlp


@fx.uses(dropout, training, losses)
def mse_loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    with acts.ignore():
        pred = mlp(params, x)
    loss = jnp.mean((pred - y) ** 2)
    losses.emit(jax.lax.stop_gradient(loss))
    return loss


@fx.uses(learning_rate, steps)
def sgd(params: dict[str, jax.Array], grads: dict[str, jax.Array]) -> dict[str, jax.Array]:
    steps.modify(lambda n: n + 1)
    lr = learning_rate.ask()
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)  # E: no-any-return


@fx.uses(dropout, training, losses, learning_rate, steps)
def train_step(
    params: dict[str, jax.Array], x: jax.Array, y: jax.Array
) -> dict[str, jax.Array]:
    grads = jax.grad(mse_loss)(params, x, y)
    return sgd(params, grads)


def regression_data(n: int = 16, d: int = 3) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(0), (n, d))
    y = jnp.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    return x, y
