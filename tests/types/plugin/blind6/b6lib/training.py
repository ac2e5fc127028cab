"""Training steps over `State` cells, with optax."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b6lib.effects import (
    TRAIN_ROW,
    learning_rate,
    losses,
    metrics,
    opt_state,
    params,
    running_loss,
    steps,
    weight_decay,
)
from b6lib.layers import l2_penalty

Params = dict[str, jax.Array]


def init_params(key: jax.Array, n_in: int = 3, n_out: int = 1) -> Params:
    k1, _ = jax.random.split(key)
    return {"w": 0.1 * jax.random.normal(k1, (n_in, n_out)), "b": jnp.zeros(n_out)}


def mse(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)


def make_optimizer() -> optax.GradientTransformation:
    return optax.sgd(0.1)


OPTIMIZER = make_optimizer()


@fx.uses(*TRAIN_ROW)
def sgd_step(x: jax.Array, y: jax.Array) -> jax.Array:
    p = params.get()
    loss, grads = jax.value_and_grad(mse)(p, x, y)
    updates, new_state = OPTIMIZER.update(grads, opt_state.get(), p)
    updates = jax.tree.map(lambda u: learning_rate.ask() * u * 10.0, updates)
    params.set(optax.apply_updates(p, updates))
    opt_state.set(new_state)
    losses.emit(loss)
    return loss  # E: no-any-return


@fx.uses(*TRAIN_ROW, steps)
def counted_step(x: jax.Array, y: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return sgd_step(x, y)


@fx.uses(params, metrics)
def evaluate(x: jax.Array, y: jax.Array) -> jax.Array:
    loss = mse(params.get(), x, y)
    metrics.emit({"eval_loss": loss})
    return loss


@fx.uses(params, weight_decay)
def regularised(x: jax.Array, y: jax.Array) -> jax.Array:
    p = params.get()
    return mse(p, x, y) + l2_penalty(p)


@fx.uses(running_loss)
def track(loss: jax.Array) -> None:
    running_loss.modify(lambda r: 0.9 * r + 0.1 * loss)  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value


def handlers_for(p: Params) -> fx.Handlers:
    """Every handler `sgd_step` needs, fresh."""
    return fx.handlers(
        params.init(p),
        opt_state.init(OPTIMIZER.init(p)),
        learning_rate.provide(jnp.float32(0.01)),
        losses.collect(),
    )


def run_steps(step: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, y: jax.Array, n: int) -> list[float]:
    return [float(step(x, y)) for _ in range(n)]


def data(n: int = 16, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    kx, kn = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (n, 3))
    y = x @ jnp.array([[1.0], [-2.0], [0.5]]) + 0.01 * jax.random.normal(kn, (n, 1))
    return x, y
