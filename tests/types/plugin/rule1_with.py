"""Rule 1: handlers installed by enclosing `with` statements."""

import contextlib
from collections.abc import Iterator

import mylib
import effax as fx
from mylib import COUNTER, dropout, log, scaled, steps, temperature


@contextlib.contextmanager
def my_handlers() -> Iterator[None]:
    with steps.init(0):
        yield


# case: a handler around the operation
@fx.uses()
def provided() -> float:
    with temperature.provide(1.0):
        return temperature.ask()


# case: nested with statements
@fx.uses()
def nested_withs() -> None:
    with temperature.provide(1.0):
        with steps.init(0), dropout.seed(0):
            with log.collect():
                log.emit(temperature.ask())
                steps.set(1)
                dropout.next_key()


# case: after the with block ends
@fx.uses()
def after_with() -> int:
    with steps.init(0):
        steps.set(1)
    return steps.get()  # E: effax-undeclared


# case: effax.handlers
@fx.uses(log)
def combined() -> None:
    with fx.handlers(temperature.provide(1.0), steps.init(0)) as hs:
        steps.set(int(temperature.ask()))
        log.emit(hs[temperature])


# case: handlers held in variables
@fx.uses()
def handler_variables() -> None:
    cell = steps.init(0)
    hs = fx.handlers(temperature.provide(2.0), dropout.seed(1))
    with cell, hs:
        steps.set(int(scaled(1.0)))
        dropout.next_key()
    with mylib.COUNTER, COUNTER:
        steps.get()


# case: a handler of another effect
@fx.uses()
def other_handler() -> int:
    with temperature.provide(1.0):
        return steps.get()  # E: effax-undeclared: Effect "steps"


# case: context managers of the standard library install no handler
@fx.uses()
def foreign_context_manager() -> int:
    with contextlib.suppress(KeyError), open("f") as f:
        f.read()
        return steps.get()  # E: effax-undeclared
    return 0


# case: a context manager of the user's may install handlers: silent
@fx.uses()
def user_context_manager() -> int:
    with my_handlers():
        return steps.get()


# case: handlers installed by hand: silent for the rest of the block
@fx.uses()
def exit_stack() -> int:
    with contextlib.ExitStack() as stack:
        steps.get()  # E: effax-undeclared
        stack.enter_context(steps.init(0))
        return steps.get()


def install(stack: contextlib.ExitStack) -> None:
    stack.enter_context(steps.init(0))


# case: an ExitStack handed to a helper that enters handlers on it
@fx.uses()
def exit_stack_helper() -> int:
    with contextlib.ExitStack() as stack:
        steps.get()  # E: effax-undeclared
        install(stack)
        return steps.get()


# case: a with in one branch does not cover the other
@fx.uses()
def branches(flag: bool) -> int:
    if flag:
        with steps.init(0):
            return steps.get()
    else:
        return steps.get()  # E: effax-undeclared


# case: the handler's own value is evaluated outside it
@fx.uses()
def value_outside() -> None:
    with steps.init(int(temperature.ask())):  # E: effax-undeclared: Effect "temperature"
        pass


# case: emit.discard() installs a handler, as collect() does
@fx.uses()
def discarded() -> None:
    with log.discard():
        log.emit(1.0)


# case: emit.discard() handles its own effect only
@fx.uses()
def discarded_other() -> float:
    with log.discard():
        return temperature.ask()  # E: effax-undeclared


# case: `with a, b:` evaluates b under a (it is `with a: with b:`)
@fx.uses()
def items_in_order() -> float:
    with temperature.provide(1.0), steps.init(int(scaled(1.0))):
        total = scaled(2.0) + steps.get()
    with steps.init(int(scaled(1.0))), temperature.provide(1.0):  # E: effax-undeclared: "scaled" performs effect "temperature"
        total += scaled(2.0)
    return total
