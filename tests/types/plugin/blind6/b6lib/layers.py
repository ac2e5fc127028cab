"""Layers and small model pieces that perform effects, each with its row declared."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx
from b6lib import effects as E
from b6lib.effects import acts, dropout, init_key, temperature


@fx.uses(temperature)
def softmax_t(logits: jax.Array) -> jax.Array:
    return jax.nn.softmax(logits / temperature.ask())


@fx.uses(dropout)
def drop(x: jax.Array, rate: float = 0.1) -> jax.Array:
    keep = jax.random.bernoulli(dropout.next_key(), 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


@fx.uses(init_key)
def glorot(n_in: int, n_out: int) -> jax.Array:
    scale = jnp.sqrt(2.0 / (n_in + n_out))
    return scale * jax.random.normal(init_key.next_key(), (n_in, n_out))


@fx.uses(E.params, acts)
def dense(x: jax.Array, name: str) -> jax.Array:
    p = E.params.get()
    return acts.tap(name, jnp.tanh(x @ p[f"{name}/w"] + p[f"{name}/b"]))


@fx.uses(acts)
def residual_block(h: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
    out = acts.tap("block", jnp.tanh(h @ w))
    return h + out, None


@fx.uses(E.verbose)
def maybe_log(x: jax.Array) -> jax.Array:
    if E.verbose.ask():
        print("activation norm", jnp.linalg.norm(x))
    return x


@fx.uses(E.weight_decay)
def l2_penalty(tree: dict[str, jax.Array]) -> jax.Array:
    return E.weight_decay.ask() * sum((jnp.sum(v**2) for v in jax.tree.leaves(tree)), jnp.float32(0))


@fx.uses(E.losses)
def report(loss: jax.Array) -> jax.Array:
    E.losses.emit(loss)
    return loss


class Dense:
    """A plain-Python layer: built from the init stream, applied with dropout."""

    @fx.uses(init_key)
    def __init__(self, n_in: int, n_out: int) -> None:
        self.w = glorot(n_in, n_out)
        self.b = jnp.zeros(n_out)

    @fx.uses(dropout, acts)
    def __call__(self, x: jax.Array, name: str = "dense") -> jax.Array:
        return acts.tap(name, drop(x @ self.w + self.b))

    @property
    @fx.uses(temperature)
    def sharpness(self) -> jax.Array:
        return 1.0 / temperature.ask()


class Stack:
    """Dense layers applied in turn."""

    @fx.uses(init_key)
    def __init__(self, sizes: Sequence[int]) -> None:
        self.layers = [Dense(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]

    @fx.uses(dropout, acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, layer in enumerate(self.layers):
            x = layer(x, name=f"layer{i}")
        return x


class NoisyLinear(eqx.Module):
    """An Equinox layer that adds noise from the `noise` stream."""

    linear: eqx.nn.Linear
    sigma: float = eqx.field(static=True)

    def __init__(self, n_in: int, n_out: int, sigma: float, *, key: jax.Array) -> None:
        self.linear = eqx.nn.Linear(n_in, n_out, key=key)
        self.sigma = sigma

    @fx.uses(E.noise)
    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.linear(x)
        return y + self.sigma * jax.random.normal(E.noise.next_key(), y.shape)


class Scaled(eqx.Module):
    """An Equinox wrapper: its submodule is an attribute, called Equinox-style."""

    inner: NoisyLinear

    @fx.uses(E.noise, temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.inner(x) / temperature.ask()


hot_softmax = functools.partial(softmax_t)
