"""Rule 2: functions made by effax.handle and effax.jit."""

from typing import Any

import jax

import mylib
import effax as fx
from mylib import noisy, scaled, steps, temperature, tick

at_one = fx.handle(scaled, temperature.provide(1.0))
fast = fx.jit(scaled)
fast_noisy_at_one = fx.handle(noisy, temperature.provide(1.0), transform=fx.jit)


def make_handler() -> Any:
    return temperature.provide(2.0)


@fx.jit
@fx.uses(steps)
def jitted_tick() -> int:
    return steps.get()


# case: handlers passed to effax.handle discharge their effects
@fx.uses()
def handled() -> float:
    return at_one(1.0) + mylib.scaled_at_one(2.0)


# case: effax.jit keeps the row
@fx.uses()
def jitted() -> float:
    return fast(1.0)  # E: effax-undeclared: "fast" performs effect "temperature"


# case: a handled function from another module
@fx.uses()
def jitted_elsewhere() -> float:
    return mylib.fast_scaled(1.0)  # E: effax-undeclared: "fast_scaled" performs effect "temperature"


# case: what the handlers do not discharge remains
@fx.uses()
def partly_handled() -> float:
    return fast_noisy_at_one(1.0)  # E: effax-undeclared: "fast_noisy_at_one" performs effect "rng"


# case: a handled function under the handlers it still needs
@fx.uses()
def jitted_under_handler() -> float:
    with temperature.provide(3.0), fx.rng.seed(0):
        return fast(1.0) + fast_noisy_at_one(2.0)


# case: handled functions made inside the function
@fx.uses(temperature)
def local_handles() -> float:
    cell = steps.init(0)
    count = fx.handle(tick, cell)
    fast_tick = fx.jit(tick)
    count()
    fast_tick()  # E: effax-undeclared: "fast_tick" performs effect "steps"
    fx.jit(noisy)(1.0)  # E: effax-undeclared: "effax.jit(...)" performs effect "rng"
    return fx.jit(static_argnames="x")(scaled)(1.0)


# case: a decorated function keeps its row under @effax.jit
@fx.uses()
def calls_decorated() -> int:
    return jitted_tick()  # E: effax-undeclared: "jitted_tick" performs effect "steps"


# case: a handler the plugin cannot read: silent
@fx.uses()
def unknown_handler() -> float:
    return fx.handle(scaled, make_handler())(1.0)


# case: tracing or lowering a compiled function performs its row (its trace looks the handlers up)
@fx.uses()
def lowered_outside() -> None:
    mylib.fast_scaled.lower(1.0)  # E: effax-undeclared: "lower" performs effect "temperature"
    fx.jit(tick).trace()  # E: effax-undeclared: "trace" performs effect "steps"
    with temperature.provide(1.0):
        mylib.fast_scaled.lower(1.0).compile()
    fx.handle(scaled, transform=jax.jit).trace(1.0)  # E: effax-undeclared: performs effect "temperature"


fast_tick = fx.jit(tick)
fast_tick.lower()  # E: effax-unhandled: "lower" performs effect "steps" at module level
with steps.init(0):
    fast_tick.lower()
