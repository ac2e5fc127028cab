"""Ordinary Python shapes around effects: classes, lambdas, closures, decorators,
containers, contextlib, try/except, async, threads, dataclasses, Protocols, generics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import jax
import jax.numpy as jnp

import effax as fx
from optics.effects import acts, losses, lr, noise, step_count, temperature
from optics.layers import Dense, Meter, NoisyDense, counted_update, jitter, logged_update, report_loss, sgd_update

T = TypeVar("T")
w = jnp.ones(3)
g = jnp.full(3, 0.1)
history = fx.Emit[jax.Array]("history")


def opaque(fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    """A decorator of my own without functools.wraps."""

    def wrapper(*args: Any) -> jax.Array:
        return fn(*args)

    return wrapper


# case: class body performs an effect at definition, unhandled
class Defaults:
    base_lr = float(lr.ask())  # E: effax-unhandled

# case: class body asks an effect with a default
class Tuned:
    temp = temperature.ask()

# case: class body under a handler at definition
with lr.provide(jnp.float32(0.01)):

    class Frozen:
        base_lr = float(lr.ask())


print(Frozen.base_lr)

# case: __init__ with a row, constructed at module level
class Counter:
    @fx.uses(step_count)
    def __init__(self) -> None:
        self.start = step_count.get()


Counter()  # E: effax-unhandled
with step_count.init(jnp.int32(5)):
    Counter()

# case: property with a row read at module level
meter = Meter()
meter.steps  # E: effax-unhandled
with step_count.init(jnp.int32(1)):
    print(meter.steps)

# case: property with a row read inside a row lacking the state
@fx.uses(lr)
def lr_times_steps() -> jax.Array:
    return lr.ask() * Meter().steps  # E: effax-undeclared


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(3)):
    lr_times_steps()

# case: super().__call__ in a subclass whose row lacks the parent's tap
class QuietDense(Dense):
    @fx.uses(noise)
    def __call__(self, x: jax.Array) -> jax.Array:
        return jitter(super().__call__(x))  # E: effax-undeclared


with acts.ignore(), noise.seed(0):
    QuietDense(jnp.eye(3))(w)

# case: subclass with the full row, called under handlers
with acts.record(), noise.seed(0):
    NoisyDense(jnp.eye(3))(w)

# case: an instance called at module level, constructed inline
Dense(jnp.eye(3))(w)  # E: effax-unhandled

# case: a lambda held in a variable, called at module level
ask_lr = lambda: lr.ask()  # noqa: E731
ask_lr()  # E: effax-unhandled, no-untyped-call
with lr.provide(jnp.float32(0.2)):
    ask_lr()  # E: no-untyped-call

# case: a lambda given a row, called at module level
emit_loss = fx.uses(losses)(lambda v: losses.emit(jnp.sum(v)))
emit_loss(w)  # E: effax-unhandled
with losses.collect():
    emit_loss(w)

# case: closure defined and called inside a row function, its effect in the row
@fx.uses(lr, step_count)
def closure_ok(v: jax.Array) -> jax.Array:
    def tick() -> jax.Array:
        return step_count.modify(lambda n: n + 1)

    tick()
    return v * lr.ask()


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    closure_ok(w)

# case: closure called inside a row function, its effect not in the row
@fx.uses(lr)
def closure_bad(v: jax.Array) -> jax.Array:
    def tick() -> jax.Array:
        return step_count.modify(lambda n: n + 1)

    tick()  # E: effax-undeclared
    return v * lr.ask()


with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    closure_bad(w)

# case: a lambda in a variable inside a row function, called there
@fx.uses(lr)
def lambda_bad(v: jax.Array) -> jax.Array:
    draw = lambda: jax.random.normal(noise.next_key())  # noqa: E731
    return v * lr.ask() + draw()  # E: effax-undeclared, no-untyped-call


with lr.provide(jnp.float32(0.1)), noise.seed(0):
    lambda_bad(w)

# case: an unknown decorator around @uses hides the row
@opaque
@fx.uses(lr)
def hidden_row(v: jax.Array) -> jax.Array:
    return v * lr.ask()


hidden_row(w)  # limit: a decorator of my own placed around @uses hides the row (UnhandledEffectError)

# case: a signature-keeping decorator under @uses keeps the row
logged_update(w, g)  # E: effax-unhandled
with lr.provide(jnp.float32(0.1)):
    logged_update(w, g)

# case: callbacks stored in a list and called later
callbacks: list[Callable[[jax.Array], jax.Array]] = [jitter, report_loss]
for cb in callbacks:
    cb(w)  # limit: functions held in containers carry no row (UnhandledEffectError)

# case: callbacks stored in a dict, called under their handlers
registry: dict[str, Callable[[jax.Array], jax.Array]] = {"jitter": jitter, "loss": report_loss}
with noise.seed(0), losses.collect():
    for name, fn in registry.items():
        fn(w)

# case: a function passed as a parameter is not followed
def apply_twice(fn: Callable[[jax.Array], jax.Array], v: jax.Array) -> jax.Array:
    return fn(fn(v))


apply_twice(jitter, w)  # limit: a function passed to a function of my own is called there (UnhandledEffectError)

# case: ExitStack entering handlers by hand
with contextlib.ExitStack() as stack:
    stack.enter_context(lr.provide(jnp.float32(0.1)))
    stack.enter_context(step_count.init(jnp.int32(0)))
    counted_update(w, g)

# case: ExitStack that misses one handler
with contextlib.ExitStack() as stack2:
    stack2.enter_context(step_count.init(jnp.int32(0)))
    counted_update(w, g)  # limit: after enter_context the rest of the block is not reported (lr unhandled)

# case: a context manager of my own that installs handlers
@contextlib.contextmanager
def training_context(rate: float) -> Iterator[None]:
    with fx.handlers(lr.provide(jnp.float32(rate)), step_count.init(jnp.int32(0))):
        yield


with training_context(0.1):
    counted_update(w, g)

# case: contextlib.suppress around an optional effect
with contextlib.suppress(fx.UnhandledEffectError):
    history.emit(w)

# case: try/except around an optional effect at module level
try:
    history.emit(w)
except fx.UnhandledEffectError:
    pass

# case: try/except LookupError, a base class of the error
try:
    report_loss(w)
except LookupError:
    pass

# case: try/except catching only the undeclared error at module level
try:
    history.emit(w)  # E: effax-unhandled
except fx.UndeclaredEffectError:
    pass

# case: optional effect inside a row function, caught
@fx.uses(lr)
def maybe_log(v: jax.Array) -> jax.Array:
    try:
        history.emit(v)
    except fx.UndeclaredEffectError:
        pass
    return v * lr.ask()


with lr.provide(jnp.float32(0.1)), history.collect():
    maybe_log(w)

# case: optional effect inside a row function, the wrong except
@fx.uses(lr)
def maybe_log_bad(v: jax.Array) -> jax.Array:
    try:
        history.emit(v)  # E: effax-undeclared
    except fx.UnhandledEffectError:
        pass
    return v * lr.ask()


with lr.provide(jnp.float32(0.1)), history.collect():
    maybe_log_bad(w)

# case: a dataclass whose method has a row
@dataclasses.dataclass
class Optimizer:
    momentum: float = 0.9
    velocity: jax.Array = dataclasses.field(default_factory=lambda: jnp.zeros(3))

    @fx.uses(lr)
    def step(self, v: jax.Array, grad: jax.Array) -> jax.Array:
        self.velocity = self.momentum * self.velocity + grad
        return v - lr.ask() * self.velocity

    @fx.uses(lr)
    def step_counted(self, v: jax.Array, grad: jax.Array) -> jax.Array:
        step_count.modify(lambda n: n + 1)  # E: effax-undeclared
        return self.step(v, grad)


opt = Optimizer()
with lr.provide(jnp.float32(0.1)):
    opt.step(w, g)
with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    opt.step_counted(w, g)
opt.step(w, g)  # E: effax-unhandled

# case: a dataclass __post_init__ with a row, constructed under the stream
@dataclasses.dataclass
class Init:
    shape: tuple[int, ...]
    value: jax.Array = dataclasses.field(init=False)

    @fx.uses(noise)
    def __post_init__(self) -> None:
        self.value = jax.random.normal(noise.next_key(), self.shape)


with noise.seed(0):
    Init((2,))
Init((2,))  # limit: __post_init__ is called by the generated __init__, which has no row (UnhandledEffectError)

# case: a Protocol-typed layer is not checked
class Layer(Protocol):
    def __call__(self, x: jax.Array) -> jax.Array: ...


def run_layer(layer: Layer, x: jax.Array) -> jax.Array:
    return layer(x)


run_layer(Dense(jnp.eye(3)), w)  # limit: the layer arrives as a Protocol-typed parameter (UnhandledEffectError)

# case: a generic buffer whose push has a row
class Buffer(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []

    @fx.uses(history)
    def push(self, item: T, v: jax.Array) -> None:
        self.items.append(item)
        history.emit(v)


Buffer[int]().push(1, w)  # E: effax-unhandled
with history.collect() as hist:
    Buffer[str]().push("a", w)

# case: generic buffer pushed from a row lacking the emit
@fx.uses(lr)
def push_all(v: jax.Array) -> jax.Array:
    buf: Buffer[float] = Buffer()
    buf.push(0.5, v)  # E: effax-undeclared
    return v * lr.ask()


with lr.provide(jnp.float32(1.0)), history.collect():
    push_all(w)

# case: async function with a row, awaited under handlers
@fx.uses(lr)
async def async_update(v: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    return sgd_update(v, g)


async def main_ok() -> jax.Array:
    with lr.provide(jnp.float32(0.1)):
        return await async_update(w)


asyncio.run(main_ok())

# case: async function performing an effect outside its row
@fx.uses(lr)
async def async_counted(v: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    step_count.modify(lambda n: n + 1)  # E: effax-undeclared
    return sgd_update(v, g)


async def main_bad() -> jax.Array:
    with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
        return await async_counted(w)


asyncio.run(main_bad())

# case: async pure entry point that installs its handler inside
@fx.uses()
async def async_entry(v: jax.Array) -> jax.Array:
    with lr.provide(jnp.float32(0.1)):
        return await async_update(v)


asyncio.run(async_entry(w))

# case: a thread target that installs its own handlers
results: list[jax.Array] = []


def worker(seed: int) -> None:
    with noise.seed(seed):
        results.append(jitter(w))


threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()

# case: a thread target relying on the spawning thread's handlers
def bare_worker() -> None:
    results.append(jitter(w))  # limit: a new thread does not inherit the handlers; the function is not called where it is passed


with noise.seed(0):
    th = threading.Thread(target=bare_worker)
    th.start()
    th.join()

# case: an async function with a row awaited without its handler at module level
asyncio.run(async_update(w))  # E: effax-unhandled

# case: gather of two row coroutines under one handler
async def main_gather() -> list[jax.Array]:
    with lr.provide(jnp.float32(0.1)):
        return list(await asyncio.gather(async_update(w), async_update(g)))


asyncio.run(main_gather())

# case: a dataclass field default that asks a defaulted effect at class creation
@dataclasses.dataclass
class Temperatures:
    t: float = temperature.ask()

# case: a dataclass field default that reads a state at class creation
@dataclasses.dataclass
class StepAt:
    at: jax.Array = dataclasses.field(default=step_count.get())  # E: effax-unhandled

# case: a staticmethod with a row called through the class
class Tools:
    @staticmethod
    @fx.uses(noise)
    def shake(v: jax.Array) -> jax.Array:
        return jitter(v)


Tools.shake(w)  # E: effax-unhandled
with noise.seed(0):
    Tools.shake(w)
