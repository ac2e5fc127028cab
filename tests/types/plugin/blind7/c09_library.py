"""A library-style module: classes, properties, protocols, generics, decorators, closures."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar, overload

import jax
import jax.numpy as jnp

import effax as fx
from b7lib.effects import bn_stats, ema, lr, temperature
from b7lib.layers import batch_norm, softmax_t
from b7lib.training import track_ema

T = TypeVar("T")
budget = fx.State[jax.Array]("budget")
label = fx.Ask[str]("label", static=True)
tags = fx.Ask[frozenset[str]]("tags", static=True)
tag_list = fx.Ask[list[str]]("tag_list", static=True)
audit = fx.Emit[jax.Array]("audit")


class Scorer(Protocol):
    def __call__(self, x: jax.Array) -> jax.Array: ...


class Buffer(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []

    @fx.uses(budget)
    def push(self, item: T) -> None:
        budget.modify(lambda b: b - 1)
        self.items.append(item)


class Calibrated:
    @fx.uses(temperature)
    def __init__(self, logits: jax.Array) -> None:
        self.probs = softmax_t(logits)

    @property
    @fx.uses(budget)
    def remaining(self) -> jax.Array:
        return budget.get()

    @fx.uses(audit)
    def audited(self) -> jax.Array:
        audit.emit(jnp.max(self.probs))
        return self.probs

    @classmethod
    @fx.uses(temperature)
    def uniform(cls, n: int) -> Calibrated:
        return cls(jnp.zeros(n))


@dataclasses.dataclass
class Smoother:
    decay: float = 0.9

    @fx.uses(ema)
    def __call__(self, v: jax.Array) -> jax.Array:
        return track_ema(v, self.decay)


@overload
def normalise(x: jax.Array) -> jax.Array: ...
@overload
def normalise(x: float) -> float: ...
@fx.uses(bn_stats)
def normalise(x: jax.Array | float) -> jax.Array | float:
    if isinstance(x, float):
        return x
    return batch_norm("lib", x)  # pyright: ignore[reportArgumentType]


def logged(fn: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    @functools.wraps(fn)
    def wrapper(x: jax.Array) -> jax.Array:
        return fn(x)

    return wrapper


@contextlib.contextmanager
def calibration(t: float) -> Iterator[None]:
    with temperature.provide(jnp.float32(t)), budget.init(jnp.int32(10)):
        yield


@contextlib.contextmanager
def timer() -> Iterator[None]:
    yield


logits = jnp.array([1.0, 2.0, 0.5])

# case: a calibrated object constructed under a temperature
with temperature.provide(jnp.float32(2.0)):
    cal = Calibrated(logits)
    cal2 = Calibrated.uniform(3)

# case: a calibrated object constructed with no temperature
Calibrated(logits)  # E: effax-unhandled

# case: a classmethod constructor with no temperature
Calibrated.uniform(4)  # E: effax-unhandled

# case: a property with a row, read under its state
with budget.init(jnp.int32(3)):
    left = cal.remaining

# case: a property with a row, read with nothing installed
left = cal.remaining  # E: effax-unhandled

# case: an audited read with no collector
cal.audited()  # E: effax-unhandled

# case: a generic buffer pushed under a budget
buf = Buffer[int]()
with budget.init(jnp.int32(5)) as b:
    for i in range(3):
        buf.push(i)

# case: a generic buffer constructed and pushed in one expression, no budget
Buffer[str]().push("a")  # E: effax-unhandled

# case: a smoother instance called under its state
smooth = Smoother(0.5)
with ema.init(jnp.float32(0.0)):
    s1 = smooth(jnp.float32(1.0))

# case: a smoother constructed and called at module level
Smoother(0.8)(jnp.float32(1.0))  # E: effax-unhandled

# case: an overloaded normaliser with its state dict
with bn_stats.init():
    n1 = normalise(jnp.ones((2, 3)))

# case: an overloaded normaliser with no state dict
normalise(jnp.ones((2, 3)))  # E: effax-unhandled

# case: a user context manager that installs the handlers
with calibration(1.5):
    cal3 = Calibrated(logits)
    left3 = cal3.remaining

# case: a user context manager that installs nothing
with timer():
    Calibrated(logits)  # limit: any context manager of the user's own may install handlers, so nothing under it is reported


@fx.uses(budget)
def spend(n: int) -> jax.Array:
    def one() -> jax.Array:
        return budget.modify(lambda b: b - 1)

    for _ in range(n):
        one()
    return budget.get()


@fx.uses(temperature)
def spend_hot(n: int) -> jax.Array:
    def one() -> jax.Array:
        return budget.modify(lambda b: b - 1)

    return one()  # E: effax-undeclared


# case: a closure spending a budget
with budget.init(jnp.int32(4)):
    spend(2)

# case: a closure that spends a budget outside its function's row (a budget outside)
with budget.init(jnp.int32(4)), temperature.provide(jnp.float32(1.0)):
    spend_hot(1)

# case: a partial of the spender with no budget
functools.partial(spend, 2)()  # E: effax-unhandled


@fx.uses(lr, budget)
def scheduled(step: int) -> jax.Array:
    scale = 0.5 if step > 5 else 1.0
    try:
        budget.modify(lambda b: b - 1)
        return lr.ask() * scale
    finally:
        pass


@fx.uses(lr)
def scheduled_wrong(step: int) -> jax.Array:
    try:
        budget.modify(lambda b: b - 1)  # E: effax-undeclared
        return lr.ask()
    except ValueError:
        return jnp.float32(0.0)  # E: no-any-return


# case: a try/finally step under its handlers
with lr.provide(jnp.float32(0.1)), budget.init(jnp.int32(2)):
    scheduled(7)

# case: a try/except that catches the wrong error (a budget outside the row)
with lr.provide(jnp.float32(0.1)), budget.init(jnp.int32(2)):
    scheduled_wrong(1)

# case: a conditional callee, either branch handled
hot = True
with temperature.provide(jnp.float32(1.0)), budget.init(jnp.int32(2)):
    picked = (spend if not hot else Calibrated.uniform)(2)

# case: a conditional callee inside a with that handles only one side
with temperature.provide(jnp.float32(1.0)):
    (Calibrated.uniform if not hot else spend)(2)  # E: effax-unhandled

# case: a sorted list of scores with a keyed row function
with temperature.provide(jnp.float32(1.0)):
    ranked = sorted([logits, logits * 2], key=lambda l: float(softmax_t(l)[0]))

# case: sorting by a row function with no temperature
sorted([logits, logits * 2], key=lambda l: float(softmax_t(l)[0]))  # E: effax-unhandled

# case: the label is a static str
with label.provide("calibration"), tags.provide(frozenset({"a", "b"})):
    name = f"{label.ask()}:{sorted(tags.ask())}"

# case: a list of tags given to a static Ask, not hashable
with tag_list.provide(["a", "b"]):  # E: effax-handler-type
    first_tag = tag_list.ask()[0]

# case: a decorator without a row around a function with one
scored = logged(softmax_t)
with temperature.provide(jnp.float32(1.0)):
    scored(logits)

# case: the spender called with nothing installed
spend(1)  # E: effax-unhandled
