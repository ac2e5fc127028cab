"""Case 6: one small model trained the same way in effax and in the peer libraries.

Run: python benchmarks/bench_peers.py [--quick]

The model everywhere: ``x -> relu(x @ w1 + b1)``, a running mean of that hidden
layer kept as state (``m = 0.9 m + 0.1 mean(h)``, not differentiated), dropout
whose rate is a configuration value, then ``@ w2 + b2``; mean squared error,
plain SGD. Every library starts from the same parameters and sees the same
batches; each training step is one compiled call:

- effax: ``effax.handle(train_step, *cells, transform=jax.jit)``; the model
  performs ``Ask`` (the rate, static), ``RandomKey`` (dropout) and ``State``
  (parameters, running mean).
- hand-plumbed: ``jax.jit`` of the pure step, everything passed in and out.
- Flax NNX: ``nnx.jit`` of the step on an ``nnx.Module`` (``BatchStat``, ``Rngs``),
  and NNX's documented fast path (``nnx.split`` once, ``jax.jit`` of a step that
  merges and splits).
- Haiku: ``hk.transform_with_state`` + ``jax.jit``.
- Equinox: ``eqx.nn.StateIndex`` / ``eqx.nn.State`` + ``eqx.filter_jit``.
- NumPyro: ``handlers.seed`` / ``substitute`` / ``trace`` (``numpyro.param``,
  ``numpyro.mutable``, ``numpyro.prng_key``) + ``jax.jit``.

Each step's dropout key is derived inside the compiled step from a base key and
a step counter, never by an eager ``split`` between steps, so that no library
pays an extra dispatch the others do not. The peers are optional (``pip install
effax[bench]``): a peer that cannot be imported or fails is reported as skipped,
with the reason.

Agreement: without dropout every library computes the same losses, parameters
and running means (up to float rounding; the bitwise flag says whether exactly).
With dropout, effax, the hand-plumbed step, Flax NNX (an ``RngStream`` draws
``fold_in(key, count)``) and Equinox (given that key) draw the same masks; Haiku
(``hk.next_rng_key`` splits) and NumPyro (``seed`` splits) derive keys
differently, so their masks, and so their losses, differ by design.
"""

from __future__ import annotations

import argparse
import functools as ft
import json
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import _harness as h
import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

D_IN, D_HIDDEN, D_OUT, BATCH = 16, 32, 1, 32
LR = 0.05
MOMENTUM = 0.9
RATE = 0.1

Params = dict[str, jax.Array]


def initial_params() -> Params:
    rng = np.random.default_rng(0)
    return {
        "w1": jnp.asarray(rng.normal(size=(D_IN, D_HIDDEN)) / np.sqrt(D_IN), jnp.float32),
        "b1": jnp.asarray(rng.normal(size=(D_HIDDEN,)) * 0.1, jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(D_HIDDEN, D_OUT)) / np.sqrt(D_HIDDEN), jnp.float32),
        "b2": jnp.zeros((D_OUT,), jnp.float32),
    }


def make_batches(n: int) -> list[tuple[jax.Array, jax.Array]]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        x = rng.normal(size=(BATCH, D_IN)).astype(np.float32)
        y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
        out.append((jnp.asarray(x), jnp.asarray(y)))
    return out


def _dense(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return x @ w + b[None, :]


def _running(mean: jax.Array, h_: jax.Array) -> jax.Array:
    return MOMENTUM * mean + (1 - MOMENTUM) * jnp.mean(jax.lax.stop_gradient(h_), axis=0)


def _dropout(key: jax.Array, rate: float, h_: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - rate, h_.shape)
    return jnp.where(keep, h_ / (1.0 - rate), 0.0)


def _sgd(params: Any, grads: Any) -> Any:
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


class Trainer(NamedTuple):
    """`step(x, y) -> loss` advances training by one compiled call; `final()` is
    `(params in the canonical layout, running mean)`."""

    step: Callable[[jax.Array, jax.Array], jax.Array]
    final: Callable[[], tuple[Params, jax.Array]]


Maker = Callable[[float, Params, jax.Array], Trainer]


# --- effax ------------------------------------------------------------------------

rate_config = fx.Ask[float]("peers.dropout_rate", static=True)
dropout = fx.RandomKey("peers.dropout")
params_state = fx.State[Params]("peers.params")
running_mean = fx.State[jax.Array]("peers.running_mean")


def effax_mlp(params: Params, x: jax.Array) -> jax.Array:
    """Library code: performs its effects, plumbs nothing."""
    h_ = jax.nn.relu(_dense(x, params["w1"], params["b1"]))
    running_mean.modify(lambda m: _running(m, h_))
    rate = rate_config.ask()
    if rate > 0:
        h_ = _dropout(dropout.next_key(), rate, h_)
    return _dense(h_, params["w2"], params["b2"])


def effax_train_step(x: jax.Array, y: jax.Array) -> jax.Array:
    params = params_state.get()

    def loss_fn(p: Params) -> tuple[jax.Array, jax.Array]:
        # the running mean is updated under `jax.grad`: a handler installed inside
        # it keeps the update there, and it leaves as an auxiliary output
        with fx.handlers(running_mean.init(running_mean.get())) as hs:
            out = effax_mlp(p, x)
        return jnp.mean((out - y) ** 2), hs[running_mean]

    (loss, mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    running_mean.set(mean)
    params_state.set(_sgd(params, grads))
    return loss


def make_effax(rate: float, params: Params, key: jax.Array) -> Trainer:
    cells = (
        rate_config.provide(rate),
        dropout.seed(key),
        params_state.init(params),
        running_mean.init(jnp.zeros(D_HIDDEN, jnp.float32)),
    )
    step = fx.handle(effax_train_step, *cells, transform=jax.jit)
    return Trainer(step, lambda: (cells[2].value, cells[3].value))


# --- hand-plumbed -------------------------------------------------------------------


def hand_train_step(
    rate: float,
    params: Params,
    mean: jax.Array,
    base_key: jax.Array,
    counter: Any,
    x: jax.Array,
    y: jax.Array,
) -> tuple[Params, jax.Array, jax.Array]:
    def loss_fn(p: Params) -> tuple[jax.Array, jax.Array]:
        h_ = jax.nn.relu(_dense(x, p["w1"], p["b1"]))
        new_mean = _running(mean, h_)
        if rate > 0:
            h_ = _dropout(jax.random.fold_in(base_key, counter), rate, h_)
        out = _dense(h_, p["w2"], p["b2"])
        return jnp.mean((out - y) ** 2), new_mean

    (loss, new_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return _sgd(params, grads), new_mean, loss


def make_hand(rate: float, params: Params, key: jax.Array) -> Trainer:
    jitted = jax.jit(ft.partial(hand_train_step, rate))
    s: dict[str, Any] = {"params": params, "mean": jnp.zeros(D_HIDDEN, jnp.float32), "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["params"], s["mean"], loss = jitted(s["params"], s["mean"], key, s["n"], x, y)
        if rate > 0:
            s["n"] += 1
        return loss

    return Trainer(step, lambda: (s["params"], s["mean"]))


# --- Flax NNX ------------------------------------------------------------------------


def _nnx_model(rate: float, params: Params, key: jax.Array) -> Any:
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self) -> None:
            self.l1 = nnx.Linear(D_IN, D_HIDDEN, rngs=nnx.Rngs(0))
            self.l2 = nnx.Linear(D_HIDDEN, D_OUT, rngs=nnx.Rngs(0))
            self.l1.kernel = nnx.Param(params["w1"])
            self.l1.bias = nnx.Param(params["b1"])
            self.l2.kernel = nnx.Param(params["w2"])
            self.l2.bias = nnx.Param(params["b2"])
            self.dropout = nnx.Dropout(rate)
            # an RngStream draws fold_in(key, count): the keys effax draws
            self.rngs = nnx.Rngs(dropout=key)
            self.running_mean = nnx.BatchStat(jnp.zeros(D_HIDDEN, jnp.float32))

        def __call__(self, x: jax.Array) -> jax.Array:
            h_ = jax.nn.relu(self.l1(x))
            self.running_mean[...] = _running(self.running_mean[...], h_)
            h_ = self.dropout(h_, rngs=self.rngs)
            return self.l2(h_)  # type: ignore[no-any-return]

    return MLP()


def _nnx_train(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    from flax import nnx

    def loss_fn(model: Any) -> jax.Array:
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    nnx.update(model, _sgd(nnx.state(model, nnx.Param), grads))
    return loss  # type: ignore[no-any-return]


def _nnx_final(model: Any) -> tuple[Params, jax.Array]:
    p = {
        "w1": model.l1.kernel[...],
        "b1": model.l1.bias[...],
        "w2": model.l2.kernel[...],
        "b2": model.l2.bias[...],
    }
    return p, model.running_mean[...]


def make_nnx(rate: float, params: Params, key: jax.Array) -> Trainer:
    from flax import nnx

    model = _nnx_model(rate, params, key)
    train_step = nnx.jit(_nnx_train)
    return Trainer(lambda x, y: train_step(model, x, y), lambda: _nnx_final(model))


def make_nnx_functional(rate: float, params: Params, key: jax.Array) -> Trainer:
    """NNX's documented fast path: split once, ``jax.jit`` a merge/split step."""
    from flax import nnx

    graphdef, state = nnx.split(_nnx_model(rate, params, key))

    @jax.jit
    def train_step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        model = nnx.merge(graphdef, state)
        loss = _nnx_train(model, x, y)
        return nnx.state(model), loss

    s = {"state": state}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["state"], loss = train_step(s["state"], x, y)
        return loss

    return Trainer(step, lambda: _nnx_final(nnx.merge(graphdef, s["state"])))


# --- Haiku ---------------------------------------------------------------------------


def make_haiku(rate: float, params: Params, key: jax.Array) -> Trainer:
    import haiku as hk

    def forward(x: jax.Array) -> jax.Array:
        h_ = jax.nn.relu(hk.Linear(D_HIDDEN, name="l1")(x))
        mean = hk.get_state("running_mean", [D_HIDDEN], init=jnp.zeros)
        hk.set_state("running_mean", _running(mean, h_))
        if rate > 0:
            h_ = hk.dropout(hk.next_rng_key(), rate, h_)
        return hk.Linear(D_OUT, name="l2")(h_)  # type: ignore[no-any-return]

    model = hk.transform_with_state(forward)
    hk_params = {
        "l1": {"w": params["w1"], "b": params["b1"]},
        "l2": {"w": params["w2"], "b": params["b2"]},
    }
    _, hk_state = model.init(key, jnp.zeros((BATCH, D_IN), jnp.float32))

    @jax.jit
    def train_step(
        p: Any, state: Any, base_key: jax.Array, counter: Any, x: jax.Array, y: jax.Array
    ) -> tuple[Any, Any, jax.Array]:
        def loss_fn(p: Any) -> tuple[jax.Array, Any]:
            out, new_state = model.apply(p, state, jax.random.fold_in(base_key, counter), x)
            return jnp.mean((out - y) ** 2), new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(p)
        return _sgd(p, grads), new_state, loss

    s: dict[str, Any] = {"params": hk_params, "state": hk_state, "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["params"], s["state"], loss = train_step(s["params"], s["state"], key, s["n"], x, y)
        s["n"] += 1
        return loss

    def final() -> tuple[Params, jax.Array]:
        p = s["params"]
        canonical = {"w1": p["l1"]["w"], "b1": p["l1"]["b"], "w2": p["l2"]["w"]}
        canonical["b2"] = p["l2"]["b"]
        return canonical, s["state"]["~"]["running_mean"]

    return Trainer(step, final)


# --- Equinox -------------------------------------------------------------------------


def make_equinox(rate: float, params: Params, key: jax.Array) -> Trainer:
    import equinox as eqx

    class MLP(eqx.Module):
        l1: eqx.nn.Linear
        l2: eqx.nn.Linear
        dropout: eqx.nn.Dropout
        running_mean: eqx.nn.StateIndex

        def __init__(self) -> None:
            k1, k2 = jax.random.split(jax.random.key(0))
            l1 = eqx.nn.Linear(D_IN, D_HIDDEN, key=k1)
            l2 = eqx.nn.Linear(D_HIDDEN, D_OUT, key=k2)
            self.l1 = eqx.tree_at(lambda m: (m.weight, m.bias), l1, (params["w1"].T, params["b1"]))
            self.l2 = eqx.tree_at(lambda m: (m.weight, m.bias), l2, (params["w2"].T, params["b2"]))
            self.dropout = eqx.nn.Dropout(rate)
            self.running_mean = eqx.nn.StateIndex(jnp.zeros(D_HIDDEN, jnp.float32))

        def __call__(
            self, x: jax.Array, state: eqx.nn.State, key: jax.Array
        ) -> tuple[jax.Array, eqx.nn.State]:
            h_ = jax.nn.relu(jax.vmap(self.l1)(x))
            state = state.set(self.running_mean, _running(state.get(self.running_mean), h_))
            h_ = self.dropout(h_, key=key)  # one mask for the batch, as everywhere else
            return jax.vmap(self.l2)(h_), state

    model, state = eqx.nn.make_with_state(MLP)()

    @eqx.filter_jit
    def train_step(
        model: MLP,
        state: eqx.nn.State,
        base_key: jax.Array,
        counter: jax.Array,
        x: jax.Array,
        y: jax.Array,
    ) -> tuple[MLP, eqx.nn.State, jax.Array]:
        key = jax.random.fold_in(base_key, counter)

        def loss_fn(model: MLP) -> tuple[jax.Array, eqx.nn.State]:
            out, new_state = model(x, state, key)
            return jnp.mean((out - y) ** 2), new_state

        (loss, new_state), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(model)
        model = eqx.apply_updates(model, jax.tree.map(lambda g: -LR * g, grads))
        return model, new_state, loss

    s: dict[str, Any] = {"model": model, "state": state, "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        # filter_jit treats Python ints as static: the counter goes in as an array
        counter = np.asarray(s["n"], np.int32)
        s["model"], s["state"], loss = train_step(s["model"], s["state"], key, counter, x, y)
        if rate > 0:
            s["n"] += 1
        return loss

    def final() -> tuple[Params, jax.Array]:
        m = s["model"]
        p = {"w1": m.l1.weight.T, "b1": m.l1.bias, "w2": m.l2.weight.T, "b2": m.l2.bias}
        return p, s["state"].get(m.running_mean)

    return Trainer(step, final)


# --- NumPyro -------------------------------------------------------------------------


def make_numpyro(rate: float, params: Params, key: jax.Array) -> Trainer:
    import numpyro
    from numpyro import handlers
    from numpyro.primitives import mutable

    def model(x: jax.Array) -> jax.Array:
        w1 = numpyro.param("w1", params["w1"])
        b1 = numpyro.param("b1", params["b1"])
        w2 = numpyro.param("w2", params["w2"])
        b2 = numpyro.param("b2", params["b2"])
        h_ = jax.nn.relu(_dense(x, w1, b1))
        stats = mutable("running_mean", {"value": jnp.zeros(D_HIDDEN, jnp.float32)})
        stats["value"] = _running(stats["value"], h_)
        if rate > 0:
            h_ = _dropout(numpyro.prng_key(), rate, h_)
        return _dense(h_, w2, b2)  # type: ignore[no-any-return]

    @jax.jit
    def train_step(
        p: Params, mean: jax.Array, base_key: jax.Array, counter: Any, x: jax.Array, y: jax.Array
    ) -> tuple[Params, jax.Array, jax.Array]:
        def loss_fn(p: Params) -> tuple[jax.Array, jax.Array]:
            data = {**p, "running_mean": {"value": mean}}
            seed = jax.random.fold_in(base_key, counter)
            with handlers.trace() as tr, handlers.seed(rng_seed=seed):
                out = handlers.substitute(model, data=data)(x)
            return jnp.mean((out - y) ** 2), tr["running_mean"]["value"]["value"]

        (loss, new_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(p)
        return _sgd(p, grads), new_mean, loss

    s: dict[str, Any] = {"params": params, "mean": jnp.zeros(D_HIDDEN, jnp.float32), "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["params"], s["mean"], loss = train_step(s["params"], s["mean"], key, s["n"], x, y)
        s["n"] += 1
        return loss

    return Trainer(step, lambda: (s["params"], s["mean"]))


# --- the comparison ----------------------------------------------------------------

EFFAX = "effax.handle(jax.jit)"
HAND = "jax.jit, hand-plumbed"
LIBRARIES: dict[str, tuple[Maker, str]] = {
    EFFAX: (make_effax, "effax"),
    HAND: (make_hand, "jax"),
    "Flax NNX (nnx.jit)": (make_nnx, "flax"),
    "Flax NNX (split/merge + jax.jit)": (make_nnx_functional, "flax"),
    "Haiku (transform_with_state + jax.jit)": (make_haiku, "dm-haiku"),
    "Equinox (eqx.nn.State + filter_jit)": (make_equinox, "equinox"),
    "NumPyro (seed/substitute + jax.jit)": (make_numpyro, "numpyro"),
}
REQUIRED = (EFFAX, HAND)
# libraries whose dropout keys are fold_in(base_key, counter), like effax's
SAME_KEYS = {
    EFFAX,
    HAND,
    "Flax NNX (nnx.jit)",
    "Flax NNX (split/merge + jax.jit)",
    "Equinox (eqx.nn.State + filter_jit)",
}


def _version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def train(maker: Maker, rate: float, batches: list[tuple[jax.Array, jax.Array]]) -> Any:
    trainer = maker(rate, initial_params(), jax.random.key(42))
    losses = [trainer.step(x, y) for x, y in batches]
    params, mean = trainer.final()
    return np.asarray(jnp.stack(losses)), {k: np.asarray(v) for k, v in params.items()}, mean


def _max_diff(a: Any, b: Any) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _bitwise(a: Any, b: Any) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def agreement(
    makers: dict[str, Maker], batches: list[tuple[jax.Array, jax.Array]]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Train each from the same start; compare with the hand-plumbed step.

    Returns the report, and the libraries that failed (with the reason): a peer
    that raises is skipped, effax or the hand-plumbed step raising is an error.
    """
    report: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    ref = {rate: train(makers[HAND], rate, batches) for rate in (0.0, RATE)}
    for name, maker in makers.items():
        entry: dict[str, Any] = {}
        try:
            for rate, label in ((0.0, "no_dropout"), (RATE, "dropout")):
                got = train(maker, rate, batches)
                entry[f"{label}_max_abs_diff"] = _max_diff(got, ref[rate])
                entry[f"{label}_bitwise"] = _bitwise(got, ref[rate])
        except Exception as exc:
            if name in REQUIRED:
                raise
            failed[name] = _reason(exc)
            continue
        entry["agrees"] = entry["no_dropout_max_abs_diff"] <= 1e-4 and (
            name not in SAME_KEYS or entry["dropout_max_abs_diff"] <= 1e-4
        )
        entry["note"] = (
            "same dropout keys (fold_in(base_key, counter))"
            if name in SAME_KEYS
            else "dropout keys derived by splitting: masks differ by design"
        )
        report[name] = entry
    return report, failed


def _reason(exc: Exception) -> str:
    reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    if not isinstance(exc, ImportError):
        where = traceback.extract_tb(exc.__traceback__)[-1]
        reason += f" (at {where.filename}:{where.lineno})"
    return reason


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument(
        "--only", nargs="*", default=None, help="library names to run (default: all)"
    )
    args = parser.parse_args(argv)
    number, repeat, check_steps = (1, 1, 2) if args.quick else (50, 61, 20)
    batches = make_batches(max(check_steps, 8))

    makers: dict[str, Maker] = {}
    versions: dict[str, str | None] = {}
    for name, (maker, distribution) in LIBRARIES.items():
        if args.only is None or name in args.only or name in REQUIRED:
            makers[name] = maker
            versions[name] = _version(distribution)

    with warnings.catch_warnings():
        # a peer's own deprecation noise is not ours to fail on
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        agree, skipped = agreement(makers, batches[:check_steps])
        for name in skipped:
            del makers[name]
        for name in REQUIRED:
            if not agree[name]["dropout_bitwise"] or not agree[name]["no_dropout_bitwise"]:
                raise AssertionError(f"{name} disagrees with the hand-plumbed step: {agree}")

        def contender(maker: Maker) -> h.Batch:
            trainer = maker(RATE, initial_params(), jax.random.key(0))
            cycle = {"i": 0}

            def batch(n: int) -> object:
                i = cycle["i"]
                for _ in range(n):
                    x, y = batches[i % len(batches)]
                    loss = trainer.step(x, y)
                    i += 1
                cycle["i"] = i
                return jax.block_until_ready(loss)

            return batch

        samples = h.interleaved(
            {name: contender(maker) for name, maker in makers.items()},
            number=number,
            repeat=repeat,
            warmup=3,
        )

    notes = {}
    for name in samples:
        a = agree[name]
        notes[name] = (
            f"v{versions[name]}; no dropout: max|diff| {a['no_dropout_max_abs_diff']:.1e}"
            f"{' (bitwise)' if a['no_dropout_bitwise'] else ''}; dropout: "
            + (
                f"max|diff| {a['dropout_max_abs_diff']:.1e}"
                f"{' (bitwise)' if a['dropout_bitwise'] else ''}"
                if name in SAME_KEYS
                else "different key derivation"
            )
        )
    rows = [
        h.row(
            "6",
            HAND,
            h.median(samples[HAND]),
            unit="us/step",
            notes=notes[HAND],
        ),
        *h.compared_rows("6", samples, HAND, unit="us/step", notes=notes),
    ]
    for name, reason in skipped.items():
        rows.append(h.row("6", name, float("nan"), unit="us/step", notes=f"SKIPPED: {reason}"))
    fastest = min(samples, key=lambda n: h.median(samples[n]))
    h.print_rows("case 6: one training step, effax and the peers (median us per step)", rows)
    print(f"  fastest: {fastest}")
    results = {
        "rows": rows,
        "agreement": agree,
        "skipped": skipped,
        "versions": versions,
        "fastest": fastest,
        "samples": samples,
        "number": number,
        "repeat": repeat,
    }
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
