"""Cases 8 and 9: key draws inside compiled code.

Run: python benchmarks/bench_keys.py [--quick]

- 8: a random-walk Metropolis-Hastings chain of 2,000 steps (the kernel of NumPyro's
  ``MCMCKernel`` docstring). effax: two ``next_key()`` draws per step (through
  ``effax.random.normal`` / ``uniform``) inside ``effax.scan`` under ``effax.jit``;
  hand-written: ``key, k_proposal, k_accept = jax.random.split(key, 3)`` per step
  inside ``lax.scan`` under ``jax.jit``. One chain, and 64 chains: effax under
  ``effax.vmap(keys="split")``, the hand kernel under ``jax.vmap`` over split keys.
  Targets: 0.95 (one chain), 1.0 (64 chains).
- 9: trace time (``.trace()``, fresh functions each repetition) of a function with
  200 key draws among 1,000 operations, against the hand-plumbed function drawing
  the same keys (``fold_in(base, counter + j)``). Target 1.10.
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
from jax import lax

import effax as fx

STEPS = 2_000
CHAINS = 64
DIM = 4


def log_density(x: jax.Array) -> jax.Array:
    return -0.5 * jnp.sum(x**2)


# --- case 8: the chain ---------------------------------------------------------------


def effax_step(x: jax.Array, _: Any) -> tuple[jax.Array, jax.Array]:
    proposal = x + 0.5 * fx.random.normal(x.shape)
    accept = jnp.log(fx.random.uniform()) < log_density(proposal) - log_density(x)
    x = jnp.where(accept, proposal, x)
    return x, x


def effax_chain(x0: jax.Array, steps: int) -> jax.Array:
    return fx.scan(effax_step, x0, None, length=steps)[1]


def hand_chain(key: jax.Array, x0: jax.Array, steps: int) -> jax.Array:
    def step(carry: Any, _: Any) -> Any:
        key, x = carry
        key, k_proposal, k_accept = jax.random.split(key, 3)
        proposal = x + 0.5 * jax.random.normal(k_proposal, x.shape)
        accept = jnp.log(jax.random.uniform(k_accept)) < log_density(proposal) - log_density(x)
        x = jnp.where(accept, proposal, x)
        return (key, x), x

    return lax.scan(step, (key, x0), None, length=steps)[1]


def chain_rows(steps: int, number: int, repeat: int) -> list[dict[str, Any]]:
    key = jax.random.key(0)
    x0, x0s = jnp.zeros(DIM), jnp.zeros((CHAINS, DIM))
    one = fx.jit(lambda x: effax_chain(x, steps))
    many = fx.jit(fx.vmap(lambda x: effax_chain(x, steps), keys="split"))
    hand_one = jax.jit(lambda k, x: hand_chain(k, x, steps))
    hand_many = jax.jit(jax.vmap(lambda k, x: hand_chain(k, x, steps)))
    keys = jax.random.split(key, CHAINS)
    stream = fx.rng.seed(key)

    def batch(fn: Callable[[], jax.Array]) -> Callable[[int], None]:
        def run(n: int) -> None:
            for _ in range(n):
                out = fn()
            out.block_until_ready()

        return run

    def effax_one() -> jax.Array:
        with stream:
            return one(x0)

    def effax_many() -> jax.Array:
        with stream:
            return many(x0s)

    samples = h.interleaved(
        {
            "one": batch(effax_one),
            "hand_one": batch(lambda: hand_one(key, x0)),
            "many": batch(effax_many),
            "hand_many": batch(lambda: hand_many(keys, x0s)),
        },
        number=number,
        repeat=repeat,
    )
    rows = []
    for name, label, target in (
        ("one", "1 chain", 0.95),
        ("many", f"{CHAINS} chains, effax.vmap(keys='split')", 1.0),
    ):
        base = f"hand_{name}"
        rows.append(
            h.row(
                "8",
                f"MH chain, {steps} steps, {label}",
                h.median(samples[name]) / 1e3,
                unit="ms/chain run",
                baseline="jax.random.split per step" + ("" if name == "one" else ", jax.vmap"),
                baseline_value=h.median(samples[base]) / 1e3,
                ratio=h.paired_ratio(samples[name], samples[base]),
                target=target,
                notes=f"threefry calls per step: {threefry_calls(steps, name == 'many')}",
            )
        )
    return rows


# primitives that each run the threefry hash once (typed keys: random_*)
_HASHING = {"threefry2x32", "random_bits", "random_split", "random_fold_in"}


def threefry_calls(steps: int, batched: bool) -> str:
    """The threefry hash calls in one scan step of each compiled program."""

    def count(jaxpr: Any) -> int:
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name in _HASHING
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else [param]:
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        n += count(sub)
        return n

    x = jnp.zeros((CHAINS, DIM)) if batched else jnp.zeros(DIM)
    with fx.rng.seed(0):
        effax_fn = fx.vmap(lambda x: effax_chain(x, 1), keys="split") if batched else None
        effax_jaxpr = jax.make_jaxpr(
            lambda x: fx.handle(effax_fn or (lambda y: effax_chain(y, 1)), fx.rng.seed(0))(x)
        )(x)
    hand = (
        jax.vmap(lambda k, y: hand_chain(k, y, 1))
        if batched
        else (lambda k, y: hand_chain(k, y, 1))
    )
    keys = jax.random.split(jax.random.key(0), CHAINS) if batched else jax.random.key(0)
    hand_jaxpr = jax.make_jaxpr(hand)(keys, x)
    return f"effax {count(effax_jaxpr)}, hand {count(hand_jaxpr)}"


# --- case 9: trace time with many draws -----------------------------------------------


def trace_rows(repeat: int) -> list[dict[str, Any]]:
    draws, operations = 200, 1_000
    x = jnp.ones(8)

    def make() -> tuple[Callable[..., Any], Callable[..., Any]]:
        def body(y: jax.Array, key_at: Callable[[int], jax.Array]) -> jax.Array:
            for i in range(operations - draws):
                if i % 4 == 0:
                    y = y + jax.random.normal(key_at(i // 4), y.shape)
                else:
                    y = jnp.sin(y) * 1.001
            return y

        def effax_fn(y: jax.Array) -> jax.Array:
            return body(y, lambda _: fx.rng.next_key())

        def hand_fn(y: jax.Array, base: jax.Array, counter: Any) -> jax.Array:
            return body(y, lambda j: jax.random.fold_in(base, counter + j))

        return effax_fn, hand_fn

    def run_effax() -> tuple[float, Any]:
        effax_fn, _ = make()
        with fx.rng.seed(0):
            start = time.perf_counter()
            traced = fx.jit(effax_fn).trace(x)
            elapsed = time.perf_counter() - start
        return elapsed, len(traced.jaxpr.eqns) > 0

    def run_hand() -> tuple[float, Any]:
        _, hand_fn = make()
        start = time.perf_counter()
        traced = jax.jit(hand_fn).trace(x, jax.random.key(0), 0)
        elapsed = time.perf_counter() - start
        return elapsed, len(traced.jaxpr.eqns) > 0

    measured = h.paired_runs({"effax": run_effax, "hand": run_hand}, repeat)
    return [
        h.row(
            "9",
            f"trace, {draws} key draws among {operations} operations",
            h.median(measured["effax"]) * 1e3,
            unit="ms",
            baseline="jax.jit(hand-plumbed).trace",
            baseline_value=h.median(measured["hand"]) * 1e3,
            ratio=h.paired_ratio(measured["effax"], measured["hand"]),
            target=1.10,
        )
    ]


def same_keys() -> bool:
    """effax's compiled draws are `fold_in(base, c + i*k + j)`, bitwise."""
    with fx.rng.seed(0):
        got = fx.jit(
            lambda: fx.scan(
                lambda c, _: (c, (fx.rng.next_key(), fx.rng.next_key())), 0, None, length=5
            )[1]
        )()
    base = jax.random.key(0)
    want = [jax.random.fold_in(base, 2 * i + j) for i in range(5) for j in range(2)]
    got_flat = [k for i in range(5) for k in (got[0][i], got[1][i])]
    return all(
        np.array_equal(jax.random.key_data(a), jax.random.key_data(b))
        for a, b in zip(got_flat, want, strict=True)
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (200 steps)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    steps, number, repeat = (200, 1, 2) if args.quick else (STEPS, 3, 15)
    # a benchmark runs the same chain from the same key many times, on purpose
    with jax.debug_key_reuse(False):
        agree = same_keys()
        rows = chain_rows(steps, number, repeat) + trace_rows(1 if args.quick else 9)
    h.print_rows("cases 8-9: key draws in compiled code (ratio paired)", rows)
    results = {"rows": rows, "agree": agree}
    if not agree:
        raise AssertionError("effax's compiled keys are not fold_in(base, c + i*k + j)")
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
