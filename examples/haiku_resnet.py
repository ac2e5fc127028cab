"""A Haiku ResNet with BatchNorm and dropout, migrated to effax two ways.

The original: a small pre-activation ResNet (ResNet v2 blocks: BatchNorm, ReLU,
conv; two stages of two blocks, widths 16 and 32) with ``hk.BatchNorm`` (trainable
scale and offset, ``decay_rate=0.9``: Haiku's zero-debiased moving averages) and
``hk.dropout`` before its head, made with ``hk.transform_with_state`` and trained by
``jax.jit`` of a step that threads ``params``, ``state``, the optimiser state (optax
SGD with momentum) and an rng by hand. The data is synthetic: 16x16x3 images of 10
classes (a smooth template per class, shifted and noisy), made with NumPy.

(A) **the shim**: the Haiku model is unchanged. Its ``state`` dict lives in one
    ``effax.State``, the parameters and the optimiser state in two more, and the rng
    of ``apply`` is drawn from an ``effax.RandomKey``; the training step is
    ``effax.jit`` of a function that reads and writes them. Given the keys the
    stream draws (``fold_in(key(seed), i)`` at step ``i``), the original program
    computes the same losses, parameters and BatchNorm statistics, bit for bit.
(B) **effects in the layers**: the same network as functions of an explicit
    parameter pytree. Each BatchNorm keeps its moving averages in entries of an
    ``effax.StateDict`` created on first use (``bn_state.get(name, init=...)``, as
    ``hk.get_state`` does), with Haiku's arithmetic, debiasing included; the
    training flag is a static ``effax.Ask[bool]`` and dropout draws its keys from
    the same ``effax.RandomKey``. With dropout off it matches Haiku bit for bit;
    with dropout on (its masks come from other keys) it agrees statistically. After
    a first call has created the BatchNorm entries, its step also runs under
    ``effax.scan`` over the steps.

``main`` runs the comparisons and prints them with each program's lines of code
and time per step.

Run: python examples/haiku_resnet.py [--steps N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _porting import lines_of_code

import effax as fx

Params = dict[str, dict[str, jax.Array]]
Batches = tuple[jax.Array, jax.Array]  # images (steps, batch, 16, 16, 3), labels (steps, batch)

N_CLASSES = 10
WIDTHS = (16, 32)  # one stage per width, the first block of a later stage strides 2
BLOCKS = 2  # blocks per stage
DECAY = 0.9  # the BatchNorm moving averages' decay rate
DROPOUT_RATE = 0.2
tx = optax.sgd(0.05, momentum=0.9)


def xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


# --- the data ---------------------------------------------------------------------


def make_data(steps: int, batch: int, seed: int = 0) -> Batches:
    """`steps` batches of 16x16x3 images: a smooth random template per class,
    rolled by up to 2 pixels, plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(size=(N_CLASSES, 4, 4, 3))
    templates = np.repeat(np.repeat(coarse, 4, axis=1), 4, axis=2)  # 16x16x3 blocks
    labels = rng.integers(0, N_CLASSES, (steps, batch))
    shifts = rng.integers(-2, 3, (steps, batch, 2))
    images = np.stack(
        [
            np.stack(
                [np.roll(templates[c], tuple(s), axis=(0, 1)) for c, s in zip(ls, ss, strict=True)]
            )
            for ls, ss in zip(labels, shifts, strict=True)
        ]
    )
    images = images + rng.normal(scale=0.5, size=images.shape)
    return jnp.asarray(images, jnp.float32), jnp.asarray(labels, jnp.int32)


# --- Haiku: the model ---------------------------------------------------------------


def batch_norm_hk(name: str) -> hk.BatchNorm:
    return hk.BatchNorm(create_scale=True, create_offset=True, decay_rate=DECAY, name=name)


class Block(hk.Module):
    # a pre-activation residual block (ResNet v2): BN, ReLU, conv, BN, ReLU, conv
    def __init__(self, width: int, stride: int, name: str):
        super().__init__(name=name)
        self.width, self.stride = width, stride

    def __call__(self, x: jax.Array, is_training: bool) -> jax.Array:
        out = jax.nn.relu(batch_norm_hk("batchnorm_0")(x, is_training))
        shortcut = x
        if self.stride != 1 or x.shape[-1] != self.width:
            shortcut = hk.Conv2D(self.width, 1, self.stride, with_bias=False, name="shortcut")(out)
        out = hk.Conv2D(self.width, 3, self.stride, with_bias=False, name="conv_0")(out)
        out = jax.nn.relu(batch_norm_hk("batchnorm_1")(out, is_training))
        return hk.Conv2D(self.width, 3, with_bias=False, name="conv_1")(out) + shortcut


def forward(x: jax.Array, is_training: bool, dropout_rate: float) -> jax.Array:  # rate: traced
    x = hk.Conv2D(WIDTHS[0], 3, with_bias=False, name="stem")(x)
    for s, width in enumerate(WIDTHS):
        for b in range(BLOCKS):
            x = Block(width, 2 if s and not b else 1, name=f"block_{s}_{b}")(x, is_training)
    x = jnp.mean(jax.nn.relu(batch_norm_hk("final_batchnorm")(x, is_training)), axis=(1, 2))
    if is_training:
        x = hk.dropout(hk.next_rng_key(), dropout_rate, x)
    return hk.Linear(N_CLASSES, name="head")(x)


model = hk.transform_with_state(forward)


# --- Haiku: the training loop -------------------------------------------------------


@jax.jit
def haiku_step(
    params: hk.Params, state: hk.State, opt_state: optax.OptState, rng: jax.Array, x: jax.Array,
    y: jax.Array, dropout_rate: jax.Array,
) -> tuple[hk.Params, hk.State, optax.OptState, jax.Array]:  # fmt: skip
    def loss_fn(p: hk.Params) -> tuple[jax.Array, hk.State]:
        logits, new_state = model.apply(
            p, state, rng, x, is_training=True, dropout_rate=dropout_rate
        )
        return xent(logits, y), new_state

    (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), state, opt_state, loss


def run_haiku(
    params: hk.Params, state: hk.State, data: Batches, seed: int, rate: float
) -> dict[str, Any]:
    opt_state, losses, key = tx.init(params), [], jax.random.key(seed)
    for i, (x, y) in enumerate(zip(*data, strict=True)):
        rng = jax.random.fold_in(key, i)  # the i-th key of effax's dropout_key.seed(seed)
        params, state, opt_state, loss = haiku_step(
            params, state, opt_state, rng, x, y, jnp.float32(rate)
        )
        losses.append(loss)
    return {"losses": jnp.stack(losses), "params": params, "bn_state": state}


# --- (A) the shim: the training loop ------------------------------------------------

params = fx.State[Any]("params")
opt_state = fx.State[optax.OptState]("opt_state")
haiku_state = fx.State[hk.State]("haiku_state")
dropout_key = fx.RandomKey("dropout")
dropout_rate = fx.Ask[jax.Array]("dropout_rate")


@fx.jit
def shim_step(x: jax.Array, y: jax.Array) -> jax.Array:
    state, rng, rate = haiku_state.get(), dropout_key.next_key(), dropout_rate.ask()

    def loss_fn(p: hk.Params) -> tuple[jax.Array, hk.State]:
        logits, new_state = model.apply(p, state, rng, x, is_training=True, dropout_rate=rate)
        return xent(logits, y), new_state

    (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params.get())
    updates, new_opt_state = tx.update(grads, opt_state.get(), params.get())
    params.set(optax.apply_updates(params.get(), updates))
    opt_state.set(new_opt_state)
    haiku_state.set(new_state)
    return loss


def run_shim(params0: hk.Params, state0: hk.State, data: Batches, seed: int, rate: float) -> Any:
    cells = params.init(params0), opt_state.init(tx.init(params0)), haiku_state.init(state0)
    with fx.handlers(*cells, dropout_key.seed(seed), dropout_rate.provide(jnp.float32(rate))):
        losses = [shim_step(x, y) for x, y in zip(*data, strict=True)]
    return {"losses": jnp.stack(losses), "params": cells[0].value, "bn_state": cells[2].value}


# --- (B) effects in the layers: the model -------------------------------------------

bn_state = fx.StateDict[dict[str, jax.Array]]("bn_state")
is_training = fx.Ask[bool]("is_training", static=True, default=True)


def moving_average(name: str, value: jax.Array) -> None:
    # hk.ExponentialMovingAverage(DECAY): Adam's zero debiasing, Haiku's arithmetic
    zeros = jnp.zeros_like(value)
    ema = bn_state.get(name, init={"counter": jnp.int32(0), "hidden": zeros, "average": zeros})
    counter = ema["counter"] + 1
    decay, one = jax.lax.convert_element_type(DECAY, value.dtype), jnp.ones([], value.dtype)
    hidden = ema["hidden"] * decay + value * (one - decay)
    average = hidden / (one - jnp.power(decay, counter))
    bn_state.set(name, {"counter": counter, "hidden": hidden, "average": average})


def batch_norm(p: Params, name: str, x: jax.Array) -> jax.Array:
    axes = tuple(range(x.ndim - 1))  # all but the channels
    if is_training.ask():  # the batch's statistics, and the moving averages updated
        mean = jnp.mean(x, axes, keepdims=True)
        var = jnp.mean(jnp.square(x), axes, keepdims=True) - jnp.square(mean)
        moving_average(f"{name}/mean_ema", mean)
        moving_average(f"{name}/var_ema", var)
    else:  # the moving averages
        mean = bn_state.get(f"{name}/mean_ema")["average"]
        var = bn_state.get(f"{name}/var_ema")["average"]
    inv = p[name]["scale"] * jax.lax.rsqrt(var + jax.lax.convert_element_type(1e-5, var.dtype))
    return (x - mean) * inv + p[name]["offset"]


def conv(p: Params, name: str, x: jax.Array, stride: int = 1) -> jax.Array:
    dims = ("NHWC", "HWIO", "NHWC")
    return jax.lax.conv_general_dilated(
        x, p[name]["w"], (stride, stride), "SAME", dimension_numbers=dims
    )


def block(p: Params, name: str, x: jax.Array, stride: int) -> jax.Array:
    out = jax.nn.relu(batch_norm(p, f"{name}/batchnorm_0", x))
    shortcut = conv(p, f"{name}/shortcut", out, stride) if f"{name}/shortcut" in p else x
    out = jax.nn.relu(batch_norm(p, f"{name}/batchnorm_1", conv(p, f"{name}/conv_0", out, stride)))
    return conv(p, f"{name}/conv_1", out) + shortcut


def dropout(x: jax.Array) -> jax.Array:
    keep_rate = 1.0 - dropout_rate.ask()
    keep = jax.random.bernoulli(dropout_key.next_key(), keep_rate, x.shape)
    return keep * x / keep_rate


def resnet(p: Params, x: jax.Array) -> jax.Array:
    x = conv(p, "stem", x)
    for s in range(len(WIDTHS)):
        for b in range(BLOCKS):
            x = block(p, f"block_{s}_{b}", x, 2 if s and not b else 1)
    x = jnp.mean(jax.nn.relu(batch_norm(p, "final_batchnorm", x)), axis=(1, 2))
    if is_training.ask():
        x = dropout(x)
    logits = jnp.dot(x, p["head"]["w"])
    return logits + jnp.broadcast_to(p["head"]["b"], logits.shape)


def init_params(key: jax.Array) -> Params:
    # Haiku's initialisers: truncated normal kernels of stddev 1/sqrt(fan in), BN 1 and 0
    keys = iter(jax.random.split(key, 4 * len(WIDTHS) * BLOCKS + 2))

    def kernel(*shape: int) -> dict[str, jax.Array]:
        w = jax.random.truncated_normal(next(keys), -2.0, 2.0, shape) / 0.87962566103423978
        return {"w": w / np.sqrt(np.prod(shape[:-1]))}

    def norm(c: int) -> dict[str, jax.Array]:
        return {"scale": jnp.ones((1, 1, 1, c)), "offset": jnp.zeros((1, 1, 1, c))}

    p, c_in = {"stem": kernel(3, 3, 3, WIDTHS[0])}, WIDTHS[0]
    for s, width in enumerate(WIDTHS):
        for b in range(BLOCKS):
            name = f"block_{s}_{b}"
            p[f"{name}/batchnorm_0"], p[f"{name}/conv_0"] = norm(c_in), kernel(3, 3, c_in, width)
            if (s and not b) or c_in != width:
                p[f"{name}/shortcut"] = kernel(1, 1, c_in, width)
            p[f"{name}/batchnorm_1"], p[f"{name}/conv_1"] = norm(width), kernel(3, 3, width, width)
            c_in = width
    p["final_batchnorm"] = norm(c_in)
    p["head"] = {**kernel(c_in, N_CLASSES), "b": jnp.zeros(N_CLASSES)}
    return p


# --- (B) effects in the layers: the training loop -----------------------------------

traces: list[int] = []  # one entry per trace of `effects_step`


def effects_step_body(x: jax.Array, y: jax.Array) -> jax.Array:
    traces.append(len(bn_state.handler().value))  # the BN entries it is traced with
    p = params.get()
    loss, grads = fx.value_and_grad(lambda p: xent(resnet(p, x), y))(p)
    updates, new_opt_state = tx.update(grads, opt_state.get(), p)
    params.set(optax.apply_updates(p, updates))
    opt_state.set(new_opt_state)
    return loss


effects_step = fx.jit(effects_step_body)


def run_effects(params0: Params, data: Batches, seed: int, rate: float) -> dict[str, Any]:
    cells = params.init(params0), opt_state.init(tx.init(params0)), bn_state.init()
    with fx.handlers(*cells, dropout_key.seed(seed), dropout_rate.provide(jnp.float32(rate))):
        losses = [effects_step(x, y) for x, y in zip(*data, strict=True)]
    return {"losses": jnp.stack(losses), "params": cells[0].value, "bn_state": cells[2].value}


# --- the comparisons ----------------------------------------------------------------


@fx.jit
def effects_scan(xs: jax.Array, ys: jax.Array) -> jax.Array:
    """`effects_step` over the leading axis of `xs` and `ys`, in one `effax.scan`."""
    return fx.scan(lambda carry, batch: (carry, effects_step_body(*batch)), None, (xs, ys))[1]


def run_effects_scan(params0: Params, data: Batches, seed: int, rate: float) -> dict[str, Any]:
    """`run_effects`, with every step after the first (which creates the BatchNorm
    entries: a loop body cannot) in one `effax.scan`."""
    (x0, *_), (y0, *_) = data
    cells = params.init(params0), opt_state.init(tx.init(params0)), bn_state.init()
    with fx.handlers(*cells, dropout_key.seed(seed), dropout_rate.provide(jnp.float32(rate))):
        first = effects_step(x0, y0)
        rest = effects_scan(data[0][1:], data[1][1:])
    losses = jnp.concatenate([first[None], rest])
    return {"losses": losses, "params": cells[0].value, "bn_state": cells[2].value}


def unhaiku(tree: Mapping[str, Any]) -> dict[str, Any]:
    """A Haiku params or state dict with (B)'s names: ``block_0_0/~/conv_0`` is
    ``block_0_0/conv_0``."""
    return {name.replace("/~/", "/"): value for name, value in tree.items()}


def haiku_init(data: Batches, seed: int = 0) -> tuple[hk.Params, hk.State]:
    """The Haiku model's initial parameters and state, for the first batch's shapes."""
    init = jax.jit(model.init, static_argnames="is_training")
    return init(jax.random.key(seed), data[0][0], is_training=True, dropout_rate=jnp.float32(0))


def effax_keys(seed: int, n: int) -> list[jax.Array]:
    """The keys `dropout_key.seed(seed)` draws: the i-th is ``fold_in(key(seed), i)``."""
    return [jax.random.fold_in(jax.random.key(seed), i) for i in range(n)]


def max_abs_diff(a: Any, b: Any) -> float:
    """The largest absolute difference between the leaves of two pytrees of one
    structure (a different structure, shape or dtype raises)."""
    assert jax.tree.structure(a) == jax.tree.structure(b), (
        jax.tree.structure(a),
        jax.tree.structure(b),
    )

    def diff(x: jax.Array, y: jax.Array) -> float:
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
        return float(
            np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)), initial=0)
        )

    return max(jax.tree.leaves(jax.tree.map(diff, a, b)), default=0.0)


def compare(run: dict[str, Any], reference: dict[str, Any]) -> dict[str, float]:
    """Max abs differences of losses, parameters and BatchNorm state, named as (B)'s."""
    return {
        key: max_abs_diff(unhaiku(run[key]) if key != "losses" else run[key],
                          unhaiku(reference[key]) if key != "losses" else reference[key])
        for key in ("losses", "params", "bn_state")
    }  # fmt: skip


def check_dropout_off(steps: int = 4, seed: int = 0) -> dict[str, dict[str, float]]:
    """Dropout rate 0 (every mask keeps every unit, the keys are still drawn): (A)
    and (B) against the Haiku program, from Haiku's initial parameters."""
    data = make_data(steps, 32)
    params0, state0 = haiku_init(data)
    haiku = run_haiku(params0, state0, data, seed, 0.0)
    return {
        "shim": compare(run_shim(params0, state0, data, seed, 0.0), haiku),
        "effects": compare(run_effects(unhaiku(params0), data, seed, 0.0), haiku),
    }


def check_shim_dropout_on(steps: int = 4, seed: int = 1) -> dict[str, float]:
    """Dropout on: the shim against the Haiku program given the keys the shim draws."""
    data = make_data(steps, 32)
    params0, state0 = haiku_init(data)
    haiku = run_haiku(params0, state0, data, seed, DROPOUT_RATE)
    return compare(run_shim(params0, state0, data, seed, DROPOUT_RATE), haiku)


@jax.jit
def haiku_scan(
    carry: tuple[hk.Params, hk.State, optax.OptState],
    data: Batches,
    rngs: jax.Array,
    rate: jax.Array,
) -> tuple[tuple[hk.Params, hk.State, optax.OptState], jax.Array]:
    """The Haiku program's steps in one `jax.lax.scan`, plumbed by hand."""

    def body(carry: Any, batch: Any) -> Any:
        *carry, loss = haiku_step(*carry, batch[2], batch[0], batch[1], rate)
        return tuple(carry), loss

    return jax.lax.scan(body, carry, (*data, rngs))


def run_haiku_scan(
    params0: hk.Params, state0: hk.State, data: Batches, seed: int, rate: float
) -> dict[str, Any]:
    """`run_haiku`, with every step after the first in one `jax.lax.scan`."""
    (x0, *_), (y0, *_) = data
    key = jax.random.key(seed)  # the keys of effax_keys(seed, ...), made in two arrays
    rest_rngs = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(1, len(data[0])))
    *carry, first = haiku_step(
        params0, state0, tx.init(params0), jax.random.fold_in(key, 0), x0, y0, jnp.float32(rate)
    )
    rest_data = (data[0][1:], data[1][1:])
    (p, state, _), rest = haiku_scan(tuple(carry), rest_data, rest_rngs, jnp.float32(rate))
    return {"losses": jnp.concatenate([first[None], rest]), "params": p, "bn_state": state}


def check_effects_scan(steps: int = 3, seed: int = 2) -> dict[str, dict[str, float]]:
    """(B)'s step under `effax.scan` (after a first call that creates the BatchNorm
    entries) against its Python loop (dropout on: the scan draws the loop's keys),
    and (dropout off) against the Haiku program's steps in a hand-plumbed
    `jax.lax.scan`; and, for scale, that `jax.lax.scan` against the Haiku program's
    own Python loop (XLA compiles a loop body apart from a lone step)."""
    data = make_data(steps, 32)
    params0, state0 = haiku_init(data)
    on, off = DROPOUT_RATE, 0.0
    haiku_scanned = run_haiku_scan(params0, state0, data, seed, off)
    return {
        "vs_loop": compare(
            run_effects_scan(unhaiku(params0), data, seed, on),
            run_effects(unhaiku(params0), data, seed, on),
        ),
        "vs_haiku_scan": compare(
            run_effects_scan(unhaiku(params0), data, seed, off), haiku_scanned
        ),
        "haiku_scan_vs_loop": compare(haiku_scanned, run_haiku(params0, state0, data, seed, off)),
    }


def check_effects_statistics(steps: int = 16, seeds: int = 6, rate: float = 0.5) -> dict[str, Any]:
    """Dropout at `rate`, (B)'s masks drawn from other keys than Haiku's: over
    `seeds` dropout seeds, the mean and spread of the mean loss of steps 4.. of (B)
    and of the Haiku program, and that loss without dropout (what a dropout that
    does nothing would give); and the fraction of units (B)'s dropout keeps, and
    how far a kept unit is from its input times 1 / (1 - rate)."""
    data = make_data(steps, 32)
    params0, state0 = haiku_init(data)
    mean_loss: dict[str, list[float]] = {"haiku": [], "effects": []}
    for seed in range(seeds):
        haiku = run_haiku(params0, state0, data, 1000 + seed, rate)
        effects = run_effects(unhaiku(params0), data, seed, rate)
        mean_loss["haiku"].append(float(jnp.mean(haiku["losses"][4:])))
        mean_loss["effects"].append(float(jnp.mean(effects["losses"][4:])))
    no_dropout = run_haiku(params0, state0, data, 0, 0.0)
    x = jnp.ones((256, 64))
    with fx.handlers(dropout_key.seed(0), dropout_rate.provide(jnp.float32(rate))):
        dropped = fx.jit(dropout)(x)
    return {
        "rate": rate,
        "seeds": seeds,
        "haiku": float(np.mean(mean_loss["haiku"])),
        "effects": float(np.mean(mean_loss["effects"])),
        "haiku_sd": float(np.std(mean_loss["haiku"], ddof=1)),
        "effects_sd": float(np.std(mean_loss["effects"], ddof=1)),
        "no_dropout": float(jnp.mean(no_dropout["losses"][4:])),
        "keep_rate": float(jnp.mean(dropped != 0)),
        "kept_error": float(jnp.max(jnp.abs(dropped[dropped != 0] - 1 / (1 - rate)))),
        "n_units": x.size,
    }


def count_traces(steps: int = 4) -> list[int]:
    """The BN entries each trace of `effects_step` saw, over `steps` calls."""
    data = make_data(steps, 8)
    traces.clear()
    run_effects(init_params(jax.random.key(0)), data, 0, DROPOUT_RATE)
    return list(traces)


def time_steps(steps: int, seed: int = 0, repeats: int = 3) -> dict[str, float]:
    """Milliseconds per training step, dropout on, of the Haiku program, (A) and (B)
    on the same batches, compiled beforehand: the best of `repeats` runs of `steps`
    steps each, the programs taking turns."""
    data = make_data(steps, 32)
    params0, state0 = haiku_init(data)
    runs: dict[str, Callable[[Batches], Any]] = {
        "haiku": lambda d: run_haiku(params0, state0, d, seed, DROPOUT_RATE),
        "shim": lambda d: run_shim(params0, state0, d, seed, DROPOUT_RATE),
        "effects": lambda d: run_effects(unhaiku(params0), d, seed, DROPOUT_RATE),
    }
    for run in runs.values():  # compiled (twice for (B): its first call creates entries)
        jax.block_until_ready(run((data[0][:2], data[1][:2])))
    ms = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            jax.block_until_ready(run(data))
            ms[name] = min(ms[name], 1e3 * (time.perf_counter() - start) / steps)
    return ms


PROGRAMS = {  # each program's sections of this file, for its lines of code
    "Haiku": ("Haiku: the model", "Haiku: the training loop"),
    "(A) shim": ("Haiku: the model", "(A) the shim: the training loop"),
    "(B) effects in the layers": (
        "(B) effects in the layers: the model",
        "(B) effects in the layers: the training loop",
    ),
}


def line_counts() -> dict[str, int]:
    """Lines of code of each program (its model and training loop): no blanks,
    comments or docstrings."""
    sections = lines_of_code(__file__)
    return {name: sum(sections[s] for s in parts) for name, parts in PROGRAMS.items()}


def section(title: str) -> str:
    """The text of the section `# --- title` of this file."""
    text = pathlib.Path(__file__).read_text().split(f"# --- {title} ")[1]
    return text.split("\n", 1)[1].split("\n# --- ", 1)[0]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6, help="training steps per comparison")
    parser.add_argument("--out", default="examples/out", help="folder for the results (JSON)")
    args = parser.parse_args(argv)
    steps = args.steps
    result: dict[str, Any] = {
        "dropout_off": check_dropout_off(steps),
        "shim_dropout_on": check_shim_dropout_on(steps),
        "effects_scan": check_effects_scan(steps),
        "statistics": check_effects_statistics(),
        "traces": count_traces(),
        "ms_per_step": time_steps(max(steps, 10)),
        "lines": line_counts(),
    }
    print(f"max abs differences over {steps} steps (losses, params, BN state):")
    scan = result["effects_scan"]
    rows = [
        ("(A) shim vs Haiku, dropout off", result["dropout_off"]["shim"]),
        ("(B) effects vs Haiku, dropout off", result["dropout_off"]["effects"]),
        ("(A) shim vs Haiku, dropout on, same keys", result["shim_dropout_on"]),
        ("(B) effax.scan vs its Python loop", scan["vs_loop"]),
        ("(B) effax.scan vs Haiku in lax.scan, off", scan["vs_haiku_scan"]),
        ("Haiku in lax.scan vs its Python loop, off", scan["haiku_scan_vs_loop"]),
    ]
    for name, d in rows:
        print(f"  {name:44} {d['losses']:<9.3g} {d['params']:<9.3g} {d['bn_state']:.3g}")
    s = result["statistics"]
    print(
        f"dropout {s['rate']}, mean loss of steps 4.. over {s['seeds']} seeds (sd): "
        f"Haiku {s['haiku']:.4f} ({s['haiku_sd']:.4f}), (B) {s['effects']:.4f} "
        f"({s['effects_sd']:.4f}); without dropout {s['no_dropout']:.4f}"
    )
    print(
        f"(B)'s dropout keeps {s['keep_rate']:.4f} of {s['n_units']} units "
        f"(kept ones off by {s['kept_error']:g})"
    )
    print(f"(B)'s step traced {len(result['traces'])} times, with {result['traces']} BN entries")
    ms, lines = result["ms_per_step"], result["lines"]
    print(f"{'program':28}{'lines':>6}{'ms/step':>9}")
    for (name, n), t in zip(lines.items(), ms.values(), strict=True):
        print(f"{name:28}{n:6d}{t:9.2f}")
    folder = pathlib.Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "haiku_resnet.json").write_text(json.dumps(result, indent=1))
    print(f"results saved to {folder / 'haiku_resnet.json'}")
    return result


if __name__ == "__main__":
    main()
