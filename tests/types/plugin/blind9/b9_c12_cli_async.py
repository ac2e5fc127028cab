"""A command-line experiment runner: classes with rows, async workers, threads, a __main__ block."""

from __future__ import annotations

import argparse
import asyncio
import threading
from typing import Generic, TypeVar

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import gain, losses, metrics, steps, temperature, verbose
from b9lib.layers import count, report, soften

T = TypeVar("T")
queue_len = fx.State[jax.Array]("queue_len")
worker_name = fx.Ask[str]("worker_name", static=True)

logits = jnp.array([1.0, 2.0, 0.5])

# case: a scheduler class with rowed methods


class Scheduler:
    @fx.uses(steps)
    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        count()

    @fx.uses(steps)
    def factor(self) -> jax.Array:
        return jnp.minimum(1.0, steps.get() / self.warmup)

    @fx.uses(steps, temperature)
    def __call__(self, v: jax.Array) -> jax.Array:
        return self.factor() * soften(v)

    @fx.uses(steps)
    def clone(self) -> Scheduler:
        return type(self)(self.warmup)


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(2.0)):
    sched = Scheduler(4)
    sched(logits)
    sched.clone()

# case: scheduler called with only the counter

with steps.init(jnp.int32(0)):
    sched(logits)  # E: effax-unhandled

# case: a subclass calling super().__call__ from a narrower row


class LoudScheduler(Scheduler):
    @fx.uses(steps)
    def __call__(self, v: jax.Array) -> jax.Array:
        return super().__call__(v)  # E: effax-undeclared


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(2.0)):
    LoudScheduler(2)(logits)

# case: a property setter with a row


class Gauge2:
    def __init__(self) -> None:
        self._v = jnp.float32(0)

    @property
    def reading(self) -> jax.Array:
        return self._v  # E: no-any-return

    @reading.setter
    @fx.uses(metrics)
    def reading(self, v: jax.Array) -> None:
        metrics.emit(v)
        self._v = v


gauge2 = Gauge2()
with metrics.collect():
    gauge2.reading = jnp.float32(3.0)
gauge2.reading = jnp.float32(4.0)  # E: effax-unhandled

# case: a generic buffer whose push counts


class Buffer(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []

    @fx.uses(queue_len)
    def push(self, item: T) -> None:
        self.items.append(item)
        queue_len.modify(lambda n: n + 1)


with queue_len.init(jnp.int32(0)):
    Buffer[int]().push(1)
Buffer[int]().push(2)  # E: effax-unhandled

# case: conditional callee from two rowed functions


@fx.uses(temperature)
def cool(v: jax.Array) -> jax.Array:
    return soften(v)


@fx.uses(steps)
def counted_identity(v: jax.Array) -> jax.Array:
    count()
    return v


fast_mode = True
with temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0)):
    (cool if fast_mode else counted_identity)(logits)
with temperature.provide(jnp.float32(1.0)):
    (counted_identity if fast_mode else cool)(logits)  # E: effax-unhandled

# case: readers in a list literal indexed by number

with temperature.provide(jnp.float32(1.0)):
    [cool, soften][0](logits)
with steps.init(jnp.int32(0)):
    [cool, counted_identity][0](logits)  # E: effax-unhandled

# case: async workers with rows


@fx.uses(worker_name, steps)
async def worker(v: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    count()
    return v * (2.0 if worker_name.ask() == "double" else 1.0)


@fx.uses()
async def run_workers() -> list[jax.Array]:
    async def one(name: str) -> jax.Array:
        with worker_name.provide(name), steps.init(jnp.int32(0)):
            return await worker(logits)

    return list(await asyncio.gather(one("double"), one("single")))


results = asyncio.run(run_workers())

# case: async entry point that forgets the worker name


@fx.uses()
async def run_unnamed() -> jax.Array:
    with steps.init(jnp.int32(0)):
        return await worker(logits)  # E: effax-undeclared


with worker_name.provide("double"):
    asyncio.run(run_unnamed())

# case: an async function called at module level without handlers

asyncio.run(worker(logits))  # E: effax-unhandled

# case: threads each with their own cells

thread_results: list[jax.Array] = []


def thread_job(seed: int) -> None:
    with steps.init(jnp.int32(seed)) as cell:
        count()
        thread_results.append(cell.value)


threads = [threading.Thread(target=thread_job, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()

# case: a thread target relying on the main thread's handlers


def bare_job() -> None:
    thread_results.append(count())  # limit: a thread's target is stored for later and sees its own handler stack


with steps.init(jnp.int32(0)):
    th = threading.Thread(target=bare_job)
    th.start()
    th.join()

# case: callbacks stored in a list and run later

callbacks = []
callbacks.append(lambda: report(jnp.float32(1.0)))
with losses.collect() as cb_losses:
    for cb in callbacks:
        cb()  # E: no-untyped-call

# case: a plain helper without a row performing outside its caller's row


def untyped_helper(v: jax.Array) -> jax.Array:
    return v + steps.get()


@fx.uses(temperature)
def uses_helper(v: jax.Array) -> jax.Array:
    return untyped_helper(soften(v))  # limit: calls to functions without a row are not checked


with temperature.provide(jnp.float32(1.0)), steps.init(jnp.int32(0)):
    uses_helper(logits)

# case: verbose flag with a default inside the experiment row


@fx.uses(temperature, verbose, gain)
def experiment(v: jax.Array) -> jax.Array:
    out = soften(v) * gain.ask()
    if verbose.ask():
        print(out)
    return out


with temperature.provide(jnp.float32(0.5)):
    experiment(logits)

# case: the command-line entry point


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2)
    return parser.parse_args(argv)


@fx.uses()
def main(args: argparse.Namespace) -> jax.Array:
    with fx.handlers(steps.init(jnp.int32(0)), temperature.provide(jnp.float32(args.temperature)), losses.collect()):
        s = Scheduler(args.warmup)
        out = logits
        for _ in range(args.steps):
            out = report(jnp.sum(s(out)))
    return out


if __name__ == "__main__":
    final = main(parse([]))
    with steps.init(jnp.int32(0)):
        Scheduler(2)(logits)  # E: effax-unhandled
    with fx.handlers(steps.init(jnp.int32(0)), temperature.provide(jnp.float32(1.0))):
        Scheduler(2)(logits)
