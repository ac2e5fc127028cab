"""Code using the samplers through a module alias."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
import sampling.lib as lib


# case: rows written with module attributes
@fx.uses(lib.noise, lib.scale)
def two_draws() -> jax.Array:
    return lib.draw((2,)) + lib.draw_scaled((2,))


# case: row tuple from the library
@fx.uses(*lib.ROW)
def fast_two() -> jax.Array:
    return lib.fast_draw((3,)) * 2


# case: handled library function needs what remains
@fx.uses(lib.scale)
def seeded() -> jax.Array:
    return lib.seeded_draw((3,))


# case: library partial within the row
@fx.uses(lib.noise)
def pair() -> list[jax.Array]:
    return lib.draw_pair((4,))


# case: handlers for the library's effects inside
@fx.uses()
def collect_draws() -> list[jax.Array]:
    with fx.handlers(lib.noise.seed(0), lib.scale.provide(jnp.float32(2.0)), lib.draws.collect()) as hs:
        lib.draw_logged((2,))
    return hs[lib.draws]


# case: library handler values of the right kind
@fx.uses()
def good_values() -> float:
    with lib.levels.provide((1, 2, 3)), lib.total.init(0.0) as cell:
        lib.total.modify(lambda t: t + 1.0)
    return cell.value


# case: default rng stream declared through fx.rng
@fx.uses(fx.rng)
def uniform_pair() -> jax.Array:
    return lib.default_draw() + fx.random.normal((2,))


# case: module attribute effect outside the row
@fx.uses(lib.scale)
def draw_missing() -> jax.Array:
    return lib.draw((2,))  # E: effax-undeclared


# case: library row tuple lacks emit
@fx.uses(*lib.ROW)
def logged_missing() -> jax.Array:
    return lib.draw_logged((2,))  # E: effax-undeclared


# case: compiled library function outside the row
@fx.uses(lib.noise)
def fast_missing() -> jax.Array:
    return lib.fast_draw((3,))  # E: effax-undeclared


# case: handled library function still needs the scale
@fx.uses(lib.noise)
def seeded_missing() -> jax.Array:
    return lib.seeded_draw((3,))  # E: effax-undeclared


# case: library partial outside the row
@fx.uses(lib.scale)
def pair_missing() -> list[jax.Array]:
    return lib.draw_pair((4,))  # E: effax-undeclared


# case: library State[float] started from an int
@fx.uses()
def bad_total() -> None:
    with lib.levels.provide(tuple([1, 2])), lib.total.init(1):  # E: effax-handler-type
        pass


# case: default rng draw outside the row
@fx.uses(lib.noise)
def uniform_missing() -> jax.Array:
    return lib.draw((2,)) + fx.random.normal((2,))  # E: effax-undeclared


# case: sampler with the library stream, row names only fx.rng
@fx.uses(fx.rng)
def wrong_stream() -> jax.Array:
    return fx.random.normal((2,), stream=lib.noise)  # E: effax-undeclared


# case: emit of the library effect outside the row
@fx.uses(*lib.ROW)
def emit_missing(x: jax.Array) -> None:
    lib.draws.emit(x)  # E: effax-undeclared


# case: library function at module level, half handled
with lib.scale.provide(jnp.float32(1.0)):
    sample_bad = lib.unit_draw((2,))  # E: effax-unhandled

# case: library function at module level, fully handled
with lib.noise.seed(3):
    sample_ok = lib.unit_draw((2,))
