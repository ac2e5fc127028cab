"""Async and threaded serving: handlers per task and per thread, a context variable, a worker pool."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import metrics, scale_factor, step_count, temperature
from b10lib.layers import tempered_softmax, tick

request_id = fx.JitAwareContextVar[int]("request_id")
served = fx.State[jax.Array]("served")
LOGITS = jnp.array([1.0, 2.0, 0.5])


@fx.uses(temperature)
async def score(x: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    return tempered_softmax(x)


@fx.uses(temperature, served)
async def serve(x: jax.Array) -> jax.Array:
    served.modify(lambda n: n + 1)
    return await score(x)


# case: one request served in an event loop, the handlers around asyncio.run
@fx.uses(temperature, served)
async def main_one() -> jax.Array:
    return await serve(LOGITS)


with temperature.provide(jnp.float32(1.0)), served.init(jnp.int32(0)) as sv:
    asyncio.run(main_one())
print(sv.value)


# case: a pure async entry that forgets the served counter
@fx.uses()
async def main_bad() -> jax.Array:
    with temperature.provide(jnp.float32(1.0)):
        return await serve(LOGITS)  # E: effax-undeclared


with served.init(jnp.int32(0)):
    asyncio.run(main_bad())


# case: concurrent requests, each task installing its own handlers
@fx.uses()
async def handle_request(t: float) -> jax.Array:
    with temperature.provide(jnp.float32(t)), served.init(jnp.int32(0)):
        return await serve(LOGITS)


@fx.uses()
async def main_many() -> list[jax.Array]:
    return list(await asyncio.gather(*(handle_request(t) for t in (0.5, 1.0, 2.0))))


print(len(asyncio.run(main_many())))

# case: a coroutine function handled by fx.handle, no transform
handled_score = fx.handle(score, temperature.provide(jnp.float32(0.7)))
print(asyncio.run(handled_score(LOGITS)))

# case: a coroutine of a function with a row, run at module level with no temperature
asyncio.run(score(LOGITS))  # E: effax-unhandled

# case: a request id in a JIT-aware context variable, set around an eager call
with request_id.set_on_enter(7):
    print(request_id.get())


# case: threads, each with its own cell, combined after join
@fx.uses(step_count, scale_factor)
def work(x: jax.Array) -> jax.Array:
    tick()
    return x * scale_factor.ask()


results: list[jax.Array] = []
lock = threading.Lock()


def thread_main(i: int) -> None:
    with step_count.init(jnp.int32(0)) as cell, scale_factor.provide(jnp.float32(i)):
        work(LOGITS)
        work(LOGITS)
    with lock:
        results.append(cell.value)


threads = [threading.Thread(target=thread_main, args=(i,)) for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(results))

# case: a worker pool whose workers install their own handlers
with concurrent.futures.ThreadPoolExecutor(2) as pool:
    outs = list(pool.map(lambda i: fx.handle(work, step_count.init(jnp.int32(0)), scale_factor.provide(jnp.float32(i)))(LOGITS), range(2)))
print(len(outs))

# case: a worker pool given the bare function, the handlers installed in the main thread only
with step_count.init(jnp.int32(0)), scale_factor.provide(jnp.float32(2.0)):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(work, LOGITS).result()  # limit: a function handed to an executor is stored for later

# case: work called at module level with the scale missing
with step_count.init(jnp.int32(0)):
    work(LOGITS)  # E: effax-unhandled


# case: an async metrics reporter that emits outside its row, run under a collector
@fx.uses(temperature)
async def report(x: jax.Array) -> None:
    p = await score(x)
    metrics.emit(jnp.max(p))  # E: effax-undeclared


with temperature.provide(jnp.float32(1.0)), metrics.collect():
    asyncio.run(report(LOGITS))


# case: the reporter with the emit declared
@fx.uses(temperature, metrics)
async def report_ok(x: jax.Array) -> None:
    p = await score(x)
    metrics.emit(jnp.max(p))


with temperature.provide(jnp.float32(1.0)), metrics.collect() as mc:
    asyncio.run(report_ok(LOGITS))
print(mc.values)

# case: one module-level handler object entered by several threads at once
SHARED_T = temperature.provide(jnp.float32(0.5))
probs: list[jax.Array] = []


def probe() -> None:
    with SHARED_T:
        p = tempered_softmax(LOGITS)
    with lock:
        probs.append(p)


ts = [threading.Thread(target=probe) for _ in range(2)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(len(probs))

# case: the shared handler object, but the softmax called outside its with
with SHARED_T:
    pass
tempered_softmax(LOGITS)  # E: effax-unhandled

# case: handlers entered with an ExitStack for a variable number of scale factors
import contextlib  # noqa: E402

with contextlib.ExitStack() as stack:
    stack.enter_context(step_count.init(jnp.int32(0)))
    stack.enter_context(scale_factor.provide(jnp.float32(3.0)))
    print(work(LOGITS))


# case: an async batch scorer that awaits under a timeout, its row covering the scorer
@fx.uses(temperature)
async def score_with_timeout(x: jax.Array) -> jax.Array:
    return await asyncio.wait_for(score(x), timeout=5.0)


with temperature.provide(jnp.float32(1.0)):
    print(asyncio.run(score_with_timeout(LOGITS)))


# case: an async warm-up whose row omits the temperature
@fx.uses(served)
async def warm_up() -> None:
    served.modify(lambda n: n + 1)
    await score(LOGITS)  # E: effax-undeclared


with temperature.provide(jnp.float32(1.0)), served.init(jnp.int32(0)):
    asyncio.run(warm_up())


# case: a JIT-compiled pure entry point per thread, each with its own cell
@fx.uses()
def thread_entry(x: jax.Array, s: jax.Array) -> jax.Array:
    with step_count.init(jnp.int32(0)), scale_factor.provide(s):
        return work(x)


entry_jit = jax.jit(thread_entry)
outs2: list[jax.Array] = []


def run_entry(i: int) -> None:
    y = entry_jit(LOGITS, jnp.float32(i))
    with lock:
        outs2.append(y)


ts2 = [threading.Thread(target=run_entry, args=(i,)) for i in range(2)]
for t in ts2:
    t.start()
for t in ts2:
    t.join()
print(len(outs2))


# case: a pure entry point that forgets the scale factor, called eagerly under one
@fx.uses()
def thread_entry_bad(x: jax.Array) -> jax.Array:
    with step_count.init(jnp.int32(0)):
        return work(x)  # E: effax-undeclared


with scale_factor.provide(jnp.float32(2.0)):
    thread_entry_bad(LOGITS)
