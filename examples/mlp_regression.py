"""MLP regression with optax, every piece of context an effax effect.

The model code below threads nothing but data through its signatures:

- the parameters and the optimiser state live in `effax.State` cells;
- dropout draws its keys from an `effax.RandomKey` stream;
- hyperparameters come from `effax.Ask`: the learning rate and dropout rate are
  *static* (they shape the traced code: changing one retraces), the weight decay is
  *traced* (a jit input: changing it never retraces);
- the loss and a few metrics are emitted through `effax.Emit` and collected at the
  program entry, which prints progress and saves a loss curve.

`effax.jit` compiles the training step once; the handlers' values cross the
boundary as explicit inputs and outputs on every call.

Run: python examples/mlp_regression.py [--quick] [--steps N] [--png PATH]
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import optax

import effax as fx

Params = list[dict[str, jax.Array]]

# --- effects: declared once, at module level -------------------------------------

params = fx.State[Params]("params")
opt_state = fx.State[optax.OptState]("opt_state")
dropout = fx.RandomKey("dropout")
learning_rate = fx.Ask[float]("learning_rate", static=True)
dropout_rate = fx.Ask[float]("dropout_rate", static=True)
weight_decay = fx.Ask[jax.Array]("weight_decay")
loss_log = fx.Emit[jax.Array]("loss")
metrics = fx.Emit[dict[str, jax.Array]]("metrics")

traces: list[int] = []  # one entry per trace of the training step

# --- library code: performs effects, plumbs nothing ------------------------------


def init_params(key: jax.Array, sizes: tuple[int, ...] = (1, 64, 64, 1)) -> Params:
    layers = []
    shapes = itertools.pairwise(sizes)
    for k, (n_in, n_out) in zip(jax.random.split(key, len(sizes) - 1), shapes, strict=True):
        w = jax.random.normal(k, (n_in, n_out)) * jnp.sqrt(2.0 / n_in)
        layers.append({"w": w, "b": jnp.zeros(n_out)})
    return layers


def dropout_layer(x: jax.Array) -> jax.Array:
    rate = dropout_rate.ask()  # a Python float: static
    if rate == 0.0:
        return x
    keep = jax.random.bernoulli(dropout.next_key(), 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def mlp(p: Params, x: jax.Array, *, train: bool) -> jax.Array:
    for layer in p[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"][None, :])
        if train:
            x = dropout_layer(x)
    return x @ p[-1]["w"] + p[-1]["b"][None, :]


def loss_fn(p: Params, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    mse = jnp.mean((mlp(p, x, train=True) - y) ** 2)
    l2 = sum(jnp.sum(layer["w"] ** 2) for layer in p)
    return mse + weight_decay.ask() * l2, mse


def optimizer() -> optax.GradientTransformation:
    return optax.adam(learning_rate.ask())


def train_step(x: jax.Array, y: jax.Array) -> jax.Array:
    traces.append(1)
    p = params.get()
    (loss, mse), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
    updates, new_opt_state = optimizer().update(grads, opt_state.get(), p)
    params.set(optax.apply_updates(p, updates))
    opt_state.set(new_opt_state)
    loss_log.emit(loss)
    grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads)))
    metrics.emit({"mse": mse, "grad_norm": grad_norm})
    return loss


def predict(x: jax.Array) -> jax.Array:
    return mlp(params.get(), x, train=False)


# --- the program entry: handles every effect -------------------------------------


def make_data(key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    kx, ky = jax.random.split(key)
    x = jax.random.uniform(kx, (n, 1), minval=-2.0, maxval=2.0)
    y = jnp.sin(2.0 * x) + 0.5 * x + 0.05 * jax.random.normal(ky, (n, 1))
    return x, y


def save_curve(losses: list[float], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(losses)
    ax.set(xlabel="step", ylabel="training loss", yscale="log", title="MLP regression")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


OUT = pathlib.Path(__file__).parent / "out"  # gitignored


def main(
    steps: int = 1500, *, png: str | pathlib.Path = OUT / "loss_curve.png", seed: int = 0
) -> dict[str, Any]:
    key_data, key_params = jax.random.split(jax.random.key(seed))
    x, y = make_data(key_data, 256)
    x_test, y_test = make_data(jax.random.fold_in(key_data, 1), 256)
    p0 = init_params(key_params)
    step = fx.jit(train_step)
    evaluate = fx.jit(lambda x, y: jnp.mean((predict(x) - y) ** 2))
    every = max(1, steps // 10)

    hyper = fx.handlers(  # hyperparameters: installed first, so the cells can ask too
        learning_rate.provide(1e-2),
        dropout_rate.provide(0.1),
        weight_decay.provide(jnp.float32(1e-4)),
    )
    with (
        hyper,
        fx.handlers(
            params.init(p0),
            opt_state.init(optimizer().init(p0)),  # optimizer() asks for the learning rate
            dropout.seed(seed),
            loss_log.collect(),
            metrics.collect(),
        ) as hs,
    ):
        test_before = float(evaluate(x_test, y_test))
        for i in range(steps):
            step(x, y)
            if i % every == 0 or i == steps - 1:
                m = hs[metrics][-1]
                print(
                    f"step {i:5d}  loss {float(hs[loss_log][-1]):.4f}  "
                    f"mse {float(m['mse']):.4f}  |grad| {float(m['grad_norm']):.3f}"
                )
        test_after = float(evaluate(x_test, y_test))
        drawn = hs[dropout].counter

    losses = [float(v) for v in hs[loss_log]]
    path = pathlib.Path(png)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_curve(losses, path)
    print(f"test mse {test_before:.4f} -> {test_after:.4f}; traced {len(traces)} time(s)")
    print(f"dropout keys drawn: {drawn}; loss curve saved to {path}")
    return {
        "losses": losses,
        "test_before": test_before,
        "test_after": test_after,
        "keys_drawn": drawn,
        "png": path,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (200 steps)")
    parser.add_argument("--steps", type=int, default=None, help="training steps")
    parser.add_argument("--png", default=OUT / "loss_curve.png", help="where to save the curve")
    args = parser.parse_args()
    main(args.steps or (200 if args.quick else 1500), png=args.png)
