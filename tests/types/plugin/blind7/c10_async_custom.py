"""A data loader service: a custom meter effect, async fetches, worker threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import attrs
import jax
import jax.numpy as jnp

import effax as fx
from b7lib.effects import losses, run_name


class Meter(fx.Effect["Gauge"]):
    """Counts bytes read; the total is carried through compiled regions."""

    operations = ("add",)

    def add(self, amount: jax.Array) -> None:
        self.handler().add(amount)

    def gauge(self) -> Gauge:
        return Gauge(self)


@attrs.define(eq=False)
class Gauge(fx.Handler[Meter]):
    effect: Meter
    total: jax.Array = attrs.field(factory=lambda: jnp.float32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount: jax.Array) -> None:
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    @property
    def value(self) -> jax.Array:
        return self.total

    @classmethod
    def rebuild(cls, effect: Meter, static: Any, const: Any, carry: Any) -> Gauge:
        return cls(effect, carry)


class Capped(fx.Interceptor[Meter]):
    """Adds at most `cap` per read to the meter outside."""

    def __init__(self, effect: Meter, cap: float) -> None:
        super().__init__(effect, ())
        self.cap = cap

    def add(self, amount: jax.Array) -> None:
        self.outer().add(jnp.minimum(amount, self.cap))


class Blackhole(fx.Interceptor[Meter]):
    """Swallows every read: answers alone."""

    def add(self, amount: jax.Array) -> None:
        del amount


bytes_read = Meter("bytes_read")
shard_id = fx.Ask[int]("shard_id", static=True)
shard_map_cfg = fx.Ask[dict[int, str]]("shard_map_cfg", static=True)
status = fx.State[str]("status")
fill = fx.State[float]("fill")
fetch_key = fx.RandomKey("fetch_key")


@fx.uses(bytes_read, fetch_key)
def read_record(n: int) -> jax.Array:
    rec = jax.random.uniform(fetch_key.next_key(), (n,))
    bytes_read.add(jnp.float32(4 * n))
    return rec


@fx.uses(bytes_read, fetch_key, shard_id)
async def fetch(n: int) -> jax.Array:
    await asyncio.sleep(0)
    return read_record(n) + shard_id.ask()


@fx.uses(bytes_read, fetch_key)
async def fetch_unsharded(n: int) -> jax.Array:
    await asyncio.sleep(0)
    return read_record(n) + shard_id.ask()  # E: effax-undeclared


@fx.uses()
async def load_all(sizes: list[int]) -> list[jax.Array]:
    with bytes_read.gauge(), fetch_key.seed(0), shard_id.provide(1):
        return list(await asyncio.gather(*(fetch(n) for n in sizes)))


@fx.uses(bytes_read)
async def load_some(sizes: list[int]) -> list[jax.Array]:
    with fetch_key.seed(0):
        return [await fetch(n) for n in sizes]  # E: effax-undeclared


# case: an async pure entry point that handles everything inside
records = asyncio.run(load_all([2, 3]))

# case: an async loader whose row forgets the shard (a shard provided outside)
with bytes_read.gauge(), shard_id.provide(2):
    asyncio.run(load_some([2]))

# case: an async fetch whose row omits the shard id (provided outside)
with bytes_read.gauge(), fetch_key.seed(1), shard_id.provide(0):
    asyncio.run(fetch_unsharded(2))

# case: a record read under a gauge and a seed, eager and compiled
with bytes_read.gauge() as g, fetch_key.seed(2):
    r1 = read_record(3)
    r2 = fx.jit(read_record, static_argnums=0)(3)

# case: a record read with no gauge
with fetch_key.seed(2):
    read_record(3)  # E: effax-unhandled

# case: a record read with nothing
read_record(2)  # E: effax-unhandled

# case: a capped meter forwarding to a gauge
with bytes_read.gauge() as capped_total, Capped(bytes_read, 4.0), fetch_key.seed(3):
    read_record(8)
    fx.jit(read_record, static_argnums=0)(8)

# case: a capped meter with no gauge behind it
with Capped(bytes_read, 4.0), fetch_key.seed(3):
    read_record(8)  # E: effax-unhandled

# case: a blackhole meter answers alone
with Blackhole(bytes_read, ()), fetch_key.seed(3):
    read_record(8)

# case: a capped meter from a variable, forwarding to nothing
cap_small = Capped(bytes_read, 1.0)
with cap_small, fetch_key.seed(4):
    fx.jit(read_record, static_argnums=0)(2)  # E: effax-unhandled

# case: the meter's operation performed directly at module level
bytes_read.add(jnp.float32(1.0))  # E: effax-unhandled

# case: the meter's operation intercepted by a lambda that forwards
with fx.intercept(bytes_read, add=lambda outer, a: outer.add(10 * a)):
    bytes_read.add(jnp.float32(1.0))  # E: effax-unhandled

# case: the meter's operation intercepted over a gauge
with bytes_read.gauge(), fx.intercept(bytes_read, add=lambda outer, a: outer.add(10 * a)):
    bytes_read.add(jnp.float32(1.0))


@fx.uses(bytes_read, fetch_key)
def worker_job(n: int) -> jax.Array:
    return read_record(n)


def worker_with_handlers(out: list[jax.Array]) -> None:
    with bytes_read.gauge(), fetch_key.seed(5):
        out.append(worker_job(2))


# case: worker threads that install their own handlers
results: list[jax.Array] = []
threads = [threading.Thread(target=worker_with_handlers, args=(results,)) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()


def bare_worker() -> None:
    worker_job(2)  # limit: a thread's target is stored for later: the plugin does not follow it


# case: a worker thread started inside handlers, which a thread does not inherit
with bytes_read.gauge(), fetch_key.seed(6):
    th = threading.Thread(target=bare_worker)
    th.start()
    th.join()


@fx.uses(status)
def status_code() -> jax.Array:
    return jnp.int32(len(status.get()))  # E: no-any-return


# case: a string status read eagerly
with status.init("idle"):
    code = status_code()

# case: a string status read by a compiled call
with status.init("idle"):
    fx.jit(status_code)()  # E: effax-handler-type

# case: a hashable static shard id
with shard_id.provide(3):
    sid = shard_id.ask()

# case: a shard table given as a dict to a static Ask
with shard_map_cfg.provide({0: "a", 1: "b"}):  # E: effax-handler-type
    pass


@fx.uses(fill)
def fill_state(n: int) -> None:
    fx.fori_loop(0, n, lambda i, c: (fill.modify(lambda f: f + 0.5), c)[1], jnp.int32(0))


# case: a fill level kept as a float through a loop
with fill.init(0.0) as fl:
    fill_state(3)

# case: a fill level started from an int, updated in a loop
with fill.init(0) as fl:  # E: effax-handler-type
    fill_state(3)

# case: a fill level with no state
fill_state(2)  # E: effax-unhandled


@fx.uses(run_name, losses)
def tagged_loss(v: jax.Array) -> jax.Array:
    losses.emit(v)
    return v if run_name.ask() == "run" else 2 * v


# case: a tagged loss under a collector, with the default run name
with losses.collect():
    tagged_loss(jnp.float32(1.0))

# case: a tagged loss with no collector, name provided
with run_name.provide("exp"):
    tagged_loss(jnp.float32(1.0))  # E: effax-unhandled


@fx.uses(losses)
def tagged_twice(v: jax.Array) -> jax.Array:
    return tagged_loss(v) + tagged_loss(v)  # E: effax-undeclared


# case: a function whose row omits the run name its callee asks (provided outside)
with losses.collect(), run_name.provide("exp"):
    tagged_twice(jnp.float32(1.0))

# case: a string status under a handled function compiled by jax.jit
with status.init("busy"):
    fx.handle(status_code, transform=jax.jit)()  # E: effax-handler-type
