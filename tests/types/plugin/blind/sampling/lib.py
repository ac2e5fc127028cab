"""Samplers performing a key stream, a scale and an emit."""

from __future__ import annotations

import functools as ft

import jax
import jax.numpy as jnp

import effax as fx

noise = fx.RandomKey("noise")
scale = fx.Ask[jax.Array]("scale")
draws = fx.Emit[jax.Array]("draws")
levels = fx.Ask[tuple[int, ...]]("levels", static=True)
total = fx.State[float]("total")
ROW = (noise, scale)


@fx.uses(noise)
def draw(shape: tuple[int, ...]) -> jax.Array:
    return fx.random.normal(shape, stream=noise)


@fx.uses(*ROW)
def draw_scaled(shape: tuple[int, ...]) -> jax.Array:
    return draw(shape) * scale.ask()


@fx.uses(*ROW, draws)
def draw_logged(shape: tuple[int, ...]) -> jax.Array:
    x = draw_scaled(shape)
    draws.emit(x)
    return x


@fx.uses(noise)
def draw_n(n: int, shape: tuple[int, ...]) -> list[jax.Array]:
    return [draw(shape) for _ in range(n)]


@fx.uses(fx.rng)
def default_draw() -> jax.Array:
    return fx.random.uniform((2,))


draw_pair = ft.partial(draw_n, 2)
fast_draw = fx.jit(draw_scaled, static_argnums=0)
seeded_draw = fx.handle(draw_scaled, noise.seed(0))
unit_draw = fx.handle(draw_scaled, scale.provide(jnp.float32(1.0)))
