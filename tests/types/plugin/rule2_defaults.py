"""Rule 2 (round 4): default values of parameters run where the `def` (or the
`lambda`) runs, not where the function is called."""

from collections.abc import Callable

import effax as fx
from mylib import scaled, steps, temperature


# case: a default value at module level
def with_a_default(x: float = temperature.ask()) -> float:  # E: effax-unhandled: Effect "temperature"
    return x


# case: a default value under a handler at module level
with temperature.provide(1.0):

    def with_a_handled_default(x: float = scaled(1.0)) -> float:
        return x


# case: a decorated function's default runs where it is defined, outside its row
@fx.uses(temperature)
def decorated(x: float = scaled(1.0)) -> float:  # E: effax-unhandled: "scaled" performs effect "temperature"
    return x * temperature.ask()


# case: a default value in a class body
class Model:
    def __call__(self, x: float = steps.get()) -> float:  # E: effax-unhandled: Effect "steps"
        return float(x)

    def keyword_only(self, *, y: int = steps.get()) -> int:  # E: effax-unhandled
        return y


# case: a lambda's default value runs where the lambda is written
lazy = lambda x=temperature.ask(): x  # E: effax-unhandled
with temperature.provide(1.0):
    later = lambda x=temperature.ask(): x


# case: a nested def's default inside a function with a row
@fx.uses()
def builds_a_nested_def() -> float:
    def inner(x: float = temperature.ask()) -> float:  # E: effax-undeclared: Effect "temperature"
        return x

    return inner(1.0)


# case: a nested def's default covered by the row
@fx.uses(temperature)
def builds_a_nested_def_in_its_row() -> float:
    def inner(x: float = temperature.ask()) -> float:
        return x

    return inner()


# case: a nested def's default under a handler of the function's own
@fx.uses()
def builds_under_a_handler() -> float:
    with steps.init(0):

        def inner(x: int = steps.get()) -> int:
            return x

    return float(inner())


# case: a lambda default inside a function with a row
@fx.uses(steps)
def lambda_default() -> float:
    f = lambda x=temperature.ask(): x  # E: effax-undeclared
    callbacks.append(f)
    return 1.0


callbacks: list[object] = []


# case: defaults that perform nothing
def plain(x: float = 1.0, y: tuple[int, ...] = ()) -> float:
    return x + len(y)


# case: a lambda held in a module-level variable, called at module level
ask_later: Callable[[], float] = lambda: temperature.ask()
ask_later()  # E: effax-unhandled: "ask_later" performs effect "temperature"
with temperature.provide(1.0):
    ask_later()


# case: a function read from a list written in place, called at module level
readers = [scaled, scaled]
readers[0](1.0)  # E: effax-unhandled: "readers" performs effect "temperature"
with temperature.provide(1.0):
    readers[1](1.0)
