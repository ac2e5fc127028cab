"""Rule 1: calls of functions with a declared row."""

import mylib
import effax as fx
from mylib import noisy, scaled, steps, temperature, tick

# case: a callee's row inside the caller's
@fx.uses(temperature)
def call_within() -> float:
    return scaled(1.0) + mylib.scaled(2.0)


# case: a callee's row outside the caller's
@fx.uses()
def call_outside() -> float:
    return scaled(1.0)  # E: effax-undeclared: "scaled" performs effect "temperature", neither in the effect row of "call_outside" (effax.uses()) nor handled by an enclosing "with"


# case: part of a callee's row outside the caller's
@fx.uses(temperature)
def call_partly_outside() -> float:
    return noisy(1.0)  # E: effax-undeclared: "noisy" performs effect "rng", neither


# case: a callee in another module, through the module
@fx.uses(steps)
def call_module_attribute() -> int:
    return mylib.tick() + tick()


# case: recursion
@fx.uses(steps)
def countdown(n: int) -> int:
    if n:
        return countdown(n - 1)
    return steps.get()


# case: a callee defined further down in this module
@fx.uses()
def call_below() -> int:
    return later()  # E: effax-undeclared: "later" performs effect "steps"


@fx.uses(steps)
def later() -> int:
    return steps.get()


# case: a pure entry point handling what its callees perform
@fx.uses()
def pure_entry() -> float:
    with fx.handlers(temperature.provide(0.5), steps.init(0), fx.rng.seed(0)):
        tick()
        return noisy(scaled(2.0))


# case: a callee with no row is not checked
def no_row() -> int:
    return steps.get()


@fx.uses()
def call_no_row() -> int:
    return no_row()
