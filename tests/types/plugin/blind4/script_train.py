"""A training script: module-level setup, a CLI-style main and an `if __name__` block."""

from __future__ import annotations

import argparse
import functools
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from optics import LAYER_ROW, acts, bn, losses, lr, mode, noise, step_count, temperature, verbose
from optics.interceptors import ScaledLoss, WarmupLR
from optics.layers import activation, counted_update, jitter, report_loss, running_mean, sgd_update, soften

w = jnp.ones(4)
batch = jnp.ones((8, 4))
epochs = fx.State[jax.Array]("epochs")
CONFIG = fx.handlers(lr.provide(jnp.float32(0.05)), mode.provide("tanh"))


@fx.uses(*LAYER_ROW, losses, epochs)
def epoch(v: jax.Array, data: jax.Array) -> jax.Array:
    epochs.modify(lambda n: n + 1)
    for row in data:
        v = counted_update(v, jnp.full_like(v, report_loss(row)))
    return v


@fx.uses(*LAYER_ROW, losses, epochs, mode)
def fit(v: jax.Array, data: jax.Array, n_epochs: int) -> jax.Array:
    for _ in range(n_epochs):
        v = activation(epoch(v, data))
    return v


@fx.uses()
def evaluate(v: jax.Array) -> jax.Array:
    with losses.collect() as col:
        report_loss(v)
    return jnp.stack(col.value)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    return p.parse_args(argv)


# case: module-level setup under a shared CONFIG bundle
with CONFIG, step_count.init(jnp.int32(0)), epochs.init(jnp.int32(0)), losses.collect():
    w1 = fit(w, batch, 1)

# case: module-level call missing the epochs state
with CONFIG, step_count.init(jnp.int32(0)), losses.collect():
    fit(w, batch, 1)  # E: effax-unhandled

# case: module-level pure entry point needs nothing
print(evaluate(w))

# case: module-level call to an effect with a default through a compiled call
print(fx.jit(soften)(w))

# case: module-level static default read directly
if verbose.ask():
    print("verbose")

# case: module-level read of a static Ask without default
print(mode.ask())  # E: effax-unhandled

# case: module-level conditional callee with an effax call inside it
use_jit = True
(fx.jit(sgd_update) if use_jit else sgd_update)(w, w)  # E: effax-unhandled

# case: module-level conditional callee of two plain names
(sgd_update if use_jit else counted_update)(w, w)  # limit: at module level a conditional callee with no effax call inside is not checked (UnhandledEffectError)

# case: partial of a handled function at module level, fully handled
train_partial = functools.partial(fx.handle(epoch, epochs.init(jnp.int32(0)), losses.discard()), data=batch)
with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)):
    train_partial(w)
train_partial(w)  # E: effax-unhandled

# case: a warmup interceptor at module level over the CONFIG bundle
with CONFIG, WarmupLR(lr, 0.1):
    sgd_update(w, w)

# case: a warmup interceptor with its provider missing
with mode.provide("relu"), WarmupLR(lr, 0.1):
    sgd_update(w, w)  # E: effax-unhandled

# case: a loop at module level that reseeds each epoch
for seed in range(2):
    with noise.seed(seed):
        jitter(w)
for seed in range(2):
    jitter(w)  # E: effax-unhandled

# case: module-level StateDict through a compiled function of a lambda
with bn.init() as stats_cell:
    fx.jit(lambda v: running_mean("in", v))(batch)
fx.jit(lambda v: running_mean("in", v))(batch)  # E: effax-unhandled


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    cells: list[fx.Handler[Any]] = [
        lr.provide(jnp.float32(args.lr)),
        step_count.init(jnp.int32(0)),
        epochs.init(jnp.int32(0)),
        mode.provide("tanh"),
    ]
    with fx.handlers(*cells, losses.collect()) as hs:
        v = fit(w, batch, args.epochs)
    return {"w": v, "steps": hs[step_count], "losses": hs[losses]}


@fx.uses(lr, step_count)
def main_with_row(argv: list[str] | None = None) -> jax.Array:
    args = parse(argv)
    v = w
    for _ in range(args.epochs):
        v = counted_update(v, w)
        report_loss(v)  # E: effax-undeclared
    return v


# case: the entry points run from the main block
if __name__ == "__main__":
    result = main([])
    print(result["steps"])
    with lr.provide(jnp.float32(0.1)), step_count.init(jnp.int32(0)), losses.collect():
        main_with_row([])

# case: a second main block reading effects directly
if __name__ == "__main__":
    print(temperature.ask())
    step_count.get()  # E: effax-unhandled

# case: a main block with handlers entered around the whole run
if __name__ == "__main__":
    with fx.handlers(lr.provide(jnp.float32(0.1))):
        sgd_update(w, w)
    with losses.collect() as col, ScaledLoss(losses, 2.0):
        report_loss(w)
    with acts.record() as rec:
        acts.tap("final", w)
