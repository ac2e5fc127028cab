"""What a `jax.Ref` costs per call: a compiled step that adds `x` into an
accumulator, kept four ways, timed in the same run (interleaved rounds, median).

Run: python benchmarks/bench_refs.py [--quick]

- ``jax.jit`` of the pure step, the accumulator passed in and returned;
- ``jax.jit`` of the step taking a ref (``ref[...] += x``), raw JAX;
- ``effax.jit`` of the step reading and setting a `State` holding an array;
- ``effax.jit`` of the step writing into a ref held by an `Ask`.

A jitted call with a ref argument leaves JAX's C++ fast dispatch for its Python
path, so the two ref rows cost about the same, and both more than the array rows.
Every contender is checked to compute the same accumulator before it is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

acc_state = fx.State[jax.Array]("bench_refs.acc")
acc_ref = fx.Ask[Any]("bench_refs.ref")

X = jnp.ones(16, jnp.float32)


def _per_call(call: Callable[[], Any], calls: int) -> float:
    """Seconds per call of `call`, `calls` calls, results awaited at the end."""
    out = None
    start = time.perf_counter()
    for _ in range(calls):
        out = call()
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rounds, calls = (3, 200) if args.quick else (15, 2000)

    pure = jax.jit(lambda acc, x: acc + x)

    @jax.jit
    def raw_ref(ref: Any, x: jax.Array) -> jax.Array:
        ref[...] = ref[...] + x
        return x

    @fx.jit
    def with_state(x: jax.Array) -> jax.Array:
        acc_state.set(acc_state.get() + x)
        return x

    @fx.jit
    def with_ref(x: jax.Array) -> jax.Array:
        ref = acc_ref.ask()
        ref[...] = ref[...] + x
        return x

    acc = [jnp.zeros(16, jnp.float32)]
    ref = jax.new_ref(jnp.zeros(16, jnp.float32))
    own_ref = jax.new_ref(jnp.zeros(16, jnp.float32))

    def run_pure() -> Any:
        acc[0] = pure(acc[0], X)
        return acc[0]

    with acc_state.init(jnp.zeros(16, jnp.float32)) as cell, acc_ref.provide(ref):
        contenders: dict[str, Callable[[], Any]] = {
            "jax.jit (array in and out)": run_pure,
            "jax.jit (ref argument)": lambda: raw_ref(own_ref, X),
            "effax.jit (State of an array)": lambda: with_state(X),
            "effax.jit (Ask holding a ref)": lambda: with_ref(X),
        }
        for call in contenders.values():  # compile, and check they agree
            jax.block_until_ready(call())
        finals = [acc[0], own_ref[...], cell.value, ref[...]]
        for final in finals[1:]:
            np.testing.assert_array_equal(np.asarray(final), np.asarray(finals[0]))
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(rounds):
            for name, call in contenders.items():
                times[name].append(_per_call(call, calls))
    base = statistics.median(times["jax.jit (array in and out)"])
    results = {
        "jax": jax.__version__,
        "device": str(jax.devices()[0].platform),
        "rows": [
            {
                "contender": name,
                "us_per_call": statistics.median(ts) * 1e6,
                "vs_jax_jit": statistics.median(ts) / base,
            }
            for name, ts in times.items()
        ],
    }
    print(f"per-call time, jax {jax.__version__} on {results['device']}:")
    for r in results["rows"]:
        print(f"  {r['contender']:32s} {r['us_per_call']:8.1f} us  x{r['vs_jax_jit']:.1f}")
    return results


if __name__ == "__main__":
    print(json.dumps(main()["rows"], indent=1))
