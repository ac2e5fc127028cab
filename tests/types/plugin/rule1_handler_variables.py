"""Rule 1 (round 4): handlers and handled functions held in variables, as the code
around them binds them: a spread of handlers given to `effax.handle` and kept in a
variable, a variable rebound to another effect's handler, tuple-unpacked handlers."""

import effax as fx
from mylib import scaled, steps, temperature

other = fx.Ask[float]("other")
cells = (steps.init(0),)
both = (steps.init(0), temperature.provide(1.0))


@fx.uses(temperature, steps)
def counted(x: float) -> float:
    steps.modify(lambda n: n + 1)
    return scaled(x)


# case: a handled function of a spread, kept in a variable at module level
partly = fx.handle(counted, *cells)
partly(1.0)  # E: effax-unhandled: "partly" performs effect "temperature"
wholly = fx.handle(counted, *both)
wholly(1.0)
with temperature.provide(2.0):
    partly(1.0)


# case: a handled function of a spread, kept in a variable in a function
@fx.uses()
def spread_in_a_function() -> float:
    kept = fx.handle(counted, *cells)
    return kept(1.0)  # E: effax-undeclared: "kept" performs effect "temperature"


# case: a handled function with an interceptor, kept in a variable
doubled = fx.handle(scaled, fx.intercept(temperature, ask=lambda outer: 2 * outer.ask()))
doubled(1.0)  # E: effax-unhandled: "doubled" performs effect "temperature"
with temperature.provide(2.0):
    doubled(1.0)


# case: a handled function with a spread and an interceptor, in a function
@fx.uses(temperature)
def spread_and_interceptor() -> float:
    kept = fx.handle(counted, *cells, fx.intercept(temperature, ask=lambda outer: 2 * outer.ask()))
    return kept(1.0)


# case: a handler variable rebound to another effect's handler, in a function
@fx.uses()
def rebound() -> float:
    h = temperature.provide(1.0)
    with h:
        first = scaled(1.0)
    h = other.provide(2.0)
    with h:
        return first + scaled(1.0)  # E: effax-undeclared: "scaled" performs effect "temperature"


# case: a handler variable rebound at module level
handler = temperature.provide(1.0)
with handler:
    scaled(1.0)
handler = other.provide(2.0)
with handler:
    scaled(1.0)  # E: effax-unhandled
handler = temperature.provide(3.0)
with handler:
    scaled(1.0)


# case: a handler variable rebound at module level, used in a function
@fx.uses()
def reads_a_rebound_module_variable() -> float:
    with handler:
        return scaled(1.0)  # silent: which value it holds depends on when this runs


# case: tuple-unpacked handlers
h_t, h_s = temperature.provide(1.0), steps.init(0)
with h_s:
    counted(1.0)  # E: effax-unhandled: "counted" performs effect "temperature"
with h_t, h_s:
    counted(1.0)


# case: tuple-unpacked handlers in a function
@fx.uses()
def unpacked() -> float:
    h_a, h_b = steps.init(0), temperature.provide(1.0)
    with h_a:
        return counted(1.0)  # E: effax-undeclared: "counted" performs effect "temperature"


# case: tuple-unpacked handlers in a function, all installed
@fx.uses()
def unpacked_and_installed() -> float:
    [h_a, h_b] = [steps.init(0), temperature.provide(1.0)]
    with h_b, h_a:
        return counted(1.0)


# case: unpacked from a value the plugin cannot split: silent
@fx.uses()
def unpacked_from_a_call() -> float:
    h_a, h_b = make_pair()
    with h_a:
        return counted(1.0)


def make_pair() -> tuple[fx.Provider[float], fx.StateCell[int]]:
    return temperature.provide(1.0), steps.init(0)
