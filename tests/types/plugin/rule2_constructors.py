"""Rule 2 (issue 28): what constructing and calling a class performs: an instance
called at module level (`Scale(3)(x)`, whose `__init__` has no row), `type(self)`
as a constructor, generic classes given their parameters (`Buffer[int]()`)."""

from __future__ import annotations

from typing import Generic, TypeVar

import jax
import jax.numpy as jnp

import effax as fx

scale = fx.Ask[float]("scale")
calls = fx.State[int]("calls")
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class Scale:
    def __init__(self, k: int) -> None:
        self.k = k

    @fx.uses(scale)
    def __call__(self, x: float) -> float:
        return x * scale.ask() * self.k

    @fx.uses()
    def again(self) -> float:
        return type(self)(3)(1.0)  # E: effax-undeclared: "type(...)(...)" performs effect "scale"

    @fx.uses(scale)
    def again_in_row(self) -> float:
        return type(self)(3)(1.0)


class Counted:
    @fx.uses(calls)
    def __init__(self) -> None:
        calls.set(calls.get() + 1)

    @fx.uses()
    def clone(self) -> Counted:
        return type(self)()  # E: effax-undeclared: "type(...)" performs effect "calls"


class Buffer(Generic[T]):
    @fx.uses(calls)
    def push(self, x: T) -> None:
        calls.set(calls.get() + 1)


class Repository(Generic[K, V]):
    @fx.uses(calls)
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        calls.set(calls.get() + 1)

    @fx.uses(scale)
    def get(self, key: K) -> float:
        return scale.ask()


# case: an instance called at module level, its constructor without a row
Scale(3)(1.0)  # E: effax-unhandled: "Scale(...)" performs effect "scale" at module level
Scale(3)
with scale.provide(2.0):
    Scale(3)(1.0)


# case: generic classes given their parameters, at module level
Buffer[int]().push(1)  # E: effax-unhandled: "push" performs effect "calls"
Repository[str, jax.Array]("p/")  # E: effax-unhandled: "Repository" performs effect "calls"
with calls.init(0):
    Buffer[int]().push(1)
    Repository[str, jax.Array]("p/").get("k")  # E: effax-unhandled: "get" performs effect "scale"
with calls.init(0), scale.provide(1.0):
    Repository[str, jax.Array]("p/").get("k")
    Buffer[float]().push(jnp.float32(1).item())


# case: generic classes given their parameters, in a row
@fx.uses(calls)
def in_row() -> None:
    Buffer[int]().push(1)
    Repository[str, int]("q/").get("k")  # E: effax-undeclared: "get" performs effect "scale"
