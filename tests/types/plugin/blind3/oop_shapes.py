"""Effects in classes: methods, properties, constructors, generics, protocols."""

import dataclasses
from typing import Generic, Protocol, TypeVar

import jax
import jax.numpy as jnp

import effax as fx
from fxlib import dropout, losses, mode, scale, steps, temperature
from fxlib.ops import counted, scaled

T = TypeVar("T")
history = fx.Emit[float]("history")

# case: a layer with rows on __call__ and on a helper method
class Scaler:
    def __init__(self, bias: float) -> None:
        self.bias = bias

    @fx.uses(temperature)
    def scale_by_temp(self, x: jax.Array) -> jax.Array:
        return scaled(x) + self.bias

    @fx.uses(temperature, steps)
    def __call__(self, x: jax.Array) -> jax.Array:
        steps.modify(lambda n: n + 1)
        return self.scale_by_temp(x)

# case: a subclass whose __call__ row forgets steps from super().__call__
class NoisyScaler(Scaler):
    @fx.uses(temperature, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        y = super().__call__(x)  # E: effax-undeclared
        return y + jax.random.normal(dropout.next_key(), y.shape)

# case: a property whose getter asks the scale
class Schedule:
    def __init__(self, base: float) -> None:
        self._base = base

    @property
    @fx.uses(scale)
    def rate(self) -> float:
        return self._base * scale.ask()

    @rate.setter
    def rate(self, value: float) -> None:
        self._base = value

    @fx.uses(scale)
    def halved(self) -> float:
        return self.rate / 2

# case: a method reading the property under a row that lacks scale
class Warmup(Schedule):
    @fx.uses(steps)
    def current(self) -> float:
        return self.rate * float(steps.get())  # E: effax-undeclared

# case: a constructor with a row, and classmethod/staticmethod builders
class Buffer(Generic[T]):
    @fx.uses(steps)
    def __init__(self, first: T) -> None:
        steps.modify(lambda n: n + 1)
        self.items = [first]

    @fx.uses(steps)
    def push(self, item: T) -> "Buffer[T]":
        steps.modify(lambda n: n + 1)
        self.items.append(item)
        return self

    @classmethod
    @fx.uses(steps)
    def of(cls, *items: T) -> "Buffer[T]":
        buf = cls(items[0])
        for item in items[1:]:
            buf.push(item)
        return buf

    @staticmethod
    @fx.uses(mode)
    def describe() -> str:
        return f"buffer in {mode.ask()} mode"

# case: a function building buffers without declaring steps
@fx.uses(mode)
def build_buffers() -> list[Buffer[int]]:
    print(Buffer.describe())
    return [Buffer[int](1), Buffer.of(1, 2)]  # E: effax-undeclared, effax-undeclared

# case: a pure entry that handles the buffer's counter
@fx.uses()
def build_counted() -> tuple[int, jax.Array]:
    with steps.init(jnp.int32(0)) as cell:
        buf = Buffer[str]("a").push("b")
    return len(buf.items), cell.value

# case: a protocol of steppers, implemented by a dataclass with a row
class Stepper(Protocol):
    def step(self, x: jax.Array) -> jax.Array: ...

@dataclasses.dataclass(frozen=True)
class Decay:
    factor: float = 0.9

    @fx.uses(temperature)
    def step(self, x: jax.Array) -> jax.Array:
        return self.factor * scaled(x)

@fx.uses(temperature)
def run_stepper(s: Stepper, x: jax.Array) -> jax.Array:
    return s.step(s.step(x))

# case: a dataclass step method that emits history not in its row
@dataclasses.dataclass
class Tracker:
    values: list[float] = dataclasses.field(default_factory=list)

    @fx.uses(scale)
    def record(self, x: float) -> None:
        self.values.append(x * scale.ask())
        history.emit(x)  # E: effax-undeclared

# case: a conditional callee performs what either branch performs
@fx.uses(temperature)
def pick(x: jax.Array, fast: bool) -> jax.Array:
    return (scaled if fast else counted)(x)  # E: effax-undeclared

# case: a conditional callee whose branches are both covered
@fx.uses(temperature, steps)
def pick_ok(x: jax.Array, fast: bool) -> jax.Array:
    return (scaled if fast else counted)(x)

# case: cls(...)(x) of a layer class inside a classmethod with its row
class Factory:
    @classmethod
    @fx.uses(temperature, steps)
    def apply(cls, x: jax.Array) -> jax.Array:
        return Scaler(0.5)(x)

# case: a layer keeping its own State in an attribute (not tracked)
class RunningMax:
    def __init__(self, name: str) -> None:
        self.stat = fx.State[jax.Array](f"{name}.max")

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.maximum(self.stat.get(), x)

# case: a generic buffer's push called under a row with only mode
@fx.uses(mode)
def push_all(buf: Buffer[int], items: list[int]) -> None:
    for i in items:
        buf.push(i)  # E: effax-undeclared

# case: class body code runs where the class is defined
class Defaults:
    width = 4
    label = "defaults"

# case: a class body asking an effect at definition time
class Frozen:
    temp = temperature.ask()  # E: effax-unhandled

# case: module level: instance call under both handlers
with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0))):
    out0 = Scaler(1.0)(jnp.ones(2))
    out1 = Factory.apply(jnp.ones(2))
    print(pick_ok(jnp.ones(2), False), run_stepper(Decay(), jnp.ones(2)))

# case: module level: instance call with only the temperature
with temperature.provide(jnp.float32(2.0)):
    out2 = Scaler(1.0)(jnp.ones(2))  # E: effax-unhandled

# case: module level: a property read with no provider
sched = Schedule(0.1)
print(sched.rate)  # E: effax-unhandled

# case: module level: property read and setter write under the provider
with scale.provide(2.0):
    sched.rate = 0.2
    print(sched.rate, sched.halved())

# case: module level: explicitly parametrised constructor with no counter
buf0 = Buffer[float](0.5)  # E: effax-unhandled

# case: module level: classmethod builder with no counter
buf1 = Buffer.of(1, 2, 3)  # E: effax-unhandled

# case: module level: staticmethod asking the static mode, nothing provided
print(Buffer.describe())  # E: effax-unhandled

# case: module level: builders under their handlers
with fx.handlers(steps.init(jnp.int32(0)), mode.provide("eval")):
    print(len(Buffer.of(1, 2).items), Buffer.describe(), build_counted())

# case: module level: a protocol-typed stepper run under the provider
with temperature.provide(jnp.float32(0.5)):
    print(run_stepper(Decay(0.5), jnp.ones(2)))

# case: module level: the dataclass method called with no scale provided
Tracker().record(1.0)  # E: effax-unhandled

# case: module level: running max with its attribute state initialised
rm = RunningMax("acts")
with rm.stat.init(jnp.zeros(2)):
    print(rm(jnp.ones(2)))

# case: module level: methods and classmethods called without providers
Factory.apply(jnp.ones(2))  # E: effax-unhandled
Decay().step(jnp.ones(2))  # E: effax-unhandled
sched.halved()  # E: effax-unhandled
run_stepper(Decay(), jnp.ones(2))  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives the wrong methods under handlers
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0)), dropout.seed(0)): NoisyScaler(0.0)(jnp.ones(2))
    # case: main block drives Warmup.current
    with fx.handlers(scale.provide(2.0), steps.init(jnp.int32(1))): Warmup(0.1).current()
    # case: main block drives build_buffers
    with fx.handlers(mode.provide("train"), steps.init(jnp.int32(0))): build_buffers()
    # case: main block drives Tracker.record with a collector
    with fx.handlers(scale.provide(2.0), history.collect()): Tracker().record(1.0)
    # case: main block drives pick with both handlers
    with fx.handlers(temperature.provide(jnp.float32(2.0)), steps.init(jnp.int32(0)), losses.collect()): pick(jnp.ones(2), False)
    # case: main block calls the running max without its cell
    RunningMax("other")(jnp.ones(2))  # limit: effects held in class attributes are not tracked, and __call__ has no row
    # case: main block drives push_all
    with fx.handlers(mode.provide("train"), steps.init(jnp.int32(0))): push_all(Buffer.of(1), [2])
