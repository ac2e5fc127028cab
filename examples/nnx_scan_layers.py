"""Flax NNX's scan-over-layers model with effects, through `effax.nnx` (issue 41).

The model of google/flax `examples/nnx_toy_examples/06_scan_over_layers.py` (a
stack of Linear + BatchNorm + Dropout blocks made with `nnx.split_rngs` +
`nnx.vmap`, applied with `nnx.scan`, here also with `nnx.remat`), trained with
`nnx.value_and_grad` and SGD. The effax version replaces `nnx.scan`, `nnx.remat`
and `nnx.value_and_grad` by their `effax.nnx` twins (same arguments) and performs
four effects in the block: a traced `Ask` (the output scale), a `State` (calls
counted), an `Emit` (each block's mean activation) and a `Tap` (each block's
output, recorded or differentiated). With dropout off, the two programs compute the
same losses, parameters and BatchNorm statistics bit for bit, eagerly and under
`nnx.jit`; the recorded taps are the scan's per-layer outputs, and the tap
gradients equal a hand-written perturbation of the NNX program.

Run: ``python examples/nnx_scan_layers.py`` (``--steps N``).
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import effax as fx
import effax.nnx as fxn

scale = fx.Ask[jax.Array]("scale")
calls = fx.State[jax.Array]("calls")
means = fx.Emit[jax.Array]("means")
acts = fx.Tap[jax.Array]("acts")

DIM, LAYERS, BATCH = 10, 5, 3
SCALE = 1.5


class Block(nnx.Module):
    """Linear + BatchNorm + Dropout (06_scan_over_layers), with or without effects."""

    def __init__(self, dim: int, *, effects: bool, dropout: float, rngs: nnx.Rngs):
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.bn = nnx.BatchNorm(dim, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.effects = effects
        if not effects:
            # the NNX program's scale: an array in the module (traced under nnx.jit,
            # as the effax program's Ask is), not a Python constant XLA could fold;
            # the effax program reads it from the Ask and holds none
            self.scale = nnx.Variable(jnp.float32(SCALE))

    def activation(self, x: jax.Array) -> jax.Array:
        return jax.nn.gelu(self.dropout(self.bn(self.linear(x))))

    def with_mean(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The NNX program's block: its mean activation returned (to be stacked by
        the scan), where the effax block emits it."""
        y = self.activation(x)
        return y * self.scale[...], jnp.mean(y)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.activation(x)
        if not self.effects:
            return y * self.scale[...]
        calls.modify(lambda n: n + 1)
        means.emit(jnp.mean(y))
        return acts.tap("block", y) * scale.ask()


class ScanMLP(nnx.Module):
    """The blocks made with nnx.split_rngs + nnx.vmap, applied with a scan."""

    def __init__(self, *, effects: bool, dropout: float = 0.0, seed: int = 0):
        @nnx.split_rngs(splits=LAYERS)
        @nnx.vmap(axis_size=LAYERS)
        def create_block(rngs: nnx.Rngs) -> Block:
            return Block(DIM, effects=effects, dropout=dropout, rngs=rngs)

        self.layers = create_block(nnx.Rngs(seed))
        self.effects = effects

    def per_layer(self, x: jax.Array) -> tuple[jax.Array, Any]:
        """The output and each layer's output (stacked); for the NNX program also
        each layer's mean activation (the effax program emits it)."""
        scan, remat = (fxn.scan, fxn.remat) if self.effects else (nnx.scan, nnx.remat)

        @scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
        @remat
        def scan_fn(x: jax.Array, block: Block) -> tuple[jax.Array, Any]:
            if self.effects:
                x = block(x)
                return x, x
            x, mean = block.with_mean(x)
            return x, (x, mean)

        return scan_fn(x, self.layers)  # type: ignore[no-any-return]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.per_layer(x)[0]

    def perturbed(self, x: jax.Array, eps: jax.Array) -> jax.Array:
        """The NNX program with each block's tapped activation moved by eps[layer]:
        its gradient in eps is what a tap's gradients() handler records."""

        @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=nnx.Carry)
        def scan_fn(x: jax.Array, block: Block, e: jax.Array) -> jax.Array:
            return (block.activation(x) + e) * block.scale[...]

        return scan_fn(x, self.layers, eps)  # type: ignore[no-any-return]


def loss_fn(model: ScanMLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def loss_and_means(model: ScanMLP, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The NNX program's loss, with the per-layer means it returns (where the effax
    program emits them)."""
    out, (_, means) = model.per_layer(x)
    return jnp.mean((out - y) ** 2), means


def train_step(model: ScanMLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> Any:
    if model.effects:
        loss, grads = fxn.value_and_grad(loss_fn)(model, x, y)  # was: nnx.value_and_grad
        optimizer.update(model, grads)
        return loss
    (loss, means), grads = nnx.value_and_grad(loss_and_means, has_aux=True)(model, x, y)
    optimizer.update(model, grads)
    return loss, means


def make(effects: bool, dropout: float = 0.0) -> tuple[ScanMLP, nnx.Optimizer]:
    model = ScanMLP(effects=effects, dropout=dropout)
    return model, nnx.Optimizer(model, optax.sgd(0.05), wrt=nnx.Param)


def data(steps: int) -> list[tuple[jax.Array, jax.Array]]:
    key = jax.random.key(42)
    batches = []
    for i in range(steps):
        kx, ky = jax.random.split(jax.random.fold_in(key, i))
        batches.append((jax.random.normal(kx, (BATCH, DIM)), jax.random.normal(ky, (BATCH, DIM))))
    return batches


def train(effects: bool, steps: int, compiled: bool) -> dict[str, Any]:
    """Train for `steps`; the losses, the model's state and what the handlers saw."""
    model, optimizer = make(effects)
    step = train_step
    if compiled:
        step = fx.handle(train_step, transform=nnx.jit) if effects else nnx.jit(train_step)
    handlers = (
        [
            scale.provide(jnp.float32(SCALE)),
            calls.init(jnp.int32(0)),
            means.collect(),
            acts.ignore(),
        ]
        if effects
        else []
    )
    with fx.handlers(*handlers) as hs:
        outs = [step(model, optimizer, x, y) for x, y in data(steps)]
    if effects:  # (each step's emits: one mean per layer, stacked by the scan)
        losses, layer_means, seen = outs, jnp.stack(hs[means]), int(hs[calls])
    else:
        losses, layer_means, seen = [o[0] for o in outs], jnp.stack([o[1] for o in outs]), 0
    return {"losses": losses, "state": learned(model), "means": layer_means, "calls": seen}


def learned(model: ScanMLP) -> nnx.State:
    """What training changes: every Variable of the model (parameters, BatchNorm
    statistics, the Dropout's Rngs) but the NNX program's constant scale."""
    return nnx.state(model, lambda path, v: type(v) is not nnx.Variable)


def taps(x: jax.Array) -> dict[str, Any]:
    """Recorded taps against the scan's per-layer outputs; tap gradients against
    the perturbation; parameter gradients against nnx.value_and_grad's."""
    model, _ = make(True)
    with fx.handlers(
        scale.provide(jnp.float32(SCALE)), acts.record(), calls.init(jnp.int32(0)), means.discard()
    ) as hs:
        _, per_layer = model.per_layer(x)
    recorded = hs[acts]["block"] * SCALE

    target = jnp.zeros_like(x)
    model, _ = make(True)
    with fx.handlers(
        scale.provide(jnp.float32(SCALE)),
        acts.gradients(),
        calls.init(jnp.int32(0)),
        means.discard(),
    ) as hs:
        loss, grads = fxn.value_and_grad(loss_fn)(model, x, target)
    tap_grads = hs[acts]["block"]

    pure, _ = make(False)
    pure_loss, pure_grads = nnx.value_and_grad(loss_fn)(pure, x, target)
    again, _ = make(False)
    eps = jnp.zeros((LAYERS, *x.shape))
    perturbation_grads = nnx.grad(
        lambda m, e: jnp.mean((m.perturbed(x, e) - target) ** 2), argnums=1
    )(again, eps)
    return {
        "recorded": recorded,
        "per_layer": per_layer,
        "loss": (loss, pure_loss),
        "grads": (nnx.state(grads), nnx.state(pure_grads)),
        "tap_grads": (tap_grads, perturbation_grads),
    }


def _data(a: jax.Array) -> np.ndarray:
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):  # (the Dropout's nnx.Rngs key)
        a = jax.random.key_data(a)
    return np.asarray(a)


def bitwise(a: object, b: object) -> bool:
    same = jax.tree.map(lambda u, v: np.array_equal(_data(u), _data(v)), a, b)
    return all(jax.tree.leaves(same))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Flax NNX scan over layers with effects, through effax.nnx"
    )
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    for compiled in (False, True):
        where = "nnx.jit" if compiled else "eager"
        with_effects = train(True, args.steps, compiled)
        pure = train(False, args.steps, compiled)
        losses = [float(v) for v in with_effects["losses"]]
        print(f"{where:8} losses {np.round(losses, 5).tolist()}")
        print(
            f"{where:8} bitwise the NNX program: losses "
            f"{bitwise(with_effects['losses'], pure['losses'])}, parameters and BatchNorm "
            f"statistics {bitwise(with_effects['state'], pure['state'])}, per-layer means "
            f"{bitwise(with_effects['means'], pure['means'])}; blocks counted "
            f"{with_effects['calls']}"
        )
    found = taps(data(1)[0][0])
    print(
        "recorded taps == the scan's per-layer outputs:",
        bitwise(found["recorded"], found["per_layer"]),
    )
    print(
        "loss and parameter gradients bitwise nnx.value_and_grad's:",
        bitwise(found["loss"][0], found["loss"][1]),
        bitwise(*found["grads"]),
    )
    tg, pg = found["tap_grads"]
    print(
        "tap gradients == the hand-written perturbation's:",
        bitwise(tg, pg),
        f"(max |diff| {float(jnp.max(jnp.abs(tg - pg))):.2e})",
    )


if __name__ == "__main__":
    main()
