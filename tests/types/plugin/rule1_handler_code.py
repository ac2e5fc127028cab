"""Rule 1 (round 4): an interceptor's functions are handler code. They run where the
interceptor is installed, under the handlers outside it (and the row of the function
installing it), not under the performer's row; an interceptor whose function never
calls `outer` answers its operation by itself; one that forwards to a missing handler
of an `Ask` declared with a default raises (the default answers only where no handler
of it is installed at all)."""

import jax
import jax.numpy as jnp

import effax as fx
from mylib import log, scaled, steps, temperature

chatty = fx.Ask[float]("chatty", default=0.5)


def counting(outer: fx.Provider[float]) -> float:
    steps.modify(lambda n: n + 1)
    return outer.ask()


@fx.uses(steps)
def counting_with_a_row(outer: fx.Provider[float]) -> float:
    steps.modify(lambda n: n + 1)
    return outer.ask()


counted = fx.intercept(temperature, ask=counting)


# case: an interceptor's lambda performs an effect handled outside it
with steps.init(0), temperature.provide(1.0):
    with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.modify(lambda n: n + 1)):
        scaled(2.0)


# case: an interceptor's lambda performs an effect no handler outside it handles
with temperature.provide(1.0):
    with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.get()):
        scaled(2.0)  # E: effax-unhandled: "steps"


# case: the handler is inside the interceptor, not outside it
with temperature.provide(1.0):
    with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.get()):
        with steps.init(0):
            scaled(2.0)  # E: effax-unhandled


# case: a function of the module as an interceptor's function, outside a handler
with temperature.provide(1.0), counted:
    scaled(2.0)  # E: effax-unhandled: "steps"


# case: a function of the module as an interceptor's function, under its handler
with steps.init(0), temperature.provide(1.0), counted:
    scaled(2.0)


# case: a function with a row as an interceptor's function
with temperature.provide(1.0), fx.intercept(temperature, ask=counting_with_a_row):
    scaled(2.0)  # E: effax-unhandled


# case: installed inside a function with a row: its row is what is outside
@fx.uses(temperature)
def installs_inside() -> float:
    with counted:
        return scaled(2.0)  # E: effax-undeclared: "steps"


# case: installed inside a function whose row holds what its code performs
@fx.uses(temperature, steps)
def installs_inside_with_the_row() -> float:
    with counted:
        return scaled(2.0)


# case: the performer's row does not cover the handler code: the installer's does
@fx.uses(temperature)
def performer(x: float) -> float:
    return x * temperature.ask()


@fx.uses(temperature, steps)
def installer() -> float:
    with fx.intercept(temperature, ask=counting):
        return performer(2.0)


# case: in a bundle, handlers before the interceptor are outside it
with temperature.provide(1.0), fx.handlers(steps.init(0), counted):
    scaled(2.0)
with temperature.provide(1.0), fx.handlers(counted, steps.init(0)):
    scaled(2.0)  # E: effax-unhandled


# case: given to effax.handle: its code runs where the handled function is called
fx.handle(scaled, temperature.provide(1.0), counted)(2.0)  # E: effax-unhandled: "steps"
with steps.init(0):
    fx.handle(scaled, temperature.provide(1.0), counted)(2.0)
    fx.handle(scaled, temperature.provide(1.0), steps.init(0), counted)(2.0)


# case: an Interceptor held in a variable inside a function
@fx.uses(temperature)
def held_in_a_variable() -> float:
    counter = fx.intercept(temperature, ask=lambda outer: outer.ask() * steps.get())
    with counter:
        return scaled(2.0)  # E: effax-undeclared


# case: an interceptor of an Ask with a default and no handler outside it
with fx.intercept(chatty, ask=lambda outer: 2 * outer.ask()):
    chatty.ask()  # E: effax-unhandled: Effect "chatty" is performed at module level


# case: an interceptor of an Ask with a default, through a compiled call
with fx.intercept(chatty, ask=lambda outer: 2 * outer.ask()):
    fx.jit(fx.uses(chatty)(lambda: chatty.ask()))()  # E: effax-unhandled


# case: an interceptor of an Ask with a default over a handler of it
with chatty.provide(1.0), fx.intercept(chatty, ask=lambda outer: 2 * outer.ask()):
    chatty.ask()


# case: an Ask with a default and no interceptor needs no handler
chatty.ask()
with fx.intercept(temperature, ask=lambda outer: 2 * outer.ask()), temperature.provide(1.0):
    chatty.ask()


# case: an interceptor whose function never calls outer answers by itself
with fx.intercept(temperature, ask=lambda outer: 3.0):
    scaled(2.0)
with fx.intercept(chatty, ask=lambda outer: 3.0):
    chatty.ask()
with fx.intercept(log, emit=lambda outer, v: None):
    log.emit(1.0)


# case: an interceptor that answers some operations by itself handles its effect
# (run time: `get` is answered with no State outside; rows name effects, not
# operations, so the `set` it forwards to nothing is not seen: docs/typing.md)
with fx.intercept(steps, get=lambda outer: 3):
    steps.get()
with fx.intercept(steps, get=lambda outer: 3):
    steps.set(2)  # limit: a forwarded operation of an effect the interceptor answers in part
with fx.intercept(steps, get=lambda outer: 3, set=lambda outer, v: None, modify=lambda outer, f: 3):
    steps.get()


# case: an Interceptor subclass answering one operation by itself handles its effect too
# (blind6: `get` overridden without `self.outer()`, `set` and `modify` inherited)
class FreeSteps(fx.Interceptor[fx.State[int]]):
    def get(self) -> int:
        return 0


with FreeSteps(steps, ()):
    steps.get()


# case: one that answers none of them by itself forwards them all
with fx.intercept(steps, get=lambda outer: outer.get() + 1):
    steps.get()  # E: effax-unhandled
with steps.init(0), fx.intercept(steps, get=lambda outer: outer.get() + 1):
    steps.get()


# case: inside a jit region, handler code still runs at its installation
@fx.jit
@fx.uses(temperature)
def compiled(x: jax.Array) -> jax.Array:
    with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.get()):
        return x * temperature.ask()  # E: effax-undeclared: "steps"


with temperature.provide(1.0), steps.init(0):
    compiled(jnp.ones(2))


# case: an Interceptor subclass's operations are handler code too
class Counting(fx.Interceptor[fx.Ask[float]]):
    def ask(self) -> float:
        steps.modify(lambda n: n + 1)
        outer = self.outer()
        assert isinstance(outer, fx.Provider)
        return float(outer.ask())


with temperature.provide(1.0), Counting(temperature, ()):
    scaled(1.0)  # E: effax-unhandled: "Counting(...)" performs effect "steps"
with steps.init(0), temperature.provide(1.0), Counting(temperature, ()):
    scaled(1.0)


@fx.uses(temperature)
def installs_a_subclass() -> float:
    counting = Counting(temperature, ())
    with counting:
        return scaled(1.0)  # E: effax-undeclared: "counting" performs effect "steps"


# case: an Interceptor subclass forwards: alone it handles nothing, unless it answers alone
class Doubling(fx.Interceptor[fx.Ask[float]]):
    def ask(self) -> float:
        outer = self.outer()
        assert isinstance(outer, fx.Provider)
        return 2 * float(outer.ask())


class Constant(fx.Interceptor[fx.Ask[float]]):
    def ask(self) -> float:
        return 3.0


with Doubling(temperature, ()):
    scaled(1.0)  # E: effax-unhandled: "scaled" performs effect "temperature"
with temperature.provide(1.0), Doubling(temperature, ()):
    scaled(1.0)
with Constant(temperature, ()):
    scaled(1.0)
doubling = Doubling(chatty, ())
with doubling:
    chatty.ask()  # E: effax-unhandled: Effect "chatty"


# case: an interceptor's code runs only where an operation it intercepts reaches it
with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.get()):
    nothing_performed = 1.0
with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.get()):
    with temperature.provide(1.0):
        scaled(2.0)  # the provider inside answers: the interceptor's code does not run
with fx.intercept(temperature, ask=lambda outer: outer.ask() + steps.get()), temperature.provide(1.0):
    steps.init(0)
