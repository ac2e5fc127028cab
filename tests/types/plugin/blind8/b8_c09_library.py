"""A small numerical library: layer classes with rows on their methods, a protocol,
generic buffers, overloads, properties, closures and callables kept in containers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, overload

import jax
import jax.numpy as jnp

import effax as fx

lib_scale = fx.Ask[jax.Array]("lib_scale")
tolerance = fx.Ask[float]("tolerance", default=1e-3)
lib_cache = fx.State[jax.Array]("lib_cache")
lib_trace = fx.Emit[jax.Array]("lib_trace")
lib_total = fx.State[float]("lib_total")
lib_mode = fx.Ask[str]("lib_mode", static=True, default="fast")

T = TypeVar("T")
X = jnp.arange(4.0)


class Layer(Protocol):
    def __call__(self, x: jax.Array) -> jax.Array: ...


class Scale:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    @fx.uses(lib_scale)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.factor * lib_scale.ask()


# case: an instance constructed and called in place, under its provider
with lib_scale.provide(jnp.float32(2.0)):
    y = Scale(3.0)(X)


# case: the same call at module level with nothing provided
y_bare = Scale(3.0)(X)  # E: effax-unhandled


# case: a subclass whose row drops the scale and calls the parent's __call__
class TracedScale(Scale):
    @fx.uses(lib_trace)
    def __call__(self, x: jax.Array) -> jax.Array:
        out = super().__call__(x)  # E: effax-undeclared
        lib_trace.emit(out)
        return out


with lib_scale.provide(jnp.float32(1.0)), lib_trace.collect():
    TracedScale(2.0)(X)


# case: a layer whose constructor reads the tolerance; a copy made with type(self)(...)
class Clipper:
    @fx.uses(tolerance)
    def __init__(self, bound: float) -> None:
        self.bound = bound + tolerance.ask()

    @fx.uses(tolerance)
    def widened(self) -> Clipper:
        return type(self)(self.bound * 2.0)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.clip(x, -self.bound, self.bound)


clipper = Clipper(1.0).widened()  # the tolerance answers its default


# case: a copy made in a method whose row omits the constructor's tolerance
class StrictClipper(Clipper):
    @fx.uses()
    def tightened(self) -> Clipper:
        return type(self)(self.bound / 2.0)  # E: effax-undeclared


with tolerance.provide(1e-6):
    StrictClipper(1.0).tightened()


# case: a generic buffer whose push keeps a running cache
class Buffer(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []

    @fx.uses(lib_cache)
    def push(self, item: T, weight: jax.Array) -> None:
        self.items.append(item)
        lib_cache.modify(lambda c: c + weight)


with lib_cache.init(jnp.float32(0)) as cache_cell:
    Buffer[int]().push(1, jnp.float32(0.5))
print("cache", float(cache_cell.value))


# case: the generic buffer pushed at module level without its cache
Buffer[str]().push("a", jnp.float32(1.0))  # E: effax-unhandled


# case: an overloaded function: its implementation's row
@overload
def rescale(x: float) -> float: ...
@overload
def rescale(x: jax.Array) -> jax.Array: ...
@fx.uses(lib_scale)
def rescale(x: float | jax.Array) -> float | jax.Array:
    return x * lib_scale.ask()


with lib_scale.provide(jnp.float32(0.5)):
    rescale(X)
r_bare = rescale(2.0)  # E: effax-unhandled


# case: a conditional callee: either function may run, so both rows count
@fx.uses(lib_scale)
def fast_path(x: jax.Array) -> jax.Array:
    return x * lib_scale.ask()


@fx.uses(lib_scale, lib_trace)
def slow_path(x: jax.Array) -> jax.Array:
    lib_trace.emit(x)
    return x * lib_scale.ask()


@fx.uses(lib_scale)
def choose_path(x: jax.Array, careful: bool) -> jax.Array:
    return (slow_path if careful else fast_path)(x)  # E: effax-undeclared


with lib_scale.provide(jnp.float32(1.0)), lib_trace.collect():
    choose_path(X, True)


# case: readers in a list written in place, read by index at module level
@fx.uses(lib_cache)
def read_cache() -> jax.Array:
    return lib_cache.get()


readers = [read_cache, lambda: jnp.float32(0)]
cached_now = readers[0]()  # E: effax-unhandled, no-untyped-call


# case: a protocol-typed layer applied by a helper with a row; the callee is a parameter
@fx.uses(lib_trace)
def apply_logged(layer: Layer, x: jax.Array) -> jax.Array:
    out = layer(x)
    lib_trace.emit(out)
    return out


with lib_trace.collect() as logged:
    apply_logged(clipper, X)
print("logged", len(logged.values))


# case: a function passed to a helper of my own: the plugin does not follow it
def apply_twice(f: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
    return f(f(x))


twice = apply_twice(fast_path, X)  # limit: a function handed to a function of your own


# case: a closure factory returning a function with a row, called under its provider
def make_shift(offset: float) -> Callable[[jax.Array], jax.Array]:
    @fx.uses(lib_scale)
    def shift(x: jax.Array) -> jax.Array:
        return x * lib_scale.ask() + offset

    return shift


shift_by_one = make_shift(1.0)
with lib_scale.provide(jnp.float32(1.0)):
    shifted = shift_by_one(X)


# case: a property whose getter and setter have rows
class Accumulator:
    @property
    @fx.uses(lib_cache)
    def total(self) -> jax.Array:
        return lib_cache.get()

    @total.setter
    @fx.uses(lib_cache)
    def total(self, value: jax.Array) -> None:
        lib_cache.set(value)


acc = Accumulator()
with lib_cache.init(jnp.float32(1.0)):
    acc.total = acc.total + 1.0
acc.total = jnp.float32(5.0)  # E: effax-unhandled


# case: the property read in a function whose row lacks the cache
@fx.uses(lib_scale)
def scaled_total(a: Accumulator) -> jax.Array:
    return a.total * lib_scale.ask()  # E: effax-undeclared


with lib_cache.init(jnp.float32(2.0)), lib_scale.provide(jnp.float32(2.0)):
    scaled_total(acc)


# case: a nested helper kept in a variable logs outside the row of its enclosing function
@fx.uses(lib_scale)
def scaled_and_logged(x: jax.Array) -> jax.Array:
    def log_it(v: jax.Array) -> None:
        lib_trace.emit(v)

    out = x * lib_scale.ask()
    log_it(out)  # E: effax-undeclared
    return out


with lib_scale.provide(jnp.float32(1.0)), lib_trace.collect():
    scaled_and_logged(X)


# case: a nested helper that only computes, inside a function with a row
@fx.uses(lib_scale)
def scaled_twice(x: jax.Array) -> jax.Array:
    def once(v: jax.Array) -> jax.Array:
        return v * lib_scale.ask()

    return once(once(x))


with lib_scale.provide(jnp.float32(1.5)):
    scaled_twice(X)


# case: functools.reduce over an effectful combiner at module level
@fx.uses(lib_scale)
def combine(a: jax.Array, b: jax.Array) -> jax.Array:
    return a + lib_scale.ask() * b


summed = functools.reduce(combine, [X, X, X])  # E: effax-unhandled


# case: a classmethod constructor reads the static mode, default or provided
class Solver:
    def __init__(self, iterations: int) -> None:
        self.iterations = iterations

    @classmethod
    @fx.uses(lib_mode, tolerance)
    def from_mode(cls) -> Solver:
        return cls(5 if lib_mode.ask() == "fast" else int(1.0 / tolerance.ask()))

    @fx.uses(lib_scale)
    def solve(self, x: jax.Array) -> jax.Array:
        return fx.fori_loop(0, self.iterations, lambda i, v: 0.5 * (v + lib_scale.ask()), x)


solver = Solver.from_mode()
with lib_mode.provide("slow"), tolerance.provide(0.25):
    slow_solver = Solver.from_mode()


# case: solving at module level without the scale
solution = solver.solve(X)  # E: effax-unhandled


# case: a float running total started from the int 1, updated compiled
@fx.uses(lib_total)
def add_half() -> None:
    lib_total.set(lib_total.get() + 0.5)


with lib_total.init(1):  # E: effax-handler-type
    fx.jit(add_half)()


# case: the total started from a float, updated in an effax.while_loop
with lib_total.init(1.0) as total_cell:
    fx.while_loop(lambda i: i < 3, lambda i: (add_half(), i + 1)[1], jnp.asarray(0))
print("total", total_cell.value)


# case: the accumulator's total formatted at module level, no cache installed
print(f"total {acc.total}")  # E: effax-unhandled


# case: a factory function builds a solver, its row missing the static mode
@fx.uses(tolerance)
def default_solver() -> Solver:
    return Solver.from_mode()  # E: effax-undeclared


with lib_mode.provide("fast"):
    default_solver()
