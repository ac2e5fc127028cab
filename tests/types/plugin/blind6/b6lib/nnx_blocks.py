"""Flax NNX modules whose calls perform effects."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx
from b6lib.effects import acts, noise, steps, temperature

BLOCK_ROW = (noise, steps, acts)


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.norm = nnx.LayerNorm(dim, rngs=rngs)

    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.gelu(self.norm(self.linear(x)))
        h = h + 0.01 * jax.random.normal(noise.next_key(), h.shape)
        steps.modify(lambda n: n + 1)
        return acts.tap("block", h)


class Head(nnx.Module):
    def __init__(self, dim: int, classes: int, *, rngs: nnx.Rngs) -> None:
        self.out = nnx.Linear(dim, classes, rngs=rngs)

    @fx.uses(temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(x) / temperature.ask()


def make_stack(dim: int, layers: int, seed: int = 0) -> Block:
    @nnx.split_rngs(splits=layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(rngs: nnx.Rngs) -> Block:
        return Block(dim, rngs=rngs)

    stack: Block = create(nnx.Rngs(seed))
    return stack


def batch(n: int = 4, dim: int = 6, seed: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (n, dim))


def zeros_count() -> jax.Array:
    return jnp.int32(0)  # E: no-any-return
