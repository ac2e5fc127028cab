"""Async code, threads, named state, properties with rows, decorators and a CLI script."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import jax
import jax.numpy as jnp

import effax as fx
from b6lib.effects import bn_stats, init_key, losses, params, steps, temperature
from b6lib.layers import glorot, report, softmax_t

P = ParamSpec("P")
R = TypeVar("R")
X = jnp.linspace(0.0, 1.0, 6).reshape(2, 3)
CONFIG = temperature.provide(jnp.float32(0.5))


@fx.uses(temperature)
async def fetch_scaled(x: jax.Array) -> jax.Array:
    await asyncio.sleep(0)
    return softmax_t(x)


@fx.uses(temperature, losses)
async def fetch_and_report(x: jax.Array) -> jax.Array:
    y = await fetch_scaled(x)
    return report(jnp.sum(y))


# case: coroutines with rows awaited under handlers installed in the task
@fx.uses()
async def serve() -> list[jax.Array]:
    with CONFIG, losses.collect():
        return list(await asyncio.gather(fetch_and_report(X[0]), fetch_and_report(X[1])))


served = asyncio.run(serve())
handled_fetch = fx.handle(fetch_scaled, temperature.provide(jnp.float32(2.0)))
served_handled = asyncio.run(handled_fetch(X[0]))


# case: a coroutine whose row leaves out the losses it reports
@fx.uses(temperature)
async def fetch_and_report_narrow(x: jax.Array) -> jax.Array:
    y = await fetch_scaled(x)
    return report(jnp.sum(y))  # E: effax-undeclared


@fx.uses()
async def serve_narrow() -> jax.Array:
    with CONFIG, losses.collect():
        return await fetch_and_report_narrow(X[0])


served_narrow = asyncio.run(serve_narrow())

# case: a coroutine run at module level with nothing installed
served_bad = asyncio.run(fetch_scaled(X[0]))  # E: effax-unhandled


# case: threads entering one shared provider, each with its own cell
def worker(results: list[float], i: int) -> None:
    with CONFIG, steps.init(jnp.int32(0)) as cell:
        for _ in range(i + 1):
            steps.modify(lambda n: n + 1)
        results.append(float(softmax_t(X[0]).sum()) + int(cell.value))


results: list[float] = []
threads = [threading.Thread(target=worker, args=(results, i)) for i in range(3)]
for th in threads:
    th.start()
for th in threads:
    th.join()


# case: a thread target relying on the handlers of the thread that started it
@fx.uses(temperature)
def scaled_in_thread(out: list[jax.Array]) -> None:
    out.append(softmax_t(X[0]))  # limit: a thread's target is a function stored for later; its row is not checked where the thread runs it


thread_out: list[jax.Array] = []
with CONFIG:
    t = threading.Thread(target=scaled_in_thread, args=(thread_out,))
    t.start()
    t.join()


# case: running statistics in a StateDict, entries created on first use
@fx.uses(bn_stats)
def normalise(name: str, x: jax.Array) -> jax.Array:
    mean = bn_stats.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1]))
    bn_stats.set(f"{name}/mean", 0.9 * mean + 0.1 * jnp.mean(x, axis=0))
    return x - mean


@fx.uses(bn_stats)
def two_layers(x: jax.Array) -> jax.Array:
    return normalise("second", normalise("first", x))


with bn_stats.init() as stats_cell:
    for _ in range(3):
        fx.jit(two_layers)(X)
entries = sorted(stats_cell.value)

# case: the statistics read with no StateDict cell
normalised_bad = fx.jit(two_layers)(X)  # E: effax-unhandled


# case: a model whose row leaves out its running statistics
@fx.uses(temperature)
def tempered_norm(x: jax.Array) -> jax.Array:
    return normalise("t", x) / temperature.ask()  # E: effax-undeclared


with bn_stats.init(), CONFIG:
    tempered_out = tempered_norm(X)


# case: a layer whose weights property and setter have rows
class Layer:
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    @fx.uses(params)
    def weights(self) -> jax.Array:
        return params.get()[self.name]

    @weights.setter
    @fx.uses(params)
    def weights(self, value: jax.Array) -> None:
        params.modify(lambda p: {**p, self.name: value})

    @fx.uses(params)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weights


layer = Layer("w")
with params.init({"w": jnp.ones((3, 2))}) as p_cell:
    out = layer(X)
    layer.weights = 0.5 * layer.weights

# case: the property read and assigned with no params cell
w_bad = layer.weights  # E: effax-unhandled
layer.weights = jnp.zeros((3, 2))  # E: effax-unhandled


# case: a property read inside a function whose row lacks the params
@fx.uses(temperature)
def tempered_weights(lyr: Layer) -> jax.Array:
    return lyr.weights / temperature.ask()  # E: effax-undeclared


with params.init({"w": jnp.ones((3, 2))}), CONFIG:
    tw = tempered_weights(layer)


# case: a decorator of one's own placed inside the row declaration
def timed(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _ = time.perf_counter() - start

    return wrapper


@fx.uses(temperature)
@timed
def timed_softmax(x: jax.Array) -> jax.Array:
    return softmax_t(x)


with CONFIG:
    timed_ok = timed_softmax(X)
timed_bad = timed_softmax(X)  # E: effax-unhandled


# case: the decorator of one's own placed around the row declaration
@timed
@fx.uses(temperature)
def softmax_timed(x: jax.Array) -> jax.Array:
    return softmax_t(x)


with CONFIG:
    timed_outer_ok = softmax_timed(X)
timed_outer_bad = softmax_timed(X)  # limit: rows behind an unknown decorator placed around @effax.uses are not seen


# case: a dataclass whose default factory draws initial weights
@fx.uses(init_key)
def fresh_weights() -> jax.Array:
    return glorot(3, 2)


@dataclasses.dataclass
class Checkpoint:
    step: int = 0
    weights: jax.Array = dataclasses.field(default_factory=fresh_weights)


with init_key.seed(0):
    ckpt = Checkpoint()
ckpt_bad = Checkpoint(step=1)  # limit: a function stored for later (dataclasses.field(default_factory=...)) is not followed


# case: a CLI training script, every handler installed around the loop
@fx.uses(params, steps, losses)
def sgd(x: jax.Array, lr: float) -> jax.Array:
    steps.modify(lambda n: n + 1)
    w = params.get()["w"]
    loss, g = jax.value_and_grad(lambda w_: jnp.mean((x @ w_) ** 2))(w)
    params.set({"w": w - lr * g})
    return report(loss)


def cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = cli(sys.argv[1:])
    step_fn = fx.jit(sgd, static_argnums=1)
    with fx.handlers(params.init({"w": jnp.ones((3, 2))}), steps.init(jnp.int32(0)), losses.collect()) as run:
        for _ in range(args.steps):
            step_fn(X, args.lr)

# case: the CLI script that collects losses only when asked to
if __name__ == "__main__":
    args = cli(sys.argv[1:])
    with params.init({"w": jnp.ones((3, 2))}), steps.init(jnp.int32(0)):
        for _ in range(args.steps):
            fx.jit(sgd, static_argnums=1)(X, args.lr)  # E: effax-unhandled


# case: a property setter reached from a function whose row lacks the params
@fx.uses(temperature)
def rescale(lyr: Layer) -> None:
    lyr.weights = jnp.ones((3, 2)) * temperature.ask()  # E: effax-undeclared


with params.init({"w": jnp.ones((3, 2))}), CONFIG:
    rescale(layer)
