"""Training steps with declared rows."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx

from .effects import TRAIN_ROW, ema, losses, lr, metrics, step_count, weight_decay


def mse(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ w - y) ** 2)


@fx.uses(*TRAIN_ROW)
def sgd_step(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, g = jax.value_and_grad(mse)(w, x, y)
    step_count.modify(lambda n: n + 1)
    losses.emit(loss)
    return w - lr.ask() * g  # E: no-any-return


@fx.uses(*TRAIN_ROW, weight_decay)
def decayed_step(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    w = sgd_step(w, x, y)
    return w * (1.0 - weight_decay.ask())


@fx.uses(ema)
def track_ema(value: jax.Array, decay: float = 0.9) -> jax.Array:
    return ema.modify(lambda m: decay * m + (1.0 - decay) * value)


@fx.uses(metrics)
def report(**values: jax.Array) -> None:
    metrics.emit(dict(values))


@fx.uses(*TRAIN_ROW)
def train_epoch(w: jax.Array, xs: jax.Array, ys: jax.Array) -> jax.Array:
    def body(w: jax.Array, batch: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        return sgd_step(w, *batch), None

    w, _ = fx.scan(body, w, (xs, ys))
    return w


compiled_step = fx.jit(sgd_step)
