"""Cross-module cases: what `xmod.lib` declares, used from here."""

import effax as fx
import xmod.lib as lib
from xmod.lib import ROW, RNG_ROW, Gauge, double, events, keyed_double, loud, steps, temperature, tick, warm, work

# case: a partial made in another module performs its function's row
@fx.uses()
def partial_outside() -> float:
    first = double(1.0)  # E: effax-undeclared: "double" performs effect "temperature"
    return first + lib.keyed_double(x=1.0)  # E: effax-undeclared: "keyed_double" performs effect "temperature"


# case: a partial made in another module, in the row
@fx.uses(temperature)
def partial_inside() -> float:
    return double(1.0) + keyed_double(x=1.0)


# case: a row spread from a tuple made in another module
@fx.uses(*ROW)
def spread_row() -> float:
    return temperature.ask() + steps.get() + lib.double(3.0)


# case: a row spread from a tuple made in another module misses an effect
@fx.uses(*lib.ROW)
def spread_row_missing() -> float:
    work()  # E: effax-undeclared: "work" performs effect "events"
    return float(fx.random.normal(()))  # E: effax-undeclared: Effect "rng"


# case: two spread rows
@fx.uses(*ROW, *RNG_ROW)
def two_spread_rows() -> float:
    return temperature.ask() + float(lib.dropout.next_key()[0])


# case: a user-defined effect's operations and rowed functions, from another module
@fx.uses()
def user_effect_outside() -> None:
    events.tick()  # E: effax-undeclared: Effect "events"
    events.tick_twice()  # E: effax-undeclared: Effect "events"
    work()  # E: effax-undeclared: "work" performs effect "events"
    events.describe()  # not an operation


# case: a user-defined effect in the row
@fx.uses(events)
def user_effect_inside() -> None:
    events.tick()
    lib.events.tick_twice()
    work()


# case: a user-defined effect handled by its own handler maker
@fx.uses()
def user_effect_handled() -> None:
    with events.tally():
        events.tick()
        work()
    with lib.loud.tally():
        loud.shout()
    loud.shout()  # E: effax-undeclared: Effect "loud"


# case: an overloaded function from another module
@fx.uses()
def overload_outside() -> float:
    first = tick(1)  # E: effax-undeclared: "tick" performs effect "steps"
    second = lib.tick(2.0)  # E: effax-undeclared: "tick" performs effect "steps"
    return first + second + lib.fast_tick(3)  # E: effax-undeclared: "fast_tick" performs effect "steps"


# case: a property with a row from another module
@fx.uses()
def property_outside(gauge: Gauge) -> float:
    return gauge.reading  # E: effax-undeclared: "reading" performs effect "temperature"


# case: a property without a row, and one handled
@fx.uses()
def property_handled(gauge: lib.Gauge) -> float:
    with temperature.provide(1.0):
        value = gauge.reading
    return value + len(gauge.label)


# case: a rowed lambda from another module
@fx.uses()
def rowed_lambda() -> float:
    return float(warm(1.0))  # E: effax-undeclared: "warm" performs effect "temperature"


# case: a lambda kept in another module's variable is not seen (docs/typing.md)
@fx.uses()
def lambda_elsewhere() -> int:
    return lib.bump()  # limit: it performs "steps", which no row here names


# case: module-level uses of what another module made
double(1.0)  # E: effax-unhandled: "double" performs effect "temperature"
events.tick()  # E: effax-unhandled: Effect "events"
Gauge().reading  # E: effax-unhandled: "reading" performs effect "temperature"
with temperature.provide(1.0), events.tally(), steps.init(0):
    double(1.0)
    events.tick()
    tick(1)
    Gauge().reading
