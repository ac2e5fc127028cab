"""Case 7: the first call of a compiled step (trace, lower, compile, run) with 100
unrelated handlers installed.

Run: python benchmarks/bench_first_call.py [--quick]

A real program installs all its handlers at its entry and compiles many functions
that each perform a few effects. This times the first call of such a function:
a small MLP step performing one `Ask`, one `RandomKey` and one `State`, under those
handlers and 100 unrelated ones (`Ask`, `State`, `RandomKey`, `Emit`), against the
first call of ``jax.jit`` of the hand-plumbed step. Each repetition builds fresh
Python functions, so no JAX cache is hit; traces of the body and XLA compiles
(``jax.monitoring`` backend-compile events) are counted for both.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import _harness as h
import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

scale = fx.Ask[jax.Array]("first.scale")
noise = fx.RandomKey("first.noise")
total = fx.State[jax.Array]("first.total")

_COMPILES = [0]


def _on_event(event: str, duration: float, **kwargs: Any) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


def make_step(traces: list[None]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A fresh effectful step and its hand-plumbed twin (same keys, same state)."""

    def body(w1: jax.Array, w2: jax.Array, x: jax.Array, s: Any, key: Any) -> Any:
        h1 = jnp.tanh(x @ w1) * s
        keep = jax.random.bernoulli(key, 0.9, h1.shape)
        y = jnp.where(keep, h1 / 0.9, 0.0) @ w2
        return y, jnp.mean(y**2)

    def step(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
        traces.append(None)
        y, loss = body(w1, w2, x, scale.ask(), noise.next_key())
        total.set(total.get() + loss)
        return y

    def hand(
        w1: jax.Array, w2: jax.Array, x: jax.Array, s: Any, base_key: Any, counter: Any, t: Any
    ) -> Any:
        traces.append(None)
        y, loss = body(w1, w2, x, s, jax.random.fold_in(base_key, counter))
        return y, t + loss

    return step, hand


def unrelated_handlers() -> list[Any]:
    handlers: list[Any] = []
    for i in range(25):
        handlers += [
            fx.Ask[jax.Array](f"first.unrelated_ask{i}").provide(jnp.float32(i)),
            fx.State[jax.Array](f"first.unrelated_state{i}").init(jnp.zeros(3)),
            fx.RandomKey(f"first.unrelated_key{i}").seed(i),
            fx.Emit[jax.Array](f"first.unrelated_emit{i}").collect(),
        ]
    return handlers


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one repetition")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else 9
    rng = np.random.default_rng(0)
    w1 = jnp.asarray(rng.normal(size=(64, 128)), jnp.float32)
    w2 = jnp.asarray(rng.normal(size=(128, 16)), jnp.float32)
    x = jnp.asarray(rng.normal(size=(32, 64)), jnp.float32)
    s, key, t0 = jnp.float32(0.5), jax.random.key(0), jnp.float32(0)
    others = unrelated_handlers()

    def run_effax() -> tuple[tuple[float, int, int], Any]:
        traces: list[None] = []
        step, _ = make_step(traces)
        fast = fx.jit(step)
        with fx.handlers(*others, scale.provide(s), noise.seed(key), total.init(t0)) as hs:
            compiles = _COMPILES[0]
            start = time.perf_counter()
            y = fast(w1, w2, x).block_until_ready()
            elapsed = time.perf_counter() - start
        return (elapsed, len(traces), _COMPILES[0] - compiles), (y, hs[total])

    def run_hand() -> tuple[tuple[float, int, int], Any]:
        traces: list[None] = []
        _, hand = make_step(traces)
        fast = jax.jit(hand)
        compiles = _COMPILES[0]
        start = time.perf_counter()
        y, t = fast(w1, w2, x, s, key, 0, t0)
        y.block_until_ready()
        elapsed = time.perf_counter() - start
        return (elapsed, len(traces), _COMPILES[0] - compiles), (y, t)

    measured = h.paired_runs({"effax": run_effax, "hand": run_hand}, repeat)
    samples = {name: [m[0] for m in ms] for name, ms in measured.items()}
    counts = {name: ms[-1][1:] for name, ms in measured.items()}  # (traces, compiles)
    rows = [
        h.row(
            "7",
            "effax.jit first call, +100 unrelated handlers",
            h.median(samples["effax"]) * 1e3,
            unit="ms",
            baseline="jax.jit, hand-plumbed, first call",
            baseline_value=h.median(samples["hand"]) * 1e3,
            ratio=h.paired_ratio(samples["effax"], samples["hand"]),
            target=1.10,
            notes=(
                f"traces/compiles effax {counts['effax'][0]}/{counts['effax'][1]}, "
                f"hand-plumbed {counts['hand'][0]}/{counts['hand'][1]}"
            ),
        )
    ]
    h.print_rows("case 7: first call (median ms; ratio paired)", rows)
    results = {"rows": rows, "repeat": repeat, "counts": counts, "agree": True}
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
