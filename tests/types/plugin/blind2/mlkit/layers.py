"""Equinox layers that perform effects: dropout keys, a training flag, a call counter."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx

from .effects import LAYER_ROW, dropout_key, forward_calls, training


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(*LAYER_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout_key.next_key(), 1 - self.rate, x.shape)
        return jnp.where(keep, x / (1 - self.rate), 0.0)


class MLP(eqx.Module):
    hidden: eqx.nn.Linear
    dropout: Dropout
    out: eqx.nn.Linear

    def __init__(self, in_size: int, width: int, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(in_size, width, key=k1)
        self.dropout = Dropout(0.1)
        self.out = eqx.nn.Linear(width, 1, key=k2)

    @fx.uses(training, dropout_key, forward_calls)
    def __call__(self, x: jax.Array) -> jax.Array:
        """One example in, one scalar out."""
        forward_calls.modify(lambda n: n + 1)
        h = self.dropout(jax.nn.tanh(self.hidden(x)))
        return self.out(h)[0]
