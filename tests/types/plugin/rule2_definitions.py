"""Rules 1 and 2 through overloads, properties and class bodies."""

from typing import overload

from mylib import steps, temperature

import effax as fx


@overload
def scaled(x: int) -> float: ...
@overload
def scaled(x: float) -> float: ...
@fx.uses(temperature)
def scaled(x: float) -> float:
    return x * temperature.ask()


class Model:
    @overload
    def apply(self, x: int) -> float: ...
    @overload
    def apply(self, x: float) -> float: ...
    @fx.uses(temperature)
    def apply(self, x: float) -> float:
        return x * temperature.ask()

    @property
    @fx.uses(steps)
    def step(self) -> int:
        return steps.get()


# case: an overload's implementation body is checked against its row
@overload
def leaky(x: int) -> int: ...
@overload
def leaky(x: float) -> float: ...
@fx.uses(temperature)
def leaky(x: float) -> float:
    return x * steps.get()  # E: effax-undeclared: Effect "steps" is neither in the effect row of "leaky"


# case: calling an overloaded function performs its implementation's row
@fx.uses()
def call_overload(model: Model) -> float:
    first = scaled(1)  # E: effax-undeclared: "scaled" performs effect "temperature"
    return first + model.apply(2.0)  # E: effax-undeclared: "apply" performs effect "temperature"


# case: an overloaded function within the row
@fx.uses(temperature)
def call_overload_in_row(model: Model) -> float:
    return scaled(1) + model.apply(2.0)


# case: a property read at module level
model = Model()
model.step  # E: effax-unhandled: "step" performs effect "steps" at module level
with steps.init(0):
    count = model.step


# case: an overloaded function at module level
scaled(1.0)  # E: effax-unhandled: "scaled" performs effect "temperature" at module level
with temperature.provide(2.0):
    scaled(1.0)


# case: a class body runs at module level
class Config:
    scale = temperature.ask()  # E: effax-unhandled: Effect "temperature" is performed at module level
    with temperature.provide(1.0):
        fixed = scaled(1.0)

    def method(self) -> float:  # a method's body is not the class body
        return steps.get()


# case: a class body inside a function runs where the function does
@fx.uses(temperature)
def make_class() -> type:
    class Local:
        scale = temperature.ask()
        count = steps.get()  # E: effax-undeclared: Effect "steps"

    return Local


class Noisy:
    @fx.uses(temperature)
    def __init__(self, scale: float) -> None:
        self.scale = scale * temperature.ask()


# case: constructing a class whose __init__ has a row performs it
@fx.uses()
def construct_outside() -> float:
    return Noisy(1.0).scale  # E: effax-undeclared: "Noisy" performs effect "temperature"


# case: constructing within the row, and at module level
@fx.uses(temperature)
def construct_inside() -> float:
    return Noisy(1.0).scale


Noisy(2.0)  # E: effax-unhandled: "Noisy" performs effect "temperature" at module level
with temperature.provide(1.0):
    Noisy(2.0)


# case: calling what a call returns, at module level (no hook sees the outer call)
fx.jit(scaled)(1)  # E: effax-unhandled: "effax.jit(...)" performs effect "temperature"
fx.handle(Model().apply, steps.init(0))(1)  # E: effax-unhandled: performs effect "temperature"
with temperature.provide(1.0):
    fx.jit(scaled)(1)
    fx.handle(Model().apply, steps.init(0))(1)
