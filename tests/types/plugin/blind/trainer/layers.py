"""Equinox layers whose calls perform the trainer's effects."""

from __future__ import annotations

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx

from .effects import MODEL_ROW, calls, dropout_key, learning_rate, losses, training


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout_key.next_key(), 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class MLP(eqx.Module):
    hidden: eqx.nn.Linear
    dropout: Dropout
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(3, 16, key=k1)
        self.dropout = Dropout(0.1)
        self.out = eqx.nn.Linear(16, 1, key=k2)

    @fx.uses(*MODEL_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.dropout(jnp.tanh(self.hidden(x))))[0]

    @classmethod
    @fx.uses(*MODEL_ROW)
    def smoke_test(cls, key: jax.Array) -> jax.Array:
        return cls(key)(jnp.zeros(3))


class Optimizer:
    def __init__(self, momentum: float) -> None:
        self.momentum = momentum

    @property
    @fx.uses(learning_rate)
    def step_size(self) -> jax.Array:
        return learning_rate.ask() * (1.0 - self.momentum)


@fx.uses(*MODEL_ROW, calls, losses)
def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    calls.modify(lambda n: n + 1)
    pred = fx.vmap(model, keys="split")(x)
    loss = jnp.mean((pred - y) ** 2)
    losses.emit(jax.lax.stop_gradient(loss))
    return loss


@fx.uses(*MODEL_ROW)
def predict(model: MLP, x: jax.Array, *, temperature: float = 1.0) -> jax.Array:
    return fx.vmap(model, keys="split")(x) / temperature


sharp_predict = ft.partial(predict, temperature=0.5)
evaluate = fx.handle(predict, training.provide(False))
fast_loss = fx.jit(loss_fn)
