"""Rule 1: an interceptor (`effax.intercept`) handles its effect only over a
handler of it outside; a forwarding handler alone is not a handler."""

import effax as fx
from mylib import log, steps, temperature

half = fx.intercept(log, emit=lambda outer, v: outer.emit(0.5 * v))
hotter = fx.intercept(temperature, ask=lambda outer: 2 * outer.ask())


# case: an interceptor inside a handler of its effect
@fx.uses()
def over_a_collector() -> None:
    with log.collect(), fx.intercept(log, emit=lambda outer, v: outer.emit(v + 1)):
        log.emit(1.0)


# case: an interceptor alone does not handle its effect
@fx.uses()
def alone() -> None:
    with fx.intercept(log, emit=lambda outer, v: outer.emit(v + 1)):
        log.emit(1.0)  # E: effax-undeclared: Effect "log" is neither in the effect row


# case: a variable holding an interceptor
@fx.uses()
def held() -> float:
    with temperature.provide(1.0), hotter:
        return temperature.ask()


# case: a variable holding an interceptor, alone
@fx.uses()
def held_alone() -> float:
    with hotter:
        return temperature.ask()  # E: effax-undeclared: Effect "temperature" is neither in the effect row


# case: in a bundle, after the handler it forwards to
@fx.uses()
def bundled() -> None:
    with fx.handlers(log.collect(), half, steps.init(0)):
        log.emit(1.0)
        steps.set(1)


# case: in a bundle without a handler of its effect
@fx.uses()
def bundled_alone() -> None:
    with fx.handlers(half, steps.init(0)):
        steps.set(1)
        log.emit(1.0)  # E: effax-undeclared: Effect "log" is neither in the effect row


# case: an interceptor whose outer handler is declared by the row
@fx.uses(log)
def forwarded_to_the_caller() -> None:
    with half:
        log.emit(1.0)


# case: at module level
with log.collect(), half:
    log.emit(2.0)
with half:
    log.emit(2.0)  # E: effax-unhandled: Effect "log" is performed at module level


# case: an interceptor's function is handler code: it runs where the interceptor is installed, under the handlers outside it, not checked where it is written
counting = fx.intercept(log, emit=lambda outer, v: (steps.modify(lambda n: n + 1), outer.emit(v))[1])
with steps.init(0), log.collect(), counting:
    log.emit(1.0)


# case: the same inside a function with a row: its row is what is outside the interceptor (round 4; silent before)
@fx.uses(log)
def counted() -> None:
    with fx.intercept(log, emit=lambda outer, v: (steps.set(1), outer.emit(v))[1]):
        log.emit(1.0)  # E: effax-undeclared: "effax.intercept(...)" performs effect "steps"


# case: the same inside a function whose row holds what the interceptor performs
@fx.uses(log, steps)
def counted_in_the_row() -> None:
    with fx.intercept(log, emit=lambda outer, v: (steps.set(1), outer.emit(v))[1]):
        log.emit(1.0)
