"""Loss, a scheduled SGD optimiser and the training step for mlkit models."""

from __future__ import annotations

import functools as ft

import jax
import jax.numpy as jnp

import effax as fx

from .effects import (
    STEP_ROW,
    dropout_key,
    forward_calls,
    learning_rate,
    loss_log,
    lr_now,
    training,
    weight_decay,
)
from .layers import MLP


@fx.uses(training, dropout_key, forward_calls, weight_decay)
def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    pred = fx.vmap(model, keys="split")(x)
    l2 = jnp.sum(model.hidden.weight**2)
    return jnp.mean((pred - y) ** 2) + weight_decay.ask() * l2


@fx.uses(learning_rate)
def base_lr() -> jax.Array:
    """The configured learning rate, as the schedule's starting value."""
    return jnp.asarray(learning_rate.ask(), dtype=jnp.float32)


@fx.uses(lr_now)
def sgd_update(model: MLP, grads: MLP) -> MLP:
    lr = lr_now.modify(lambda v: v * 0.999)
    new_model: MLP = jax.tree.map(lambda p, g: p - lr * g, model, grads)
    return new_model


@fx.uses(*STEP_ROW, weight_decay)
def train_step(model: MLP, x: jax.Array, y: jax.Array) -> MLP:
    loss, grads = fx.value_and_grad(loss_fn)(model, x, y)
    loss_log.emit(loss)
    return sgd_update(model, grads)


@fx.uses(training, dropout_key, forward_calls)
def predict(model: MLP, x: jax.Array, *, batched: bool) -> jax.Array:
    if batched:
        return fx.vmap(model, keys="split")(x)
    return model(x)


predict_batch = ft.partial(predict, batched=True)
compiled_step = fx.jit(train_step)
