"""Effects of our own, overloads, constructors, attributes holding functions,
property setters, and effects the plugin cannot name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import attrs
import jax
import jax.numpy as jnp

import effax as fx
from optics.effects import lr, noise, step_count
from optics.layers import jitter, sgd_update

w = jnp.ones(3)


class Meter(fx.Effect["Gauge"]):
    """Adds amounts to a gauge; `add` is interceptable."""

    operations = ("add",)

    def add(self, amount: jax.Array | float) -> None:
        self.handler().add(amount)

    def gauge(self) -> Gauge:
        return Gauge(self)

    def loose_gauge(self):  # type: ignore[no-untyped-def]
        return Gauge(self)


@attrs.define(eq=False)
class Gauge(fx.Handler[Meter]):
    effect: Meter
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount: jax.Array | float) -> None:
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: Meter, static: Any, const: Any, carry: Any) -> Gauge:
        return cls(effect, carry)


meter = Meter("meter")


@fx.uses(meter)
def spend(x: jax.Array) -> jax.Array:
    meter.add(jnp.sum(x))
    return x


class Layer:
    stat = fx.State[jax.Array]("layer.stat")  # an effect held in a class attribute


def make_ask() -> fx.Ask[float]:
    return fx.Ask[float]("made")


made = make_ask()


# case: a custom effect's operation at module level, no handler
meter.add(1.0)  # E: effax-unhandled

# case: a custom effect under its annotated handler maker, eager and compiled
with meter.gauge() as gauge:
    meter.add(1.0)
    spend(w)
    fx.jit(spend)(w)
print(gauge.value)

# case: a custom effect's row function at module level without its handler
spend(w)  # E: effax-unhandled

# case: a custom effect handler constructed directly
with Gauge(meter) as g2:
    spend(w)

# case: a custom effect performed in a row that omits it
@fx.uses(lr)
def spend_and_step(x: jax.Array) -> jax.Array:
    meter.add(1.0)  # E: effax-undeclared
    return sgd_update(x, x)


with meter.gauge(), lr.provide(jnp.float32(0.1)):
    spend_and_step(w)

# case: a handler maker without a return annotation may handle anything
with meter.loose_gauge():  # E: no-untyped-call
    sgd_update(w, w)  # limit: a with of an unannotated handler maker hides everything under it (lr unhandled)

# case: intercepting the custom effect's operation, gauge outside
with meter.gauge() as g3, fx.intercept(meter, add=lambda outer, a: outer.add(10 * a)):
    spend(w)
    fx.jit(spend)(w)

# case: intercepting the custom effect with no gauge outside
with fx.intercept(meter, add=lambda outer, a: outer.add(10 * a)):
    spend(w)  # E: effax-unhandled

# case: overloads sharing the implementation's row
@overload
def scale(x: float) -> float: ...
@overload
def scale(x: jax.Array) -> jax.Array: ...
@fx.uses(lr)
def scale(x: Any) -> Any:
    return x * lr.ask()


scale(2.0)  # E: effax-unhandled
with lr.provide(jnp.float32(0.5)):
    scale(2.0)
    scale(w)

# case: an overloaded function called from a row that lacks lr
@fx.uses(step_count)
def scale_steps() -> jax.Array:
    return scale(step_count.get())  # E: effax-undeclared


with lr.provide(jnp.float32(0.5)), step_count.init(jnp.int32(3)):
    scale_steps()

# case: a callable class constructed and called at module level
class Scale:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    @fx.uses(lr)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.factor * x * lr.ask()

    @classmethod
    @fx.uses(lr, noise)
    def noisy(cls, x: jax.Array) -> jax.Array:
        return cls(2.0)(jitter(x))

    @fx.uses(noise)
    def twin(self, x: jax.Array) -> jax.Array:
        return type(self)(self.factor)(jitter(x))  # E: effax-undeclared


Scale(3.0)(w)  # E: effax-unhandled
with lr.provide(jnp.float32(0.1)), noise.seed(0):
    Scale(3.0)(w)
    Scale.noisy(w)
    Scale(1.0).twin(w)

# case: cls(...)(x) in a classmethod whose row lacks lr
class Shift:
    @fx.uses(lr)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + lr.ask()

    @classmethod
    @fx.uses(noise)
    def shifted(cls, x: jax.Array) -> jax.Array:
        return cls()(jitter(x))  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)), noise.seed(0):
    Shift.shifted(w)

# case: a constructor with a row, through type(self) in a row that covers it
class Snapshot:
    @fx.uses(step_count)
    def __init__(self) -> None:
        self.at = step_count.get()

    @fx.uses(step_count)
    def again(self) -> Snapshot:
        return type(self)()


with step_count.init(jnp.int32(7)):
    Snapshot().again()

# case: an attribute holding a function, called from a method whose row lacks it
class Pipeline:
    def __init__(self, body: Callable[[jax.Array, jax.Array], jax.Array]) -> None:
        self.body = body
        self.update = sgd_update

    @fx.uses(noise)
    def run(self, x: jax.Array) -> jax.Array:
        return self.update(jitter(x), x)  # E: effax-undeclared

    @fx.uses(noise)
    def run_body(self, x: jax.Array) -> jax.Array:
        return self.body(jitter(x), x)  # limit: a function passed in as a parameter (and kept) carries no row


with lr.provide(jnp.float32(0.1)), noise.seed(0):
    Pipeline(sgd_update).run(w)
with lr.provide(jnp.float32(0.1)), noise.seed(0):
    Pipeline(sgd_update).run_body(w)

# case: a property setter with a row, assigned at module level
class Budget:
    def __init__(self) -> None:
        self._left = jnp.float32(10)

    @property
    def left(self) -> jax.Array:
        return self._left  # E: no-any-return

    @left.setter
    @fx.uses(meter)
    def left(self, value: jax.Array) -> None:
        meter.add(self._left - value)
        self._left = value


budget = Budget()
budget.left = jnp.float32(8)  # E: effax-unhandled
with meter.gauge():
    budget.left = jnp.float32(7)
print(budget.left)

# case: a lambda given a row inside a row function that lacks it
@fx.uses(noise)
def lambda_row(x: jax.Array) -> jax.Array:
    f = fx.uses(lr)(lambda v: v * lr.ask())
    return f(jitter(x))  # E: effax-undeclared, no-any-return


with lr.provide(jnp.float32(0.1)), noise.seed(0):
    lambda_row(w)

# case: an effect held in a class attribute is not tracked
Layer.stat.get()  # limit: effects held in class attributes are not tracked (UnhandledEffectError)

# case: an effect returned by a function is not tracked
made.ask()  # limit: an effect returned by a function carries no name (UnhandledEffectError)

# case: an effect passed as a parameter into a row function
@fx.uses(lr)
def ask_param(e: fx.Ask[float]) -> jax.Array:
    return lr.ask() * e.ask()  # limit: an effect held in a parameter is not tracked (UndeclaredEffectError)


with lr.provide(jnp.float32(0.1)), made.provide(2.0):
    ask_param(made)

# case: jax.checkpoint of a row function called at module level
ckpt = jax.checkpoint(spend)
ckpt(w)  # E: effax-unhandled
with meter.gauge():
    fx.checkpoint(spend)(w)

# case: jax.vmap of a row function inside a row lacking the meter
@fx.uses(lr)
def vmapped_spend(xs: jax.Array) -> jax.Array:
    return jax.vmap(spend)(xs) * lr.ask()  # E: effax-undeclared


with meter.gauge(), lr.provide(jnp.float32(0.1)):
    try:
        vmapped_spend(jnp.ones((2, 3)))
    except fx.EffectLeakError:
        pass

# case: a gauge entered through a walrus inside a pure entry point
@fx.uses()
def metered(x: jax.Array) -> jax.Array:
    with (gg := meter.gauge()):
        spend(x)
    return gg.value


metered(w)

# case: a pure entry point that forgets the gauge
@fx.uses()
def metered_bad(x: jax.Array) -> jax.Array:
    return spend(x)  # E: effax-undeclared


with meter.gauge():
    metered_bad(w)

# case: a gauge in a handlers bundle spread from a list with a provider
meter_cells: list[fx.Handler[Any]] = [meter.gauge(), lr.provide(jnp.float32(0.2))]
with fx.handlers(*meter_cells) as mhs:
    spend(w)
    scale(w)
print(mhs[meter])

# case: spend compiled through fx.handle with the gauge, called from a row lacking the meter
spend_counted = fx.handle(spend, meter.gauge(), transform=jax.jit)


@fx.uses(lr)
def spend_handled(x: jax.Array) -> jax.Array:
    return spend_counted(x) * lr.ask()


with lr.provide(jnp.float32(0.1)):
    spend_handled(w)

# case: the custom effect performed in a scan lambda at module level
fx.scan(lambda c, v: (c + v, meter.add(v)), jnp.float32(0), w)  # E: effax-unhandled, func-returns-value
with meter.gauge():
    fx.scan(lambda c, v: (c + v, meter.add(v)), jnp.float32(0), w)  # E: func-returns-value

# case: the custom effect inside fx.cond in a row lacking it
@fx.uses(lr)
def cond_spend(x: jax.Array) -> jax.Array:
    return fx.cond(x.sum() > 0, lambda: spend(x), lambda: x) * lr.ask()  # E: effax-undeclared


with meter.gauge(), lr.provide(jnp.float32(0.1)):
    cond_spend(w)

# case: fx.map of the custom effect function with the gauge outside, at module level
with meter.gauge():
    fx.map(spend, jnp.ones((2, 3)))
fx.map(spend, jnp.ones((2, 3)))  # E: effax-unhandled
