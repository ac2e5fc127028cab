"""Case 12: what `effax.Tap` costs per call of a compiled training step.

Run: python benchmarks/bench_taps.py [--quick]

A small MLP training step (``DEPTH`` tanh layers of ``WIDTH`` units on a batch of
``BATCH``, mean squared error, plain SGD; parameters passed in and returned)
whose forward pass taps every layer's output, written twice:

- *loop*: the layers in a Python loop, layer ``i`` tapping
  ``acts.tap(f"layer{i}/out", h)``;
- *scan*: the layers' stacked parameters in an `effax.scan`, every step tapping
  ``acts.tap("layers/out", h)`` (recorded stacked along the layers).

The tapped step is differentiated with `effax.value_and_grad` and compiled once
with ``effax.jit(step)``; each variant is timed under two handlers, against
``jax.jit`` of the step written by hand in plain JAX:

(a) ``acts.ignore()`` (taps off): against the same step without taps;
(b) ``acts.record()`` (every site), installed around the calls and cleared after
    each call (``.clear()``, so nothing accumulates; nothing is read per call):
    against the hand-written step that returns the same activations as extra
    outputs (``jax.value_and_grad(..., has_aux=True)``).

All eight functions are interleaved in one run. Before timing, each effax
contender is checked against its hand-written step over a few training steps:
the losses, the parameters and (b) every recorded activation, bit for bit. Each
row's note gives the paired difference in us per step: what effax adds per call,
which does not grow with the size of the step (the ratio does not say that).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import _harness as h
import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

acts = fx.Tap[jax.Array]("bench.acts")

DEPTH, WIDTH, BATCH = 4, 128, 64
LR = 1e-2

Layers = list[tuple[jax.Array, jax.Array]]  # the loop's parameters: (w, b) per layer
Stacked = tuple[jax.Array, jax.Array]  # the scan's: w (DEPTH, WIDTH, WIDTH), b (DEPTH, WIDTH)

# how many times each step's Python body ran (traces): none while timing
TRACES: dict[str, int] = {}


def _traced(name: str) -> None:
    TRACES[name] = TRACES.get(name, 0) + 1


def _sgd(params: Any, grads: Any) -> Any:
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


def _mse(out: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((out - y) ** 2)


# --- the loop variant -----------------------------------------------------------------


def loop_loss(params: Layers, x: jax.Array, y: jax.Array) -> jax.Array:
    h_ = x
    for i, (w, b) in enumerate(params):
        h_ = acts.tap(f"layer{i}/out", jnp.tanh(h_ @ w + b[None, :]))
    return _mse(h_, y)


def loop_step(params: Layers, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Layers]:
    _traced("effax loop")
    value, grads = fx.value_and_grad(loop_loss)(params, x, y)
    return value, _sgd(params, grads)


def hand_loop_loss(params: Layers, x: jax.Array, y: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
    """`loop_loss` without taps; its activations as the auxiliary output."""
    h_, out = x, {}
    for i, (w, b) in enumerate(params):
        h_ = out[f"layer{i}/out"] = jnp.tanh(h_ @ w + b[None, :])
    return _mse(h_, y), out


def hand_loop_step(params: Layers, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Layers]:
    _traced("hand loop")
    value, grads = jax.value_and_grad(lambda p: hand_loop_loss(p, x, y)[0])(params)
    return value, _sgd(params, grads)


def hand_loop_step_acts(params: Layers, x: jax.Array, y: jax.Array) -> Any:
    _traced("hand loop, acts")
    (value, out), grads = jax.value_and_grad(hand_loop_loss, has_aux=True)(params, x, y)
    return value, _sgd(params, grads), out


# --- the scan variant -----------------------------------------------------------------


def _layer(h_: jax.Array, wb: Stacked) -> jax.Array:
    return jnp.tanh(h_ @ wb[0] + wb[1][None, :])


def scan_loss(params: Stacked, x: jax.Array, y: jax.Array) -> jax.Array:
    out, _ = fx.scan(lambda h_, wb: (acts.tap("layers/out", _layer(h_, wb)), None), x, params)
    return _mse(out, y)


def scan_step(params: Stacked, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Stacked]:
    _traced("effax scan")
    value, grads = fx.value_and_grad(scan_loss)(params, x, y)
    return value, _sgd(params, grads)


def hand_scan_loss(params: Stacked, x: jax.Array, y: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
    """`scan_loss` without taps; the layers' outputs (stacked) as the auxiliary output."""

    def layer(h_: jax.Array, wb: Stacked) -> tuple[jax.Array, jax.Array]:
        h_ = _layer(h_, wb)
        return h_, h_

    out, stacked = jax.lax.scan(layer, x, params)
    return _mse(out, y), {"layers/out": stacked}


def hand_scan_step(params: Stacked, x: jax.Array, y: jax.Array) -> tuple[jax.Array, Stacked]:
    _traced("hand scan")

    def loss(p: Stacked) -> jax.Array:
        out, _ = jax.lax.scan(lambda h_, wb: (_layer(h_, wb), None), x, p)
        return _mse(out, y)

    value, grads = jax.value_and_grad(loss)(params)
    return value, _sgd(params, grads)


def hand_scan_step_acts(params: Stacked, x: jax.Array, y: jax.Array) -> Any:
    _traced("hand scan, acts")
    (value, out), grads = jax.value_and_grad(hand_scan_loss, has_aux=True)(params, x, y)
    return value, _sgd(params, grads), out


# --- contenders: `batch(n)` trains n steps from where the last batch stopped ----------


def _inputs() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    layers = [
        (
            jnp.asarray(rng.normal(size=(WIDTH, WIDTH)) / WIDTH**0.5, jnp.float32),
            jnp.asarray(rng.normal(size=WIDTH) * 0.1, jnp.float32),
        )
        for _ in range(DEPTH)
    ]
    return {
        "loop": layers,
        "scan": (jnp.stack([w for w, _ in layers]), jnp.stack([b for _, b in layers])),
        "x": jnp.asarray(rng.normal(size=(BATCH, WIDTH)), jnp.float32),
        "y": jnp.asarray(rng.normal(size=(BATCH, WIDTH)), jnp.float32),
    }


class Contender:
    """A training loop of one compiled step: `batch(n)` makes n steps, `history`
    (when `keep` is set) each step's loss, parameters and activations."""

    def __init__(self, params: Any, x: jax.Array, y: jax.Array) -> None:
        self.params, self.x, self.y = params, x, y
        self.keep = False
        self.history: list[Any] = []

    def batch(self, n: int) -> Any:
        raise NotImplementedError


class Hand(Contender):
    def __init__(self, fn: Callable[..., Any], params: Any, x: jax.Array, y: jax.Array) -> None:
        super().__init__(params, x, y)
        self.fn = jax.jit(fn)

    def batch(self, n: int) -> Any:
        fn, params, x, y = self.fn, self.params, self.x, self.y
        for _ in range(n):
            out = fn(params, x, y)
            params = out[1]
            if self.keep:
                self.history.append(out)
        self.params = params
        return jax.block_until_ready(out[:2])


class Ignored(Contender):
    def __init__(self, fn: Callable[..., Any], params: Any, x: jax.Array, y: jax.Array) -> None:
        super().__init__(params, x, y)
        self.fn = fx.jit(fn)
        self.handler = acts.ignore()

    def batch(self, n: int) -> Any:
        fn, params, x, y = self.fn, self.params, self.x, self.y
        with self.handler:
            for _ in range(n):
                value, params = fn(params, x, y)
                if self.keep:
                    self.history.append((value, params))
        self.params = params
        return jax.block_until_ready((value, params))


class Recorded(Contender):
    def __init__(self, fn: Callable[..., Any], params: Any, x: jax.Array, y: jax.Array) -> None:
        super().__init__(params, x, y)
        self.fn = fx.jit(fn)
        self.recorder = acts.record()  # created once, cleared after every call

    def batch(self, n: int) -> Any:
        fn, params, x, y, recorder = self.fn, self.params, self.x, self.y, self.recorder
        with recorder:
            for _ in range(n):
                value, params = fn(params, x, y)
                if self.keep:
                    self.history.append((value, params, recorder.value))
                recorder.clear()
        self.params = params
        return jax.block_until_ready((value, params))


def agree(effax: Contender, hand: Contender, steps: int = 3) -> bool:
    """Whether `effax` and `hand` train alike from the same parameters: every step's
    loss, parameters and (if both give them) activations, bit for bit."""
    for c in (effax, hand):
        c.keep, c.history = True, []
        c.batch(steps)
        c.keep = False
    same = all(h.same_bits(a, b) for a, b in zip(effax.history, hand.history, strict=True))
    effax.history, hand.history = [], []
    return same


# --- main ---------------------------------------------------------------------------

HAND_LOOP = "jax.jit, hand-written, no taps [loop]"
HAND_LOOP_ACTS = "jax.jit, hand-written, activations out [loop]"
IGNORE_LOOP = "effax.jit under acts.ignore() [loop]"
RECORD_LOOP = "effax.jit under acts.record() [loop]"
HAND_SCAN = "jax.jit, hand-written, no taps [scan]"
HAND_SCAN_ACTS = "jax.jit, hand-written, activations out [scan]"
IGNORE_SCAN = "effax.jit under acts.ignore() [scan]"
RECORD_SCAN = "effax.jit under acts.record() [scan]"

# contender: (its baseline, target)
COMPARED = {
    IGNORE_LOOP: (HAND_LOOP, 1.02),
    RECORD_LOOP: (HAND_LOOP_ACTS, 1.05),
    IGNORE_SCAN: (HAND_SCAN, 1.02),
    RECORD_SCAN: (HAND_SCAN_ACTS, 1.05),
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    number, repeat = (1, 1) if args.quick else (40, 151)

    inp = _inputs()
    x, y = inp["x"], inp["y"]
    contenders: dict[str, Contender] = {
        HAND_LOOP: Hand(hand_loop_step, inp["loop"], x, y),
        HAND_LOOP_ACTS: Hand(hand_loop_step_acts, inp["loop"], x, y),
        IGNORE_LOOP: Ignored(loop_step, inp["loop"], x, y),
        RECORD_LOOP: Recorded(loop_step, inp["loop"], x, y),
        HAND_SCAN: Hand(hand_scan_step, inp["scan"], x, y),
        HAND_SCAN_ACTS: Hand(hand_scan_step_acts, inp["scan"], x, y),
        IGNORE_SCAN: Ignored(scan_step, inp["scan"], x, y),
        RECORD_SCAN: Recorded(scan_step, inp["scan"], x, y),
    }
    # The first steps (which also warm up: compile, and let effax narrow what it
    # plumbs) must agree bit for bit with the hand-written step's.
    agreement = {
        name: agree(contenders[name], contenders[base]) for name, (base, _) in COMPARED.items()
    }
    if not all(agreement.values()):
        raise AssertionError(f"effax and the hand-written step disagree: {agreement}")
    traces_warm = dict(TRACES)
    samples = h.interleaved(
        {name: c.batch for name, c in contenders.items()}, number=number, repeat=repeat, warmup=0
    )
    retraces = {name: TRACES[name] - traces_warm[name] for name in TRACES}

    rows = []
    for name, (base, target) in COMPARED.items():
        # the paired difference: what the taps' handler adds to a step, in us
        extra = h.median([a - b for a, b in zip(samples[name], samples[base], strict=True)])
        rows += h.compared_rows(
            "12",
            {base: samples[base], name: samples[name]},
            base,
            unit="us/step",
            targets={name: target},
            notes={
                name: f"{extra:+.2f} us/step (paired); retraces while timing: "
                f"{sum(retraces.values())}"
            },
        )

    h.print_rows(
        "case 12: taps in a compiled training step (median us per step; ratio paired)", rows
    )
    results = {
        "rows": rows,
        "agreement": agreement,
        "traces_after_warmup": traces_warm,
        "retraces_while_timing": retraces,
        "samples": samples,
        "number": number,
        "repeat": repeat,
    }
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
