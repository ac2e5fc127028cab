"""A library module of the `xmod` package: no cases, mypy must report nothing here."""

import functools
from collections.abc import Callable
from typing import Any, Final, overload

import effax as fx

temperature = fx.Ask[float]("temperature")
steps: Final[fx.State[int]] = fx.State[int]("steps")
dropout = fx.RandomKey("dropout")

ROW = (temperature, steps)  # a row kept in a tuple, for `effax.uses(*ROW)`
RNG_ROW: Final = (dropout,)


@fx.uses(temperature)
def scale(factor: float, x: float) -> float:
    return factor * x * temperature.ask()


double = functools.partial(scale, 2.0)  # performs what `scale` performs
keyed_double = functools.partial(scale, factor=2.0)
warm = fx.uses(temperature)(lambda x: x * temperature.ask())
bump: Callable[[], int] = lambda: steps.get() + 1  # no row: a lambda's type cannot carry one


@overload
def tick(by: int) -> int: ...
@overload
def tick(by: float) -> float: ...
@fx.uses(steps)
def tick(by: float) -> float:
    return steps.get() + by


class Gauge:
    @property
    @fx.uses(temperature)
    def reading(self) -> float:
        return temperature.ask()

    @property
    def label(self) -> str:  # a property without a row
        return "gauge"


class Counter(fx.Effect["Tally"]):
    """A user-defined effect (docs/howto/custom-effects.md)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def tick(self, by: int = 1) -> None:
        tally = self.handler()
        tally.count = tally.count + by

    def tick_twice(self) -> None:  # an operation through another
        self.tick()
        self.tick()

    def describe(self) -> str:  # not an operation: reaches no handler
        return f"counter {self.name}"

    def tally(self) -> "Tally":
        return Tally(self)


class Tally(fx.Handler[Counter]):
    fields = fx.Fields(carry="count")

    def __init__(self, effect: Counter, count: Any = 0) -> None:
        self.effect = effect
        self.count = count

    @property
    def value(self) -> Any:
        return self.count

    @classmethod
    def rebuild(cls, effect: Counter, static: Any, const: Any, carry: Any) -> "Tally":
        return cls(effect, carry)


class LoudCounter(Counter):
    """A subclass: inherits the operations, adds one."""

    def shout(self) -> None:
        self.tick_twice()


events = Counter("events")
loud = LoudCounter("loud")


@fx.uses(events)
def work() -> None:
    events.tick()


fast_tick = fx.jit(tick)  # the row of an overloaded function, through effax.jit
