"""Cost of `JitAwareContextVar.get()` and of the effect operations, eagerly.

Run: python benchmarks/bench_context.py [--quick]

Prints medians in microseconds per call, each next to the baseline it wraps,
measured in the same run (the stdlib ContextVar.get, and the raw JAX work).
"""

from __future__ import annotations

import argparse
import contextvars
import json
import statistics
import timeit
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx


def median_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    number, repeat = (10, 1) if args.quick else (100_000, 7)

    stdlib = contextvars.ContextVar[int]("stdlib")
    stdlib.set(1)
    var = fx.JitAwareContextVar[int]("bench")
    ask = fx.Ask[float]("ask")
    state = fx.State[jax.Array]("state")
    stream = fx.RandomKey("stream")
    log = fx.Emit[jax.Array]("log")
    x = jnp.float32(1.0)
    key = jax.random.key(0)

    results: dict[str, float] = {}
    with var.set_on_enter(1):
        results["ContextVar.get (stdlib)"] = median_us(stdlib.get, number, repeat)
        results["JitAwareContextVar.get"] = median_us(var.get, number, repeat)
    with fx.handlers(ask.provide(0.5), state.init(x), stream.seed(key), log.collect()) as hs:
        results["Ask.ask"] = median_us(ask.ask, number, repeat)
        results["State.get"] = median_us(state.get, number, repeat)
        results["State.set"] = median_us(lambda: state.set(x), number, repeat)
        ops_number = max(number // 50, 10)
        results["RandomKey.next_key"] = median_us(stream.next_key, ops_number, repeat)
        results["jax.random.fold_in (raw work)"] = median_us(
            lambda: jax.random.fold_in(key, 3), ops_number, repeat
        )
        results["Emit.emit"] = median_us(lambda: log.emit(x), number, repeat)
        hs.handler(log).values.clear()
    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value:8.3f} us")
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
