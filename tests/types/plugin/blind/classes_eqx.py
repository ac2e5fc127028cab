"""Methods, Equinox modules, classmethod constructors, super().__call__, properties."""

from __future__ import annotations

from typing import Self

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx

training = fx.Ask[bool]("training", static=True)
dropout_key = fx.RandomKey("dropout")
temperature = fx.Ask[jax.Array]("temperature")
calls = fx.State[jax.Array]("calls")


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout_key.next_key(), 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class Block(eqx.Module):
    linear: eqx.nn.Linear
    dropout: Dropout

    def __init__(self, key: jax.Array) -> None:
        self.linear = eqx.nn.Linear(4, 4, key=key)
        self.dropout = Dropout(0.1)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.dropout(jax.nn.relu(self.linear(x)))


class Scaler:
    def __init__(self, k: jax.Array) -> None:
        self.k = k

    @fx.uses(temperature)
    def scale(self, x: jax.Array) -> jax.Array:
        return x * self.k * temperature.ask()

    @fx.uses(temperature, calls)
    def __call__(self, x: jax.Array) -> jax.Array:
        calls.modify(lambda n: n + 1)
        return self.scale(x)

    @property
    @fx.uses(temperature)
    def effective(self) -> jax.Array:
        return self.k * temperature.ask()

    @staticmethod
    @fx.uses(temperature)
    def base(x: jax.Array) -> jax.Array:
        return x * temperature.ask()


class NoisyInit(eqx.Module):
    weight: jax.Array

    @fx.uses(fx.rng)
    def __init__(self, size: int) -> None:
        self.weight = fx.random.normal((size,))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.weight


# case: submodule call within the row
class Net(eqx.Module):
    body: Block

    def __init__(self, key: jax.Array) -> None:
        self.body = Block(key)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.body(x) + x


# case: instance call under handlers in a pure entry point
@fx.uses()
def predict(key: jax.Array, x: jax.Array) -> jax.Array:
    model = Block(key)
    with fx.handlers(training.provide(False), dropout_key.seed(0)):
        return model(x)


# case: self method call within the row
class Doubler(Scaler):
    @fx.uses(temperature)
    def twice(self, x: jax.Array) -> jax.Array:
        return self.scale(self.scale(x))


# case: super().__call__ within a wider row
class LoggedScaler(Scaler):
    @fx.uses(temperature, calls, training)
    def __call__(self, x: jax.Array) -> jax.Array:
        y = super().__call__(x)
        return y if training.ask() else y * 0.5


# case: classmethod constructor called within the row
class Preset(Scaler):
    @classmethod
    @fx.uses(temperature)
    def apply_default(cls, x: jax.Array) -> jax.Array:
        return cls(jnp.float32(1.0)).scale(x)


# case: property read within the row
class Schedule(Scaler):
    @fx.uses(temperature)
    def lr(self, step: jax.Array) -> jax.Array:
        return self.effective / (1.0 + step)


# case: constructor with a row called within the row
@fx.uses(fx.rng)
def build(x: jax.Array) -> jax.Array:
    layer = NoisyInit(3)
    return layer(x)


# case: method handles part of its callee's row
class EvalNet(eqx.Module):
    body: Block

    @fx.uses(dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        with training.provide(False):
            return self.body(x)


# case: staticmethod called within the row
@fx.uses(temperature)
def via_static(x: jax.Array) -> jax.Array:
    return Scaler.base(x) + Scaler(jnp.float32(2.0)).scale(x)


# case: submodule call outside the row
class ShortNet(eqx.Module):
    body: Block

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.body(x) + x  # E: effax-undeclared


# case: instance call outside the row
@fx.uses(training)
def predict_missing(key: jax.Array, x: jax.Array) -> jax.Array:
    model = Block(key)
    return model(x)  # E: effax-undeclared


# case: self method call outside the row
class CountingScaler(Scaler):
    @fx.uses(calls)
    def counted_scale(self, x: jax.Array) -> jax.Array:
        calls.modify(lambda n: n + 1)
        return self.scale(x)  # E: effax-undeclared


# case: super().__call__ outside a narrower row
class QuietScaler(Scaler):
    @fx.uses(temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x)  # E: effax-undeclared


# case: classmethod constructor outside the row
class BadPreset(Scaler):
    @classmethod
    @fx.uses(calls)
    def apply_default(cls, x: jax.Array) -> jax.Array:
        return cls(jnp.float32(1.0))(x)  # E: effax-undeclared


# case: property read outside the row in a method
class BadSchedule(Scaler):
    @fx.uses(calls)
    def lr(self, step: jax.Array) -> jax.Array:
        return self.effective / (1.0 + step + calls.get())  # E: effax-undeclared


# case: property read outside the row in a function
@fx.uses()
def read_effective(s: Scaler) -> jax.Array:
    return s.effective * 2  # E: effax-undeclared


# case: constructor with a row called outside the row
@fx.uses(temperature)
def build_missing(x: jax.Array) -> jax.Array:
    layer = NoisyInit(3)  # E: effax-undeclared
    return layer(x) * temperature.ask()


# case: effect operation in a method outside its row
class Counter(eqx.Module):
    scale: jax.Array

    @fx.uses(temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        calls.modify(lambda n: n + 1)  # E: effax-undeclared
        return x * self.scale * temperature.ask()


# case: staticmethod called outside the row
@fx.uses(calls)
def via_static_missing(x: jax.Array) -> jax.Array:
    return Scaler.base(x) + calls.get()  # E: effax-undeclared


# case: another module's instance called in a classmethod
class Factory(eqx.Module):
    rate: float = eqx.field(static=True)

    @classmethod
    @fx.uses(training)
    def run(cls, x: jax.Array) -> jax.Array:
        return Dropout(0.5)(x) if training.ask() else x  # E: effax-undeclared


# case: property read at module level (a limit when this corpus was written)
y_effective = Scaler(jnp.float32(1.0)).effective  # E: effax-unhandled


# case: effect held in a module attribute
class StatefulNorm(eqx.Module):
    stats: fx.State[jax.Array] = eqx.field(static=True)

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        if training.ask():
            self.stats.modify(lambda s: 0.9 * s + 0.1 * jnp.mean(x))  # limit
        return x - self.stats.get()  # limit
