"""Case 13: `effax.nnx` on Flax's scan-over-layers model, against pure Flax NNX.

Run: python benchmarks/bench_nnx.py [--quick]

The model and training step of ``examples/nnx_scan_layers.py`` (Linear + BatchNorm
+ Dropout blocks made with ``nnx.split_rngs`` + ``nnx.vmap``, applied with a scan
and remat, trained with ``value_and_grad`` and SGD): the effax program (the twins
``effax.nnx.scan`` / ``remat`` / ``value_and_grad``, a traced `Ask`, a `State`, an
`Emit` and a `Tap` under ``ignore()`` in the block, compiled by
``effax.handle(step, transform=nnx.jit)``) against the NNX program (``nnx.scan`` /
``nnx.remat`` / ``nnx.value_and_grad`` under ``nnx.jit``, returning the per-layer
means the effax block emits), in the same process, interleaved:

- per step: a warm call of each compiled step (targets: 1.02x);
- compile: the first call of a fresh step on a fresh model (trace, lower, compile,
  run; target 1.05x).

Both programs are checked to compute bit-identical losses and model states first.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import _harness as h
import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import nnx_scan_layers as ex

import effax as fx

EFFAX, NNX = "effax.nnx (handle + nnx.jit)", "Flax NNX (nnx.jit)"
TARGETS = {"step": 1.02, "compile": 1.05}


def _handlers() -> list[Any]:
    return [
        ex.scale.provide(jnp.float32(ex.SCALE)),
        ex.calls.init(jnp.int32(0)),
        ex.means.collect(),
        ex.acts.ignore(),
    ]


def _step(effects: bool) -> Any:
    if effects:
        return fx.handle(ex.train_step, *_handlers(), transform=nnx.jit)
    return nnx.jit(ex.train_step)


def _block(out: Any) -> None:
    jax.block_until_ready(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    number, repeat = (1, 1) if args.quick else (20, 41)
    compile_rounds = 1 if args.quick else 7
    x, y = ex.data(1)[0]

    # agreement: the same steps, the same numbers
    models = {True: ex.make(True), False: ex.make(False)}
    steps = {True: _step(True), False: _step(False)}
    losses = {}
    for effects, (model, optimizer) in models.items():
        out = steps[effects](model, optimizer, x, y)
        losses[effects] = out if effects else out[0]
    agree = ex.bitwise(losses[True], losses[False]) and ex.bitwise(
        ex.learned(models[True][0]), ex.learned(models[False][0])
    )
    if not agree:
        raise AssertionError("effax.nnx and the NNX program disagree")

    def warm(effects: bool) -> h.Batch:
        model, optimizer = models[effects]

        def batch(n: int) -> object:
            out = None
            for _ in range(n):
                out = steps[effects](model, optimizer, x, y)
            _block(out)
            return out

        return batch

    per_step = h.interleaved(
        {EFFAX: warm(True), NNX: warm(False)}, number=number, repeat=repeat, warmup=2
    )

    fresh = {e: [ex.make(e) for _ in range(compile_rounds)] for e in (True, False)}

    def first_call(effects: bool) -> h.Batch:
        def batch(n: int) -> object:
            out = None
            for _ in range(n):
                model, optimizer = fresh[effects].pop()  # (made before timing)
                out = _step(effects)(model, optimizer, x, y)  # (a new function: traced anew)
            _block(out)
            return out

        return batch

    compile_us = h.interleaved(
        {EFFAX: first_call(True), NNX: first_call(False)},
        number=1,
        repeat=compile_rounds,
        warmup=0,
    )
    rows = h.compared_rows(
        "13", per_step, NNX, unit="us/step", targets={EFFAX: TARGETS["step"]}
    ) + h.compared_rows(
        "13",
        {f"{NNX}, first call": compile_us[NNX], f"{EFFAX}, first call": compile_us[EFFAX]},
        f"{NNX}, first call",
        unit="us/first call",
        targets={f"{EFFAX}, first call": TARGETS["compile"]},
        notes={f"{EFFAX}, first call": "a fresh step: trace, lower, compile, run"},
    )
    h.print_rows("case 13: Flax NNX scan over layers, effax.nnx against NNX (ratio paired)", rows)
    results = {"rows": rows, "agree": agree, "per_step": per_step, "first_call": compile_us}
    if args.json:
        print(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    main()
