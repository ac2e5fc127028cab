"""Case 10: a training step with donated state, effax against hand-plumbed ``jax.jit``.

Run: python benchmarks/bench_donation.py [--quick]

An MLP step whose parameters (4 x 512 x 512 float32, 4 MiB) live in a `State`
cell, compiled with ``effax.jit(step, donate_state=True)``, against the
hand-plumbed step compiled with ``jax.jit(step, donate_argnums=0)``. Reports
the compiled programs' memory (``compiled.memory_analysis()``: argument, output,
aliased and peak bytes; peak as argument + output + temporaries - aliased) and the
time per step, paired and interleaved. Both must update the parameters in place:
the aliased bytes cover them, and the results agree bit for bit.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import _harness as h
import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

params = fx.State[list[jax.Array]]("donation.params")
lr = fx.Ask[jax.Array]("donation.lr")

WIDTH, DEPTH = 512, 4


def loss(ws: list[jax.Array], x: jax.Array) -> jax.Array:
    for w in ws:
        x = jnp.tanh(x @ w)
    return jnp.mean(x**2)


def step(x: jax.Array) -> jax.Array:
    value, grads = jax.value_and_grad(loss)(params.get(), x)
    params.set([w - lr.ask() * g for w, g in zip(params.get(), grads, strict=True)])
    return value


def hand(ws: list[jax.Array], lr_value: jax.Array, x: jax.Array) -> Any:
    value, grads = jax.value_and_grad(loss)(ws, x)
    return value, [w - lr_value * g for w, g in zip(ws, grads, strict=True)]


def _memory(compiled: Any) -> dict[str, int] | None:
    stats = compiled.memory_analysis()
    if stats is None:  # pragma: no cover - a backend without memory analysis
        return None
    argument, output = stats.argument_size_in_bytes, stats.output_size_in_bytes
    alias, temp = stats.alias_size_in_bytes, stats.temp_size_in_bytes
    return {
        "argument": argument,
        "output": output,
        "alias": alias,
        "temp": temp,
        "peak": argument + output + temp - alias,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few calls")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    init = [
        jnp.asarray(rng.normal(size=(WIDTH, WIDTH)) / WIDTH**0.5, jnp.float32) for _ in range(DEPTH)
    ]
    x = jnp.asarray(rng.normal(size=(64, WIDTH)), jnp.float32)
    rate = jnp.float32(1e-3)

    donated = fx.jit(step, donate_state=True)
    hand_donated = jax.jit(hand, donate_argnums=0)
    cell = params.init([w.copy() for w in init])
    hand_params = [[w.copy() for w in init]]

    with cell, lr.provide(rate):
        effax_memory = _memory(donated.lower(x).compile())
    hand_memory = _memory(hand_donated.lower(init, rate, x).compile())

    def effax_batch(n: int) -> None:
        with cell, lr.provide(rate):
            for _ in range(n):
                value = donated(x)
        value.block_until_ready()

    def hand_batch(n: int) -> None:
        for _ in range(n):
            value, hand_params[0] = hand_donated(hand_params[0], rate, x)
        value.block_until_ready()

    number, repeat = (2, 3) if args.quick else (20, 15)
    samples = h.interleaved(
        {"effax": effax_batch, "hand": hand_batch}, number=number, repeat=repeat, warmup=2
    )
    steps = 2 + number * repeat
    agree = h.same_bits(cell.value, hand_params[0])
    rows = [
        h.row(
            "10",
            "effax.jit(donate_state=True) step",
            h.median(samples["effax"]),
            unit="us/step",
            baseline="jax.jit(donate_argnums=0), hand-plumbed",
            baseline_value=h.median(samples["hand"]),
            ratio=h.paired_ratio(samples["effax"], samples["hand"]),
            target=1.10,
            notes=(
                f"{steps} steps each, parameters bitwise equal: {agree}; memory (bytes) "
                f"effax {effax_memory}, hand-plumbed {hand_memory}"
            ),
        )
    ]
    if effax_memory is not None and hand_memory is not None:
        rows.append(
            h.row(
                "10",
                "effax.jit(donate_state=True) peak memory",
                effax_memory["peak"] / 2**20,
                unit="MiB",
                baseline="jax.jit(donate_argnums=0), hand-plumbed",
                baseline_value=hand_memory["peak"] / 2**20,
                ratio=effax_memory["peak"] / hand_memory["peak"],
                target=1.0,
                notes=f"aliased: effax {effax_memory['alias']}, hand {hand_memory['alias']} bytes",
            )
        )
    h.print_rows("case 10: donated training step (median us; ratio paired)", rows)
    results = {"rows": rows, "agree": agree, "memory": {"effax": effax_memory, "hand": hand_memory}}
    if not agree:
        raise AssertionError("effax and the hand-plumbed step disagree")
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
