"""Case 4: trace + lower + compile time of a function performing 1,000 effect operations.

Run: python benchmarks/bench_compile.py [--quick]

Two functions of 1,000 effect operations each: (a) 250 rounds of ``ask``, ``get``,
``set`` and ``emit``; (b) 40 rounds of one ``next_key`` (and a ``uniform`` draw)
followed by six rounds of (a). The hand-plumbed versions compute the same outputs
from explicit inputs (the same keys, ``fold_in(base_key, counter + j)``, the
running value in and out, the emitted values as a tuple output).

Both go through the same transform, which stages ``jax.jit`` explicitly
(``.trace`` / ``.lower`` / ``.compile``) and times each stage, so the comparison
covers everything effax adds while tracing and nothing else. Each repetition
builds fresh Python functions, so no JAX cache is hit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import _harness as h
import jax
import jax.numpy as jnp

import effax as fx

scale = fx.Ask[jax.Array]("compile.scale")
noise = fx.RandomKey("compile.noise")
total = fx.State[jax.Array]("compile.total")
log = fx.Emit[jax.Array]("compile.log")


class StagedJit:
    """A transform: ``jax.jit`` staged by hand, recording how long each stage took."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        jitted = jax.jit(fn)

        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            traced = jitted.trace(*args, **kwargs)
            t1 = time.perf_counter()
            lowered = traced.lower()
            t2 = time.perf_counter()
            compiled = lowered.compile()
            t3 = time.perf_counter()
            self.times = {"trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2}
            return compiled(*args, **kwargs)

        return call

    def stages(self) -> dict[str, float]:
        """The last call's stage times (s), and their total."""
        return dict(self.times, total=sum(self.times.values()))


def make_effectful(rounds: int, inner: int, keys: bool) -> Callable[[jax.Array], jax.Array]:
    """`rounds` x (`next_key` if `keys`, then `inner` x (`ask`, `get`, `set`, `emit`))."""

    def fn(x: jax.Array) -> jax.Array:
        for _ in range(rounds):
            u = jax.random.uniform(noise.next_key(), x.shape) if keys else x
            for _ in range(inner):
                v = total.get() + scale.ask() * u
                total.set(v)
                log.emit(v)
        return v

    return fn


def make_pure(rounds: int, inner: int, keys: bool) -> Callable[..., Any]:
    """The same computation, hand-plumbed."""

    def pure(
        scale_v: jax.Array, base_key: jax.Array, counter: Any, total_v: jax.Array, x: jax.Array
    ) -> Any:
        emitted = []
        for j in range(rounds):
            if keys:
                k = jax.random.fold_in(base_key, counter + j if j else counter)
                u = jax.random.uniform(k, x.shape)
            else:
                u = x
            for _ in range(inner):
                total_v = total_v + scale_v * u
                emitted.append(total_v)
        return total_v, total_v, tuple(emitted)

    return pure


def measure(rounds: int, inner: int, keys: bool, repeat: int) -> dict[str, Any]:
    """Trace, lower and compile times (s) of `repeat` fresh pairs, alternating order."""
    x = jnp.linspace(0.0, 1.0, 4, dtype=jnp.float32)
    scale_v, key, total0 = jnp.float32(0.5), jax.random.key(0), jnp.zeros(4, jnp.float32)

    def run_effax() -> tuple[dict[str, float], Any]:
        staged = StagedJit()
        fn = fx.handle(make_effectful(rounds, inner, keys), transform=staged)
        with fx.handlers(
            scale.provide(scale_v), noise.seed(key), total.init(total0), log.collect()
        ) as hs:
            y = fn(x)
        return staged.stages(), (y, hs[total], tuple(hs[log]))

    def run_hand() -> tuple[dict[str, float], Any]:
        staged = StagedJit()
        out = staged(make_pure(rounds, inner, keys))(scale_v, key, 0, total0, x)
        return staged.stages(), out

    stages = h.paired_runs({"effax": run_effax, "hand": run_hand}, repeat)
    return {"stages_s": stages, "agree": True}


def _row(case: str, label: str, stages: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    def med(name: str, stage: str) -> float:
        return statistics.median(s[stage] for s in stages[name]) * 1e3

    def paired(stage: str) -> float:
        return h.paired_ratio(
            [s[stage] for s in stages["effax"]], [s[stage] for s in stages["hand"]]
        )

    notes = ", ".join(
        f"{stage} {med('effax', stage):.0f}/{med('hand', stage):.0f}"
        for stage in ("trace", "lower", "compile")
    )
    return h.row(
        case,
        label,
        med("effax", "total"),
        unit="ms",
        baseline="hand-plumbed jax.jit",
        baseline_value=med("hand", "total"),
        ratio=paired("total"),
        target=1.3,
        notes=f"ms effax/hand: {notes}; trace alone x{paired('trace'):.2f}",
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one repetition of 100 ops")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--ops", type=int, default=None, help="effect operations (default 1000)")
    args = parser.parse_args(argv)
    ops = args.ops or (100 if args.quick else 1000)
    repeat = 1 if args.quick else 5
    # 4a: only ask/get/set/emit, so that tracing (where effax adds work) matters;
    # 4b: with a key drawn every 25 operations, where XLA's compilation of the
    # threefry hash dominates.
    plain = measure(ops // 4, 1, False, repeat)
    keyed = measure(ops // 25, 6, True, max(repeat - 2, 1))
    rows = [
        _row("4", f"effax.handle, {ops} ops (ask/get/set/emit)", plain["stages_s"]),
        _row("4", f"effax.handle, {ops} ops incl. {ops // 25} next_key", keyed["stages_s"]),
    ]
    h.print_rows("case 4: trace + lower + compile (median ms; ratio paired)", rows)
    results = {"rows": rows, "ops": ops, "repeat": repeat, "plain": plain, "keyed": keyed}
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
