"""Flax NNX modules that perform effects. A helper module: no cases, no errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx
import effax.nnx as fxn
from optics.effects import acts, losses, noise, step_count

block_row = (noise, step_count, losses, acts)


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)

    @fx.uses(*block_row)
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.tanh(self.linear(x))
        x = x + 0.01 * jax.random.normal(noise.next_key(), x.shape)
        step_count.modify(lambda n: n + 1)
        losses.emit(jnp.mean(x**2))
        return acts.tap("block", x)


class Stack(nnx.Module):
    """n blocks run by effax.nnx.scan over a stacked module."""

    def __init__(self, dim: int, n_layers: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=n_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs: nnx.Rngs) -> Block:
            return Block(dim, rngs=rngs)

        self.blocks = create(rngs)

    @fx.uses(*block_row)
    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = fxn.scan(lambda c, b: b(c), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, self.blocks)
        return y


class Member(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 1, rngs=rngs)

    @fx.uses(noise)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear(x) + 0.1 * jax.random.normal(noise.next_key(), (x.shape[0], 1))


class Ensemble(nnx.Module):
    def __init__(self, n: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=n)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs: nnx.Rngs) -> Member:
            return Member(rngs=rngs)

        self.members = create(rngs)

    @fx.uses(noise)
    def __call__(self, x: jax.Array) -> jax.Array:
        y: jax.Array = fxn.vmap(lambda m, v: m(v), in_axes=(0, None))(self.members, x)
        return y
