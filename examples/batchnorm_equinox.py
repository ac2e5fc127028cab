"""Equinox modules whose submodules perform effects, compiled with `eqx.filter_jit`.

Two layers of the model perform effects. `BatchNorm` keeps its running statistics
in an `effax.State` (the stateful-nodes recipe: each stateful layer declares its
own `State` effect when it is built and keeps it as a static field; the program
entry installs one cell per layer, `stat_cells(model)`). `Dropout` draws its masks
from an `effax.RandomKey`. Whether the model trains (batch statistics, dropout on)
or evaluates is a static `Ask[bool]`. The model stays an ordinary Equinox pytree of
parameters — `eqx.filter_value_and_grad` and optax see only parameters — and it
holds a non-array leaf (an `eqx.nn.Lambda` of `jax.nn.tanh`), so it is compiled
with `effax.handle(fn, transform=eqx.filter_jit)`: Equinox splits the module into
arrays (traced) and everything else (static), effax plumbs the effects' values
across the same boundary.

The model is trained on inputs far from zero mean and unit variance, then evaluated
with the running statistics, which by then match the data's mean and variance.

Run: python examples/batchnorm_equinox.py [--quick]
"""

from __future__ import annotations

import argparse
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import effax as fx

Stats = tuple[jax.Array, jax.Array]  # running mean, running variance

training = fx.Ask[bool]("training", static=True)
dropout_key = fx.RandomKey("dropout")

DATA_MEAN = jnp.array([5.0, -3.0])
DATA_STD = jnp.array([2.0, 0.5])


class BatchNorm(eqx.Module):
    """Normalises over the batch axis; running statistics in an `effax.State`."""

    weight: jax.Array
    bias: jax.Array
    stats: fx.State[Stats] = eqx.field(static=True)
    momentum: float = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def __init__(self, size: int, name: str, *, momentum: float = 0.9, eps: float = 1e-5):
        self.weight = jnp.ones(size)
        self.bias = jnp.zeros(size)
        self.stats = fx.State[Stats](name)  # one effect per layer, made once
        self.momentum = momentum
        self.eps = eps

    def initial_stats(self) -> Stats:
        return jnp.zeros_like(self.weight), jnp.ones_like(self.weight)

    def __call__(self, x: jax.Array) -> jax.Array:  # x: (batch, features)
        if training.ask():
            # statistics are not differentiated: stop_gradient keeps them plain values
            mean = jax.lax.stop_gradient(jnp.mean(x, axis=0))
            var = jax.lax.stop_gradient(jnp.var(x, axis=0))
            m = self.momentum
            self.stats.modify(lambda s: (m * s[0] + (1 - m) * mean, m * s[1] + (1 - m) * var))
        else:
            mean, var = self.stats.get()
        scale = self.weight / jnp.sqrt(var + self.eps)
        return (x - mean[None, :]) * scale[None, :] + self.bias[None, :]


class Dropout(eqx.Module):
    """Inverted dropout while training; its masks come from the `dropout` key stream."""

    rate: float = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout_key.next_key(), 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class Model(eqx.Module):
    norm: BatchNorm
    hidden: eqx.nn.Linear
    activation: eqx.nn.Lambda  # a function: not an array, static under filter_jit
    dropout: Dropout
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array, *, rate: float = 0.1):
        k1, k2 = jax.random.split(key)
        self.norm = BatchNorm(2, "norm.stats")
        self.hidden = eqx.nn.Linear(2, 32, key=k1)
        self.activation = eqx.nn.Lambda(jax.nn.tanh)
        self.dropout = Dropout(rate)
        self.out = eqx.nn.Linear(32, 1, key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.dropout(self.activation(jax.vmap(self.hidden)(self.norm(x))))
        return jax.vmap(self.out)(h)[:, 0]


def stat_cells(model: eqx.Module) -> list[fx.StateCell[Stats]]:
    """One `State` cell per BatchNorm layer in `model`, at its initial statistics."""
    is_norm = lambda node: isinstance(node, BatchNorm)
    layers = [n for n in jax.tree.leaves(model, is_leaf=is_norm) if is_norm(n)]
    return [layer.stats.init(layer.initial_stats()) for layer in layers]


def target(x: jax.Array) -> jax.Array:
    z = (x - DATA_MEAN) / DATA_STD  # one example: x of shape (2,)
    return jnp.sin(z[0]) + 0.5 * z[1] ** 2


def batches(key: jax.Array, n: int, size: int) -> tuple[jax.Array, jax.Array]:
    x = DATA_MEAN[None, None] + DATA_STD[None, None] * jax.random.normal(key, (n, size, 2))
    return x, jax.vmap(jax.vmap(target))(x)


optimizer = optax.adam(5e-3)
traces: list[int] = []  # one entry per trace of the training step


def _train_step(model: Model, state: optax.OptState, x: jax.Array, y: jax.Array) -> Any:
    traces.append(1)
    loss_fn = lambda m: jnp.mean((m(x) - y) ** 2)
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, state = optimizer.update(grads, state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), state, loss


def _evaluate(model: Model, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


# `fx.jit` (= transform=jax.jit) would refuse the model: its Lambda is not an array.
train_step = fx.handle(_train_step, transform=eqx.filter_jit)
evaluate = fx.handle(_evaluate, transform=eqx.filter_jit)


def fmt(x: jax.Array) -> str:
    return np.array2string(np.asarray(x), precision=2)


def main(steps: int = 600, *, seed: int = 0) -> dict[str, Any]:
    key_model, key_data, key_test = jax.random.split(jax.random.key(seed), 3)
    model = Model(key_model)
    state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    # NumPy arrays: slicing one batch per step costs no device dispatch
    xs, ys = map(np.asarray, batches(key_data, steps, 64))
    x_test, y_test = (a[0] for a in batches(key_test, 1, 1024))
    cells = stat_cells(model)

    losses = []
    with fx.handlers(*cells, dropout_key.seed(seed)) as hs:
        with training.provide(False):
            test_before = float(evaluate(model, x_test, y_test))
        with training.provide(True):
            for i in range(steps):
                model, state, loss = train_step(model, state, xs[i], ys[i])
                losses.append(float(loss))
                if i % max(1, steps // 5) == 0 or i == steps - 1:
                    mean, var = cells[0].value
                    print(
                        f"step {i:4d}  loss {losses[-1]:.4f}  "
                        f"running mean {fmt(mean)}  running var {fmt(var)}"
                    )
        with training.provide(False):
            test_after = float(evaluate(model, x_test, y_test))
        # Batch statistics of the test set, for comparison: fresh cells installed
        # inside shadow the model's, so its running statistics stay untouched.
        with training.provide(True), fx.handlers(*stat_cells(model)):
            test_batch_stats = float(evaluate(model, x_test, y_test))
    mean, var = cells[0].value
    print(f"data mean {fmt(DATA_MEAN)}, variance {fmt(DATA_STD**2)}")
    print(f"running mean {fmt(mean)}, variance {fmt(var)}")
    print(f"test mse with running statistics: {test_before:.4f} -> {test_after:.4f}")
    print(f"test mse with the test batch's own statistics: {test_batch_stats:.4f}")
    print(f"{int(hs[dropout_key].counter)} dropout masks drawn; traced {len(traces)} time(s)")
    return {
        "losses": losses,
        "running_mean": mean,
        "running_var": var,
        "test_before": test_before,
        "test_after": test_after,
        "test_batch_stats": test_batch_stats,
        "keys_drawn": int(hs[dropout_key].counter),
        "traces": len(traces),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (150 steps)")
    main(150 if parser.parse_args().quick else 600)
