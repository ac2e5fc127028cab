"""Utilities with stacked decorators, classes, generics, overloads and factories."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar, overload

import jax
import jax.numpy as jnp

import effax as fx

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

scale = fx.Ask[jax.Array]("scale")
counter = fx.State[jax.Array]("counter")
seed_stream = fx.RandomKey("seed_stream")

TIMINGS: list[float] = []


def timed(fn: Callable[P, R]) -> Callable[P, R]:
    """Record the wall time of every call."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMINGS.append(time.perf_counter() - start)

    return wrapper


@fx.uses(scale)
def amplify_arr(x: jax.Array) -> jax.Array:
    return x * scale.ask()


@fx.uses(seed_stream)
def jittered(x: jax.Array) -> jax.Array:
    return x + 1e-3 * fx.random.normal(x.shape, stream=seed_stream)


@fx.uses(counter)
def counted_score(x: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 1)
    return jnp.sum(x)


class Scorer(Protocol):
    def __call__(self, x: jax.Array) -> jax.Array: ...


def best_of(scorer: Scorer, xs: list[jax.Array]) -> int:
    scores = [float(scorer(x)) for x in xs]
    return scores.index(max(scores))


@overload
def amplify(x: float) -> float: ...
@overload
def amplify(x: jax.Array) -> jax.Array: ...
@fx.uses(scale)
def amplify(x: float | jax.Array) -> float | jax.Array:
    return x * scale.ask()


class Base:
    @fx.uses(scale, counter)
    def __call__(self, x: jax.Array) -> jax.Array:
        counter.modify(lambda n: n + 1)
        return x * scale.ask()


class Embedding:
    @fx.uses(seed_stream)
    def __init__(self, n: int, d: int) -> None:
        self.table = jax.random.normal(seed_stream.next_key(), (n, d))

    def lookup(self, i: int) -> jax.Array:
        return self.table[i]


def install_defaults(stack: contextlib.ExitStack) -> None:
    stack.enter_context(scale.provide(jnp.float32(1.0)))


# case: effax.uses outside a user decorator
@fx.uses(scale)
@timed
def timed_scale(x: jax.Array) -> jax.Array:
    return x * scale.ask()


@fx.uses(scale)
def twice_scaled(x: jax.Array) -> jax.Array:
    return timed_scale(timed_scale(x))


# case: a user decorator around effax.uses hides the row from callers
@timed
@fx.uses(scale)
def hidden_scale(x: jax.Array) -> jax.Array:
    return x * scale.ask()


@fx.uses(counter)
def uses_hidden(x: jax.Array) -> jax.Array:
    return hidden_scale(x)  # limit


# case: the body of a function under a user decorator is still checked
@timed
@fx.uses(scale)
def timed_body(x: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 1)  # E: effax-undeclared
    return x * scale.ask()


# case: effax.jit over effax.uses, called under its row
@fx.jit
@fx.uses(scale)
def fast_scaled(x: jax.Array) -> jax.Array:
    return x * scale.ask()


@fx.uses(scale, counter)
def fast_twice(x: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 2)
    return fast_scaled(fast_scaled(x))


# case: effax.jit over effax.uses, called at module level
@fx.jit
@fx.uses(scale)
def fast_scaled_top(x: jax.Array) -> jax.Array:
    return x * scale.ask()


y_top = fast_scaled_top(jnp.ones(3))  # E: effax-unhandled


# case: static and class methods with rows
class Normalizer:
    def __init__(self, eps: float) -> None:
        self.eps = eps

    @staticmethod
    @fx.uses(scale)
    def rescale(x: jax.Array) -> jax.Array:
        return x * scale.ask()

    @classmethod
    @fx.uses(scale, counter)
    def build(cls, eps: float) -> Normalizer:
        counter.modify(lambda n: n + 1)
        cls.rescale(jnp.ones(()))
        return cls(eps)

    @fx.uses(scale)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.rescale(x) / (jnp.std(x) + self.eps)


@fx.uses(scale, counter)
def normalize_all(xs: jax.Array) -> jax.Array:
    norm = Normalizer.build(1e-6)
    return norm(xs)


# case: a class method calls a static method whose row is wider
class Standardizer:
    @staticmethod
    @fx.uses(scale, seed_stream)
    def jittered_scale(x: jax.Array) -> jax.Array:
        return x * scale.ask() + 1e-6 * fx.random.normal(x.shape, stream=seed_stream)

    @classmethod
    @fx.uses(scale)
    def reference(cls) -> jax.Array:
        return cls.jittered_scale(jnp.ones(3))  # E: effax-undeclared


# case: a rowed function handed to a helper through a Protocol
@fx.uses(scale)
def choose(xs: list[jax.Array]) -> int:
    return best_of(counted_score, xs)  # limit


# case: a generic rowed function under its row
@fx.uses(counter)
def tap(x: T) -> T:
    counter.modify(lambda n: n + 1)
    return x


@fx.uses(counter, scale)
def pipeline(x: jax.Array, label: str) -> tuple[jax.Array, str]:
    return tap(amplify_arr(x)), tap(label)


# case: a generic rowed function at module level
@fx.uses(counter)
def tap_top(x: T) -> T:
    counter.modify(lambda n: n + 1)
    return x


tapped = tap_top("hello")  # E: effax-unhandled


# case: an overloaded function called outside its row
@fx.uses(counter)
def boost(x: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 1)
    return amplify(x)  # E: effax-undeclared


# case: an overloaded function under a handler
@fx.uses(counter)
def boost_ok(x: jax.Array) -> jax.Array:
    counter.modify(lambda n: n + 1)
    with scale.provide(jnp.float32(2.0)):
        return amplify(x)


# case: an overload implementation performs outside its row
@overload
def clip(x: float) -> float: ...
@overload
def clip(x: jax.Array) -> jax.Array: ...
@fx.uses(scale)
def clip(x: float | jax.Array) -> float | jax.Array:
    counter.modify(lambda n: n + 1)  # E: effax-undeclared
    return jnp.clip(x, -scale.ask(), scale.ask())


# case: a factory returns a rowed closure as a plain Callable
def make_scaler(k: float) -> Callable[[jax.Array], jax.Array]:
    @fx.uses(scale)
    def f(x: jax.Array) -> jax.Array:
        return k * x * scale.ask()

    return f


@fx.uses(counter)
def use_scaler(x: jax.Array) -> jax.Array:
    s = make_scaler(2.0)
    return s(x)  # limit


# case: a conditional callee, one side outside the row
@fx.uses(scale)
def maybe_jitter(x: jax.Array, noisy: bool) -> jax.Array:
    return (jittered if noisy else amplify_arr)(x)  # E: effax-undeclared


# case: functions kept in a dict
TRANSFORMS: dict[str, Callable[[jax.Array], jax.Array]] = {"scale": amplify_arr, "jitter": jittered}


@fx.uses(scale)
def apply_named(name: str, x: jax.Array) -> jax.Array:
    return TRANSFORMS[name](x)  # limit


# case: super().__call__ performs the base row
class Child(Base):
    @fx.uses(scale)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x) + 1  # E: effax-undeclared


# case: a constructor with a row, called outside it
@fx.uses(scale)
def build_embeddings() -> Embedding:
    return Embedding(10, 4)  # E: effax-undeclared


# case: a constructor with a row, under its stream
with seed_stream.seed(0):
    emb = Embedding(10, 4)
print(emb.lookup(3))


# case: a rowed lambda called under its handler
scale_by = fx.uses(scale)(lambda x: x * scale.ask())
with scale.provide(jnp.float32(0.5)):
    half = scale_by(jnp.ones(2))


# case: a rowed lambda called at module level
double_by = fx.uses(scale)(lambda x: 2 * x * scale.ask())
doubled = double_by(jnp.ones(2))  # E: effax-unhandled


# case: a class body draws at definition time
class Defaults:
    base = fx.random.normal((3,), stream=seed_stream)  # E: effax-unhandled


# case: an ExitStack handed to a helper
@fx.uses()
def run_with_helper() -> jax.Array:
    with contextlib.ExitStack() as stack:
        install_defaults(stack)
        return Base()(jnp.ones(3))  # limit


# case: a conditional callee at module level
noisy_flag = False
(jittered if noisy_flag else amplify_arr)(jnp.ones(3))  # limit
