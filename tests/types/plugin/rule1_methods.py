"""Rule 1: methods of classes."""

import effax as fx
from mylib import Layer, steps, temperature


# case: methods of a class
class Model:
    @fx.uses(temperature)
    def __call__(self, x: float) -> float:
        return self.scale(x)

    @fx.uses(temperature)
    def scale(self, x: float) -> float:
        return x * temperature.ask()

    @fx.uses(temperature)
    def leaky(self) -> int:
        return steps.get()  # E: effax-undeclared: Effect "steps" is neither in the effect row of "Model.leaky"

    @fx.uses()
    def calls_self(self) -> float:
        return self.scale(1.0)  # E: effax-undeclared: "scale" performs effect "temperature"

    @staticmethod
    @fx.uses(steps)
    def static() -> int:
        return steps.get()

    @classmethod
    @fx.uses()
    def make(cls) -> float:
        return cls.static()  # E: effax-undeclared: "static" performs effect "steps"


# case: calling an instance and its methods outside their rows
@fx.uses()
def use_model(model: Model) -> float:
    model.scale(1.0)  # E: effax-undeclared: "scale" performs effect "temperature"
    return model(1.0)  # E: effax-undeclared: "model" performs effect "temperature"


# case: an instance made here, used under its handler
@fx.uses()
def local_model() -> float:
    model = Model()
    with temperature.provide(1.0), steps.init(0):
        return model(2.0) + Model()(3.0) + Model.static()


# case: a class from another module
@fx.uses(temperature)
def other_module_class(layer: Layer) -> float:
    return layer(1.0) + layer.count()  # E: effax-undeclared: "count" performs effect "steps"


# case: methods whose rows cover their calls
class Counter:
    @fx.uses(steps)
    def total(self) -> int:
        return self.one() + Counter.one(self)

    @fx.uses(steps)
    def one(self) -> int:
        return steps.modify(lambda n: n + 1)


# case: cls(...) in a classmethod constructs, it does not call the instance
class Scaled:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    @fx.uses(temperature)
    def __call__(self, x: float) -> float:
        return x * self.factor * temperature.ask()

    @classmethod
    @fx.uses()
    def unit(cls) -> "Scaled":
        return cls(1.0)

    @staticmethod
    @fx.uses()
    def doubled() -> "Scaled":
        return Scaled(2.0)

    @classmethod
    @fx.uses()
    def applied(cls, x: float) -> float:
        return cls(1.0)(x)  # E: effax-undeclared


# case: calls through attributes: a submodule, Equinox-style
class Block:
    @fx.uses(temperature)
    def __call__(self, x: float) -> float:
        return x * temperature.ask()


class Composed:
    body: Block

    def __init__(self) -> None:
        self.body = Block()

    @fx.uses(temperature)
    def __call__(self, x: float) -> float:
        return self.body(x)

    @fx.uses()
    def leaky(self, x: float) -> float:
        return self.body(x)  # E: effax-undeclared

    @fx.uses()
    def handled(self, x: float) -> float:
        with temperature.provide(1.0):
            return self.body(x)


# case: super() and conditional callees
class Base:
    @fx.uses(temperature)
    def __call__(self, x: float) -> float:
        return x * temperature.ask()


class Derived(Base):
    @fx.uses()
    def __call__(self, x: float) -> float:
        return super().__call__(x)  # E: effax-undeclared

    @fx.uses()
    def either(self, x: float, fast: bool) -> float:
        f = scaled_here if fast else Block()
        return f(x)  # E: effax-undeclared


@fx.uses(temperature)
def scaled_here(x: float) -> float:
    return x * temperature.ask()


# case: reading a property runs its getter
class Reader:
    @property
    @fx.uses(temperature)
    def value(self) -> float:
        return temperature.ask()


@fx.uses()
def read_property(r: Reader) -> float:
    return r.value  # E: effax-undeclared


@fx.uses(temperature)
def read_property_in_row(r: Reader) -> float:
    return r.value


@fx.uses()
def read_property_handled(r: Reader) -> float:
    with temperature.provide(1.0):
        return r.value
