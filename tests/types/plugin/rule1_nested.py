"""Rule 1: nested functions, lambdas and nested rows."""

from collections.abc import Callable

import effax as fx
from mylib import scaled, steps, temperature


# case: a nested def counts where it is called
@fx.uses()
def nested_def_called_inside() -> float:
    def body() -> float:
        return temperature.ask() + steps.get()

    with temperature.provide(1.0), steps.init(0):
        return body()


# case: a nested def called outside the handlers
@fx.uses(steps)
def nested_def_called_outside() -> float:
    def body() -> float:
        return temperature.ask() + steps.get()

    with temperature.provide(1.0):
        body()
    return body()  # E: effax-undeclared: "body" performs effect "temperature"


# case: a nested def that handles its own effects
@fx.uses()
def nested_def_handles() -> int:
    def helper() -> int:
        with steps.init(0):
            return steps.get()

    return helper()


# case: a lambda passed to a call counts there
@fx.uses(steps)
def lambda_outside() -> None:
    steps.modify(lambda n: n + int(temperature.ask()))  # E: effax-undeclared: Effect "temperature"
    with temperature.provide(1.0):
        steps.modify(lambda n: n + int(temperature.ask()))


# case: the innermost row governs a nested function's body
@fx.uses(temperature, steps)
def outer_row() -> float:
    @fx.uses(temperature)
    def inner() -> float:
        return temperature.ask() + steps.get()  # E: effax-undeclared: "inner" (effax.uses(temperature))

    return inner() + steps.get()


# case: a nested function's row is checked where it is called
@fx.uses()
def calls_nested_row() -> float:
    @fx.uses(temperature)
    def inner() -> float:
        return scaled(temperature.ask())

    return inner()  # E: effax-undeclared: "inner" performs effect "temperature"


# case: a lambda held in a variable counts where it is called
@fx.uses()
def lambda_variable() -> float:
    read: Callable[[], float] = lambda: temperature.ask()
    with temperature.provide(1.0):
        read()
    return read()  # E: effax-undeclared: "read" performs effect "temperature"


# case: functions kept in a list written in place and read with a number are tracked (round 4; silent before)
@fx.uses()
def lambda_container() -> float:
    readers = [lambda: temperature.ask()]
    return readers[0]()  # E: effax-undeclared: "readers" performs effect "temperature"


def run_with_temperature(f: Callable[[], float]) -> float:
    with temperature.provide(1.0):
        return f()


CALLBACKS: list[Callable[[], float]] = []


def register(f: Callable[[], float]) -> None:
    CALLBACKS.append(f)


# case: a lambda handed to a user function counts where that function calls it
@fx.uses()
def handed_over() -> float:
    register(lambda: temperature.ask())
    return run_with_temperature(lambda: temperature.ask())
