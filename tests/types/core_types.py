"""Checked by mypy and by pyright (tests/test_typing.py), never run.

Each `assert_type` pins an inferred type; each `# type: ignore[code]` pins an
error mypy is expected to report, each `# pyright: ignore[rule]` one pyright is
(mypy runs with --warn-unused-ignores and pyright with
reportUnnecessaryTypeIgnoreComment, so an error that goes away fails the check).
"""

import functools as ft
from collections.abc import Callable

import jax
import jax.numpy as jnp
from typing_extensions import assert_type

import effax as fx

temperature = fx.Ask[float]("temperature")
config = fx.Ask[tuple[int, str]]("config", static=True)
counter = fx.State[int]("counter")
params = fx.State[jax.Array]("params")
dropout = fx.RandomKey("dropout")
losses = fx.Emit[jax.Array]("losses")

# operations carry the declared types (under handlers: the mypy plugin checks this
# file too, and an unhandled operation at module level is its `effax-unhandled`)
every_handler = fx.handlers(
    temperature.provide(1.0),
    config.provide((1, "a")),
    counter.init(0),
    dropout.seed(0),
    fx.rng.seed(0),
    losses.collect(),
)
with every_handler:
    assert_type(temperature.ask(), float)
    assert_type(config.ask(), tuple[int, str])
    assert_type(counter.get(), int)
    assert_type(counter.modify(lambda n: n + 1), int)
    assert_type(dropout.next_key(), jax.Array)
    assert_type(fx.random.normal((2,)), jax.Array)
    losses.emit(jnp.ones(()))

    # wrong values are errors
    counter.set("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    temperature.provide("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    counter.init("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    losses.emit("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    counter.modify(lambda n: str(n))  # type: ignore[arg-type, return-value]  # pyright: ignore[reportArgumentType]

# handlers carry the types too
assert_type(temperature.provide(0.5), fx.Provider[float])
assert_type(counter.init(0), fx.StateCell[int])
assert_type(counter.init(0).value, int)
assert_type(losses.collect().values, list[jax.Array])
assert_type(dropout.seed(0), fx.KeyStream)
with fx.handlers(counter.init(0), losses.collect(), temperature.provide(1.0)) as hs:
    assert_type(hs[counter], int)
    assert_type(hs[losses], list[jax.Array])
    assert_type(hs[temperature], float)
    assert_type(hs[dropout], fx.KeyState)


# handle and jit keep fn's parameters and return type
def model(x: jax.Array, *, scale: float = 1.0) -> tuple[jax.Array, int]:
    return x * scale, counter.get()


handled = fx.handle(model, counter.init(0), transform=jax.jit)
assert_type(handled(jnp.ones(2), scale=2.0), tuple[jax.Array, int])
handled("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
handled(jnp.ones(2), scale="big")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
assert_type(fx.jit(model)(jnp.ones(2)), tuple[jax.Array, int])
assert_type(fx.jit(static_argnames="scale")(model)(jnp.ones(2)), tuple[jax.Array, int])
assert_type(
    fx.handle(model, transform=ft.partial(jax.jit, static_argnames="scale"))(jnp.ones(2)),
    tuple[jax.Array, int],
)
fx.handle(model, counter)  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]

# a compiled handled function stages like a jax.jit one, with fn's parameters
assert_type(handled.lower(jnp.ones(2), scale=2.0), jax.stages.Lowered)
assert_type(fx.jit(model).trace(jnp.ones(2)), jax.stages.Traced)
fx.jit(model).lower("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
fx.handle(model).lower(jnp.ones(2))  # type: ignore[attr-defined]
compiled: Callable[[jax.Array], tuple[jax.Array, int]] = fx.jit(model)  # still a callable

# the low-level primitives
x_var = fx.JitAwareContextVar[float]("x")
assert_type(x_var.get(), float)
x_var.set_on_enter("x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
