"""Case 6: small models trained the same way in effax and in the peer libraries.

Run: python benchmarks/bench_peers.py [--quick] [--models MLP CNN] [--only NAME ...]

Two models (``_peer_models.py``), each written once per library and sharing one
shape: ``features`` up to a hidden layer ``h``, a running mean of ``h`` kept as
state (``m = 0.9 m + 0.1 mean(h)``, not differentiated), dropout on ``h`` whose
rate is a configuration value, then ``head``; plain SGD. The MLP (``x ->
relu(x @ w1 + b1)``, dropout, ``@ w2 + b2``; mean squared error) and a CNN in
the spirit of Flax's NNX MNIST tutorial (conv, relu, avg_pool, conv, relu,
avg_pool, flatten, dense, relu, dropout, dense; softmax cross-entropy on
MNIST-shaped synthetic batches). The CNN's rows are the MLP's names suffixed
`` [CNN]``. Every library starts from the same parameters and sees the same
batches; each training step is one compiled call. One trainer per library,
parametrised by the model:

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
differently, so their masks, and so their losses, differ by design. The trainer
checked with dropout is the one then timed (its compiled step is warm).
"""

from __future__ import annotations

import argparse
import functools as ft
import json
import traceback
import typing
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import _harness as h
import jax
import jax.numpy as jnp
import numpy as np
from _peer_models import (
    CNN,
    MLP,
    MODELS,
    Batches,
    Model,
    Params,
    dropout_mask,
    equinox_params,
    nnx_params,
    running,
)

import effax as fx

LR = 0.05
RATE = 0.1


def _sgd(params: Any, grads: Any) -> Any:
    return jax.tree.map(lambda p, g: p - LR * g, params, grads)


class Trainer(NamedTuple):
    """`step(x, y) -> loss` advances training by one compiled call; `final()` is
    `(params in the canonical layout, running mean)`."""

    step: Callable[[jax.Array, jax.Array], jax.Array]
    final: Callable[[], tuple[Params, jax.Array]]


Maker = Callable[[Model, float, Params, jax.Array], Trainer]


# --- effax ------------------------------------------------------------------------

rate_config = fx.Ask[float]("peers.dropout_rate", static=True)
dropout = fx.RandomKey("peers.dropout")
params_state = fx.State[Params]("peers.params")
running_mean = fx.State[jax.Array]("peers.running_mean")


def effax_forward(model: Model, params: Params, x: jax.Array) -> jax.Array:
    """Library code: performs its effects, plumbs nothing."""
    h_ = model.features(params, x)
    running_mean.modify(lambda m: running(m, h_))
    rate = rate_config.ask()
    if rate > 0:
        h_ = dropout_mask(dropout.next_key(), rate, h_)
    return model.head(params, h_)


def effax_train_step(model: Model, x: jax.Array, y: jax.Array) -> jax.Array:
    params = params_state.get()

    def loss_fn(p: Params) -> tuple[jax.Array, jax.Array]:
        # the running mean is updated under `jax.grad`: a handler installed inside
        # it keeps the update there, and it leaves as an auxiliary output
        with fx.handlers(running_mean.init(running_mean.get())) as hs:
            out = effax_forward(model, p, x)
        return model.loss(out, y), hs[running_mean]

    (loss, mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    running_mean.set(mean)
    params_state.set(_sgd(params, grads))
    return loss


def make_effax(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    cells = (
        rate_config.provide(rate),
        dropout.seed(key),
        params_state.init(params),
        running_mean.init(jnp.zeros(model.hidden, jnp.float32)),
    )
    step = fx.handle(ft.partial(effax_train_step, model), *cells, transform=jax.jit)
    return Trainer(step, lambda: (cells[2].value, cells[3].value))


# --- hand-plumbed -------------------------------------------------------------------


def hand_train_step(
    model: Model,
    rate: float,
    params: Params,
    mean: jax.Array,
    base_key: jax.Array,
    counter: Any,
    x: jax.Array,
    y: jax.Array,
) -> tuple[Params, jax.Array, jax.Array]:
    def loss_fn(p: Params) -> tuple[jax.Array, jax.Array]:
        h_ = model.features(p, x)
        new_mean = running(mean, h_)
        if rate > 0:
            h_ = dropout_mask(jax.random.fold_in(base_key, counter), rate, h_)
        return model.loss(model.head(p, h_), y), new_mean

    (loss, new_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return _sgd(params, grads), new_mean, loss


def make_hand(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    jitted = jax.jit(ft.partial(hand_train_step, model, rate))
    s: dict[str, Any] = {"params": params, "mean": jnp.zeros(model.hidden, jnp.float32), "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["params"], s["mean"], loss = jitted(s["params"], s["mean"], key, s["n"], x, y)
        if rate > 0:
            s["n"] += 1
        return loss

    return Trainer(step, lambda: (s["params"], s["mean"]))


# --- Flax NNX ------------------------------------------------------------------------


def _nnx_net(model: Model, rate: float, params: Params, key: jax.Array) -> Any:
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self) -> None:
            self.layers = model.nnx_layers(params)
            self.dropout = nnx.Dropout(rate)
            # an RngStream draws fold_in(key, count): the keys effax draws
            self.rngs = nnx.Rngs(dropout=key)
            self.running_mean = nnx.BatchStat(jnp.zeros(model.hidden, jnp.float32))

        def __call__(self, x: jax.Array) -> jax.Array:
            h_ = self.layers.features(x)
            self.running_mean[...] = running(self.running_mean[...], h_)
            h_ = self.dropout(h_, rngs=self.rngs)
            return self.layers.head(h_)  # type: ignore[no-any-return]

    return Net()


def _nnx_train(loss: Callable[[jax.Array, jax.Array], jax.Array]) -> Callable[..., jax.Array]:
    from flax import nnx

    def train(net: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        def loss_fn(net: Any) -> jax.Array:
            return loss(net(x), y)

        value, grads = nnx.value_and_grad(loss_fn)(net)
        nnx.update(net, _sgd(nnx.state(net, nnx.Param), grads))
        return value  # type: ignore[no-any-return]

    return train


def _nnx_final(net: Any, params: Params) -> tuple[Params, jax.Array]:
    return nnx_params(net.layers, params), net.running_mean[...]


def make_nnx(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    from flax import nnx

    net = _nnx_net(model, rate, params, key)
    train_step = nnx.jit(_nnx_train(model.loss))
    return Trainer(lambda x, y: train_step(net, x, y), lambda: _nnx_final(net, params))


def make_nnx_functional(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    """NNX's documented fast path: split once, ``jax.jit`` a merge/split step."""
    from flax import nnx

    graphdef, state = nnx.split(_nnx_net(model, rate, params, key))
    train = _nnx_train(model.loss)

    @jax.jit
    def train_step(state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, jax.Array]:
        net = nnx.merge(graphdef, state)
        loss = train(net, x, y)
        return nnx.state(net), loss

    s = {"state": state}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["state"], loss = train_step(s["state"], x, y)
        return loss

    return Trainer(step, lambda: _nnx_final(nnx.merge(graphdef, s["state"]), params))


# --- Haiku ---------------------------------------------------------------------------


def make_haiku(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    import haiku as hk

    def forward(x: jax.Array) -> jax.Array:
        h_ = model.haiku_features(x)
        mean = hk.get_state("running_mean", [model.hidden], init=jnp.zeros)
        hk.set_state("running_mean", running(mean, h_))
        if rate > 0:
            h_ = hk.dropout(hk.next_rng_key(), rate, h_)
        return model.haiku_head(h_)

    net = hk.transform_with_state(forward)
    # the canonical layout is Haiku's: the parameters go in as they are. `init` runs
    # abstractly, for the state's structure (the running mean starts at zero): its
    # random initialisers would run eagerly only to be overwritten
    _, state_shape = jax.eval_shape(net.init, key, model.make_batches(1)[0][0])
    hk_state = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), state_shape)

    @jax.jit
    def train_step(
        p: Params, state: Any, base_key: jax.Array, counter: Any, x: jax.Array, y: jax.Array
    ) -> tuple[Params, Any, jax.Array]:
        def loss_fn(p: Params) -> tuple[jax.Array, Any]:
            out, new_state = net.apply(p, state, jax.random.fold_in(base_key, counter), x)
            return model.loss(out, y), new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(p)
        return _sgd(p, grads), new_state, loss

    s: dict[str, Any] = {"params": params, "state": hk_state, "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        s["params"], s["state"], loss = train_step(s["params"], s["state"], key, s["n"], x, y)
        s["n"] += 1
        return loss

    return Trainer(step, lambda: (s["params"], s["state"]["~"]["running_mean"]))


# --- Equinox -------------------------------------------------------------------------


def make_equinox(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    import equinox as eqx

    class Net(eqx.Module):
        # annotations are strings here; a bare name (`Any`) would make dataclasses
        # look this module up in sys.modules, which a file-loaded module is not in
        layers: typing.Any  # the model's eqx.Module: .features, .head
        dropout: eqx.nn.Dropout
        running_mean: eqx.nn.StateIndex[jax.Array]

        def __init__(self) -> None:
            self.layers = model.equinox_layers(params)
            self.dropout = eqx.nn.Dropout(rate)
            self.running_mean = eqx.nn.StateIndex(jnp.zeros(model.hidden, jnp.float32))

        def __call__(
            self, x: jax.Array, state: eqx.nn.State, key: jax.Array
        ) -> tuple[jax.Array, eqx.nn.State]:
            h_ = jax.vmap(self.layers.features)(x)
            state = state.set(self.running_mean, running(state.get(self.running_mean), h_))
            h_ = self.dropout(h_, key=key)  # one mask for the batch, as everywhere else
            return jax.vmap(self.layers.head)(h_), state

    net, state = eqx.nn.make_with_state(Net)()

    @eqx.filter_jit
    def train_step(
        net: Net,
        state: eqx.nn.State,
        base_key: jax.Array,
        counter: Any,
        x: jax.Array,
        y: jax.Array,
    ) -> tuple[Net, eqx.nn.State, jax.Array]:
        key = jax.random.fold_in(base_key, counter)

        def loss_fn(net: Net) -> tuple[jax.Array, eqx.nn.State]:
            out, new_state = net(x, state, key)
            return model.loss(out, y), new_state

        (loss, new_state), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(net)
        net = eqx.apply_updates(net, jax.tree.map(lambda g: -LR * g, grads))
        return net, new_state, loss

    s: dict[str, Any] = {"net": net, "state": state, "n": 0}

    def step(x: jax.Array, y: jax.Array) -> jax.Array:
        # filter_jit treats Python ints as static: the counter goes in as an array
        counter = np.asarray(s["n"], np.int32)
        s["net"], s["state"], loss = train_step(s["net"], s["state"], key, counter, x, y)
        if rate > 0:
            s["n"] += 1
        return loss

    def final() -> tuple[Params, jax.Array]:
        net = s["net"]
        return equinox_params(net.layers, params), s["state"].get(net.running_mean)

    return Trainer(step, final)


# --- NumPyro -------------------------------------------------------------------------


def make_numpyro(model: Model, rate: float, params: Params, key: jax.Array) -> Trainer:
    import numpyro
    from numpyro import handlers
    from numpyro.primitives import mutable

    def net(x: jax.Array) -> jax.Array:
        p = {
            layer: {k: numpyro.param(f"{layer}.{k}", v) for k, v in leaves.items()}
            for layer, leaves in params.items()
        }
        h_ = model.features(p, x)
        stats = mutable("running_mean", {"value": jnp.zeros(model.hidden, jnp.float32)})
        stats["value"] = running(stats["value"], h_)
        if rate > 0:
            h_ = dropout_mask(numpyro.prng_key(), rate, h_)
        return model.head(p, h_)

    @jax.jit
    def train_step(
        p: Params, mean: jax.Array, base_key: jax.Array, counter: Any, x: jax.Array, y: jax.Array
    ) -> tuple[Params, jax.Array, jax.Array]:
        def loss_fn(p: Params) -> tuple[jax.Array, jax.Array]:
            data: dict[str, Any] = {
                f"{layer}.{k}": v for layer, leaves in p.items() for k, v in leaves.items()
            }
            data["running_mean"] = {"value": mean}
            seed = jax.random.fold_in(base_key, counter)
            with handlers.trace() as tr, handlers.seed(rng_seed=seed):
                out = handlers.substitute(net, data=data)(x)
            return model.loss(out, y), tr["running_mean"]["value"]["value"]

        (loss, new_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(p)
        return _sgd(p, grads), new_mean, loss

    s: dict[str, Any] = {"params": params, "mean": jnp.zeros(model.hidden, jnp.float32), "n": 0}

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
# (number, repeat) of the timing: a CNN step costs tens of MLP steps
TIMING = {MLP.name: (50, 61), CNN.name: (5, 61)}


def contender(library: str, model: Model) -> str:
    """The row's name: the library's, suffixed with the model's (none for the MLP)."""
    return library + model.suffix


# every row case 6 can report: contender name -> (library, model)
CONTENDERS = {contender(lib, m): (lib, m) for m in MODELS.values() for lib in LIBRARIES}


def _version(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def train(trainer: Trainer, batches: Batches) -> Any:
    losses = [trainer.step(x, y) for x, y in batches]
    params, mean = trainer.final()
    return np.asarray(jnp.stack(losses)), jax.tree.map(np.asarray, params), np.asarray(mean)


def _max_diff(a: Any, b: Any) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def agreement(
    model: Model, makers: dict[str, Maker], batches: Batches
) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, Trainer]]:
    """Train each library from the same start, without and with dropout; compare
    with the hand-plumbed step.

    Returns the report and the libraries that failed (with the reason), both keyed
    by library name, and each library's trainer with dropout, to be timed. A peer
    that raises is skipped; effax or the hand-plumbed step raising is an error.
    """
    report: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    trainers: dict[str, Trainer] = {}
    ref: dict[float, Any] = {}
    for name in sorted(makers, key=lambda n: n != HAND):  # the reference first
        entry: dict[str, Any] = {}
        try:
            for rate, label in ((0.0, "no_dropout"), (RATE, "dropout")):
                trainer = makers[name](model, rate, model.initial_params(), jax.random.key(42))
                got = train(trainer, batches)
                ref.setdefault(rate, got)
                entry[f"{label}_max_abs_diff"] = _max_diff(got, ref[rate])
                entry[f"{label}_bitwise"] = h.same_bits(got, ref[rate])
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
        trainers[name] = trainer
    return report, failed, trainers


def _reason(exc: Exception) -> str:
    reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    if not isinstance(exc, ImportError):
        where = traceback.extract_tb(exc.__traceback__)[-1]
        reason += f" (at {where.filename}:{where.lineno})"
    return reason


def _timed(trainer: Trainer, batches: Batches) -> h.Batch:
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


def _note(name: str, version: str | None, a: dict[str, Any]) -> str:
    dropout_note = (
        f"max|diff| {a['dropout_max_abs_diff']:.1e}{' (bitwise)' if a['dropout_bitwise'] else ''}"
        if name in SAME_KEYS
        else "different key derivation"
    )
    return (
        f"v{version}; no dropout: max|diff| {a['no_dropout_max_abs_diff']:.1e}"
        f"{' (bitwise)' if a['no_dropout_bitwise'] else ''}; dropout: {dropout_note}"
    )


def compare(
    model: Model, makers: dict[str, Maker], versions: dict[str, str | None], *, quick: bool
) -> dict[str, Any]:
    """One model: check every library, time them interleaved; rows named by
    `contender`, with ratios to the hand-plumbed step on the same model."""
    number, repeat = (1, 1) if quick else TIMING[model.name]
    check_steps = 2 if quick else 20
    batches = model.make_batches(max(check_steps, 8))
    agree, skipped, trainers = agreement(model, makers, batches[:check_steps])
    for name in REQUIRED:
        if not agree[name]["dropout_bitwise"] or not agree[name]["no_dropout_bitwise"]:
            raise AssertionError(f"{name} disagrees with the hand-plumbed step: {agree}")
    samples = h.interleaved(
        {contender(name, model): _timed(t, batches) for name, t in trainers.items()},
        number=number,
        repeat=repeat,
        warmup=3,
    )
    notes = {contender(n, model): _note(n, versions[n], agree[n]) for n in trainers}
    hand = contender(HAND, model)
    rows = [
        h.row("6", hand, h.median(samples[hand]), unit="us/step", notes=notes[hand]),
        *h.compared_rows("6", samples, hand, unit="us/step", notes=notes),
    ]
    for name, reason in skipped.items():
        rows.append(
            h.row(
                "6",
                contender(name, model),
                float("nan"),
                unit="us/step",
                notes=f"SKIPPED: {reason}",
            )
        )
    return {
        "rows": rows,
        "agreement": {contender(n, model): a for n, a in agree.items()},
        "skipped": {contender(n, model): reason for n, reason in skipped.items()},
        "samples": samples,
        "fastest": min(samples, key=lambda n: h.median(samples[n])),
        "number": number,
        "repeat": repeat,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument(
        "--only", nargs="*", default=None, help="library names to run (default: all)"
    )
    parser.add_argument(
        "--models", nargs="*", default=list(MODELS), choices=list(MODELS), help="models to train"
    )
    args = parser.parse_args(argv)

    makers: dict[str, Maker] = {}
    versions: dict[str, str | None] = {}
    for name, (maker, distribution) in LIBRARIES.items():
        if args.only is None or name in args.only or name in REQUIRED:
            makers[name] = maker
            versions[name] = _version(distribution)

    per_model: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        # a peer's own deprecation noise is not ours to fail on
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        for name in args.models:
            per_model[name] = compare(MODELS[name], makers, versions, quick=args.quick)

    outs = per_model.values()
    results: dict[str, Any] = {
        "rows": [r for out in outs for r in out["rows"]],
        # by contender name (the CNN's suffixed)
        "agreement": {k: v for out in outs for k, v in out["agreement"].items()},
        "skipped": {k: v for out in outs for k, v in out["skipped"].items()},
        "samples": {k: v for out in outs for k, v in out["samples"].items()},
        # by model
        "fastest": {m: out["fastest"] for m, out in per_model.items()},
        "number": {m: out["number"] for m, out in per_model.items()},
        "repeat": {m: out["repeat"] for m, out in per_model.items()},
        # by library
        "versions": versions,
    }
    h.print_rows(
        "case 6: one training step, effax and the peers (median us per step)", results["rows"]
    )
    for name, fastest in results["fastest"].items():
        print(f"  fastest ({name}): {fastest}")
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
