"""Cases 1-3 and 11: per-call dispatch of a compiled, effectful step against plain jax.jit.

Run: python benchmarks/bench_dispatch.py [--quick]

1. A step that performs one `Ask`, one `RandomKey` and one `State`, under
   ``effax.handle(step, transform=jax.jit)`` (handlers installed around the calls,
   and cells passed to `handle`), against ``jax.jit`` of the hand-plumbed pure
   function computing the same thing: the same keys
   (``fold_in(base_key, counter + j)``), state in and state out.
2. The same with 100 `State` leaves: a 100-layer model keeping a running mean per
   layer, as one `State` per layer and as one `State` holding 100 leaves. The
   layers are diagonal (``tanh(x * w_i)``) so that the XLA work stays small and
   the per-call cost of the 100 leaves is what is measured.
3. Case 1 with 100 unrelated handlers installed around the call; also counts
   traces, to show that none happens while timing. Informative, without a
   target: the same with the step's 3 handlers entered by a ``with`` block around
   every call (a common loop shape), inside the 100 unrelated ones.
11. Case 1 under one interceptor (`effax.intercept(scale, ask=lambda outer: 2 *
   outer.ask())`), against the hand-plumbed step with the doubling folded in.

Every contender is checked to compute bit-identical outputs and final states
before it is timed.
"""

from __future__ import annotations

import argparse
import functools as ft
import json
from collections.abc import Callable
from typing import Any

import _harness as h
import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

# --- the effects (declared once, at module level, as the design asks) --------------

scale = fx.Ask[jax.Array]("bench.scale")
noise = fx.RandomKey("bench.noise")
total = fx.State[jax.Array]("bench.total")

LAYERS = 100
WIDTH = 4
layer_means = [fx.State[jax.Array](f"bench.layer{i}.mean") for i in range(LAYERS)]
all_means = fx.State[list[jax.Array]]("bench.all_means")

# 100 handlers the benchmarked step never performs (case 3): a mix of every kind.
UNRELATED = 100
unrelated_effects: list[fx.Effect[Any]] = []
for _i in range(UNRELATED):
    kind = _i % 4
    if kind == 0:
        unrelated_effects.append(fx.Ask[int](f"bench.unrelated{_i}"))
    elif kind == 1:
        unrelated_effects.append(fx.State[jax.Array](f"bench.unrelated{_i}"))
    elif kind == 2:
        unrelated_effects.append(fx.RandomKey(f"bench.unrelated{_i}"))
    else:
        unrelated_effects.append(fx.Emit[int](f"bench.unrelated{_i}"))


def unrelated_handlers() -> list[fx.Handler[Any]]:
    out: list[fx.Handler[Any]] = []
    for i, effect in enumerate(unrelated_effects):
        if isinstance(effect, fx.Ask):
            out.append(effect.provide(i))
        elif isinstance(effect, fx.State):
            out.append(effect.init(jnp.float32(i)))
        elif isinstance(effect, fx.RandomKey):
            out.append(effect.seed(i))
        else:
            out.append(effect.collect())
    return out


# --- case 1: one Ask, one RandomKey, one State ----------------------------------------


def step(x: jax.Array) -> jax.Array:
    y = x * scale.ask() + jax.random.normal(noise.next_key(), x.shape)
    total.set(total.get() + jnp.sum(y))
    return y


def pure_step(
    scale_v: jax.Array, base_key: jax.Array, counter: int, total_v: jax.Array, x: jax.Array
) -> tuple[jax.Array, jax.Array]:
    y = x * scale_v + jax.random.normal(jax.random.fold_in(base_key, counter), x.shape)
    return y, total_v + jnp.sum(y)


# --- case 11: case 1 under one interceptor --------------------------------------------

hotter = fx.intercept(scale, ask=lambda outer: 2 * outer.ask())


def pure_step_hotter(
    scale_v: jax.Array, base_key: jax.Array, counter: int, total_v: jax.Array, x: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """`pure_step` with the interceptor's doubling folded in by hand."""
    return pure_step(2 * scale_v, base_key, counter, total_v, x)


# --- case 2: a 100-layer model with a running mean per layer --------------------------


def deep_step_many(weights: jax.Array, x: jax.Array) -> jax.Array:
    """One `State` per layer."""
    x = x * scale.ask() + 0.01 * jax.random.normal(noise.next_key(), x.shape)
    for i, mean in enumerate(layer_means):
        x = jnp.tanh(x * weights[i][None, :])
        mean.set(0.9 * mean.get() + 0.1 * jnp.mean(x, axis=0))
    return x


def deep_step_one(weights: jax.Array, x: jax.Array) -> jax.Array:
    """One `State` holding the 100 running means."""
    x = x * scale.ask() + 0.01 * jax.random.normal(noise.next_key(), x.shape)
    means = all_means.get()
    new = []
    for i in range(LAYERS):
        x = jnp.tanh(x * weights[i][None, :])
        new.append(0.9 * means[i] + 0.1 * jnp.mean(x, axis=0))
    all_means.set(new)
    return x


def pure_deep_step(
    weights: jax.Array,
    scale_v: jax.Array,
    base_key: jax.Array,
    counter: int,
    means: list[jax.Array],
    x: jax.Array,
) -> tuple[jax.Array, list[jax.Array]]:
    x = x * scale_v + 0.01 * jax.random.normal(jax.random.fold_in(base_key, counter), x.shape)
    new = []
    for i in range(LAYERS):
        x = jnp.tanh(x * weights[i][None, :])
        new.append(0.9 * means[i] + 0.1 * jnp.mean(x, axis=0))
    return x, new


# --- contenders -------------------------------------------------------------------


class Traces:
    """Counts how often a function is traced (its Python body runs only then).

    It keeps the function's signature (``__wrapped__``), as a real step function
    has: `effax.handle` passes positional parameters straight through, and would
    otherwise forward ``*args`` (a few percent slower per call).
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.count = 0
        ft.update_wrapper(self, fn)

    def __call__(self, *args: Any) -> Any:
        self.count += 1
        return self.fn(*args)


def _inputs() -> dict[str, Any]:
    return {
        "x": jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32),
        "scale": jnp.float32(1.5),
        "key": jax.random.key(0),
        "total": jnp.float32(0.0),
        "weights": jnp.asarray(
            np.random.default_rng(0).normal(size=(LAYERS, WIDTH)),
            jnp.float32,
        ),
        "deep_x": jnp.ones((2, WIDTH), jnp.float32),
        "means": [jnp.zeros(WIDTH, jnp.float32) for _ in range(LAYERS)],
    }


def hand_contender(
    inp: dict[str, Any], pure: Callable[..., Any] = pure_step
) -> tuple[Callable[[int], Any], Traces]:
    traced = Traces(pure)
    fn = jax.jit(traced)
    s = {"total": inp["total"], "counter": 0}

    def batch(n: int) -> Any:
        scale_v, key, x = inp["scale"], inp["key"], inp["x"]
        total_v, counter = s["total"], s["counter"]
        for _ in range(n):
            y, total_v = fn(scale_v, key, counter, total_v, x)
            counter += 1
        s["total"], s["counter"] = total_v, counter
        return jax.block_until_ready((y, total_v))

    return batch, traced


def effax_around_contender(
    inp: dict[str, Any],
    *,
    unrelated: bool = False,
    enter_per_call: bool = False,
    intercepted: bool = False,
) -> tuple[Callable[[int], Any], Traces]:
    """`handle(step, transform=jax.jit)`, handlers installed around the calls (or,
    with `enter_per_call`, a ``with`` block per call, inside the unrelated ones;
    with `intercepted`, under the interceptor `hotter` too)."""
    traced = Traces(step)
    fn = fx.handle(traced, transform=jax.jit)
    cells: tuple[fx.Handler[Any], ...] = (
        scale.provide(inp["scale"]),
        noise.seed(inp["key"]),
        total.init(inp["total"]),
    )
    if intercepted:
        cells = (*cells, hotter)
    outer = unrelated_handlers() if unrelated else []

    def batch(n: int) -> Any:
        x = inp["x"]
        if enter_per_call:
            with fx.handlers(*outer):
                for _ in range(n):
                    with fx.handlers(*cells):
                        y = fn(x)
        else:
            with fx.handlers(*outer), fx.handlers(*cells):
                for _ in range(n):
                    y = fn(x)
        return jax.block_until_ready((y, cells[2].value))

    return batch, traced


def effax_cells_contender(inp: dict[str, Any]) -> tuple[Callable[[int], Any], Traces]:
    """`handle(step, *cells, transform=jax.jit)`: the cells keep state across calls."""
    traced = Traces(step)
    cells = (scale.provide(inp["scale"]), noise.seed(inp["key"]), total.init(inp["total"]))
    fn = fx.handle(traced, *cells, transform=jax.jit)

    def batch(n: int) -> Any:
        x = inp["x"]
        for _ in range(n):
            y = fn(x)
        return jax.block_until_ready((y, cells[2].value))

    return batch, traced


def hand_deep_contender(inp: dict[str, Any]) -> tuple[Callable[[int], Any], Traces]:
    traced = Traces(pure_deep_step)
    fn = jax.jit(traced)
    s = {"means": inp["means"], "counter": 0}

    def batch(n: int) -> Any:
        w, scale_v, key, x = inp["weights"], inp["scale"], inp["key"], inp["deep_x"]
        means, counter = s["means"], s["counter"]
        for _ in range(n):
            y, means = fn(w, scale_v, key, counter, means, x)
            counter += 1
        s["means"], s["counter"] = means, counter
        return jax.block_until_ready((y, means))

    return batch, traced


def effax_deep_contender(
    inp: dict[str, Any], *, one_state: bool
) -> tuple[Callable[[int], Any], Traces, Callable[[], list[jax.Array]]]:
    traced = Traces(deep_step_one if one_state else deep_step_many)
    fn = fx.handle(traced, transform=jax.jit)
    base = [scale.provide(inp["scale"]), noise.seed(inp["key"])]
    if one_state:
        state_cells = [all_means.init(list(inp["means"]))]

        def means() -> list[jax.Array]:
            return list(state_cells[0].value)
    else:
        state_cells = [m.init(v) for m, v in zip(layer_means, inp["means"], strict=True)]

        def means() -> list[jax.Array]:
            return [c.value for c in state_cells]

    cells = [*base, *state_cells]

    def batch(n: int) -> Any:
        w, x = inp["weights"], inp["deep_x"]
        with fx.handlers(*cells):
            for _ in range(n):
                y = fn(w, x)
        return jax.block_until_ready((y, means()))

    return batch, traced, means


def _same(a: Any, b: Any) -> bool:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def outputs(batch: Callable[[int], Any], calls: int = 3) -> list[Any]:
    """The first `calls` results (outputs and final states) of a fresh contender."""
    return [batch(1) for _ in range(calls)]


# --- main ---------------------------------------------------------------------------

HAND = "jax.jit, hand-plumbed"
AROUND = "effax.handle(jit), handlers around"
CELLS = "effax.handle(jit, *cells)"
AROUND_100 = "effax.handle(jit), +100 unrelated handlers"
HAND_HOTTER = "jax.jit, hand-plumbed, the interceptor folded in"
INTERCEPTED = "effax.handle(jit), handlers around + 1 interceptor"
PER_CALL = "effax.handle(jit), +100 unrelated, `with` per call"
DEEP_MANY = "effax.handle(jit), 100 States"
DEEP_ONE = "effax.handle(jit), 1 State x 100 leaves"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    number, repeat = (1, 1) if args.quick else (200, 101)

    inp = _inputs()
    # cases 1 and 3, interleaved in one run
    hand, hand_traces = hand_contender(inp)
    around, around_traces = effax_around_contender(inp)
    cells, cells_traces = effax_cells_contender(inp)
    around100, around100_traces = effax_around_contender(inp, unrelated=True)
    per_call, per_call_traces = effax_around_contender(inp, unrelated=True, enter_per_call=True)
    hand_hotter, hand_hotter_traces = hand_contender(inp, pure_step_hotter)
    intercepted, intercepted_traces = effax_around_contender(inp, intercepted=True)
    contenders = {
        HAND: hand,
        AROUND: around,
        CELLS: cells,
        AROUND_100: around100,
        PER_CALL: per_call,
        HAND_HOTTER: hand_hotter,
        INTERCEPTED: intercepted,
    }
    traces = {
        HAND: hand_traces,
        AROUND: around_traces,
        CELLS: cells_traces,
        AROUND_100: around100_traces,
        PER_CALL: per_call_traces,
        HAND_HOTTER: hand_hotter_traces,
        INTERCEPTED: intercepted_traces,
    }
    # The first calls (which also warm up: compile, and let effax narrow what it
    # plumbs) must give bit-identical outputs and states.
    expected = outputs(hand)
    agreement = {
        name: _same(outputs(batch), expected)
        for name, batch in contenders.items()
        if name not in (HAND, HAND_HOTTER, INTERCEPTED)
    }
    agreement[INTERCEPTED] = _same(outputs(intercepted), outputs(hand_hotter))
    traces_warm = {name: t.count for name, t in traces.items()}
    samples = h.interleaved(contenders, number=number, repeat=repeat, warmup=0)
    retraces = {name: t.count - traces_warm[name] for name, t in traces.items()}

    rows = h.compared_rows(
        "1",
        {k: samples[k] for k in (HAND, AROUND, CELLS)},
        HAND,
        targets={AROUND: 1.10, CELLS: 1.10},
    )
    r3 = h.paired_ratio(samples[AROUND_100], samples[AROUND])
    rows.append(
        h.row(
            "3",
            AROUND_100,
            h.median(samples[AROUND_100]),
            unit="us/call",
            baseline=AROUND,
            baseline_value=h.median(samples[AROUND]),
            ratio=r3,
            target=1.05,
            notes=(
                f"traces while warming up: {traces_warm[AROUND_100]} "
                f"(case 1: {traces_warm[AROUND]}); retraces while timing: "
                f"{retraces[AROUND_100]}; vs {HAND}: "
                f"{h.paired_ratio(samples[AROUND_100], samples[HAND]):.3f}"
            ),
        )
    )

    rows.append(
        h.row(
            "3",
            PER_CALL,
            h.median(samples[PER_CALL]),
            unit="us/call",
            baseline=AROUND,
            baseline_value=h.median(samples[AROUND]),
            ratio=h.paired_ratio(samples[PER_CALL], samples[AROUND]),
            notes=(
                "informative, no target: the 3 handlers entered with a `with` block "
                "around every call, inside the 100 unrelated ones; retraces while "
                f"timing: {retraces[PER_CALL]}"
            ),
        )
    )

    # case 11: one interceptor, against its hand-written program
    rows += h.compared_rows(
        "11",
        {k: samples[k] for k in (HAND_HOTTER, INTERCEPTED)},
        HAND_HOTTER,
        targets={INTERCEPTED: 1.05},
        notes={
            INTERCEPTED: f"traces: {intercepted_traces.count}; vs {AROUND} (the same step "
            f"without it): {h.paired_ratio(samples[INTERCEPTED], samples[AROUND]):.3f}"
        },
    )

    # case 2
    deep_hand, _ = hand_deep_contender(inp)
    deep_many, deep_many_traces, _ = effax_deep_contender(inp, one_state=False)
    deep_one, deep_one_traces, _ = effax_deep_contender(inp, one_state=True)
    deep = {HAND: deep_hand, DEEP_MANY: deep_many, DEEP_ONE: deep_one}
    expected = outputs(deep_hand)
    agreement.update({name: _same(outputs(deep[name]), expected) for name in (DEEP_MANY, DEEP_ONE)})
    if not all(agreement.values()):
        raise AssertionError(f"effax and the hand-plumbed step disagree: {agreement}")
    deep_samples = h.interleaved(deep, number=max(number // 2, 1), repeat=repeat, warmup=0)
    rows += h.compared_rows(
        "2",
        deep_samples,
        HAND,
        targets={DEEP_MANY: 1.15, DEEP_ONE: 1.15},
        notes={
            DEEP_MANY: f"traces: {deep_many_traces.count}",
            DEEP_ONE: f"traces: {deep_one_traces.count}",
        },
    )

    h.print_rows("cases 1-3: per-call dispatch (median us per call; ratio paired)", rows)
    results = {
        "rows": rows,
        "agreement": agreement,
        "traces_after_warmup": traces_warm,
        "retraces_while_timing": retraces,
        "samples": {"cases 1, 3": samples, "case 2": deep_samples},
        "number": number,
        "repeat": repeat,
    }
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
