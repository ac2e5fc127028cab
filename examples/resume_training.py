"""Checkpoint and resume a training run, bit for bit, with Orbax.

A run's whole state lives in effax handlers: the parameters and the optimiser
state in `State` cells, its position in the dropout key stream. `effax.snapshot`
reads them out as plain arrays keyed by effect name, Orbax saves them, and
`effax.restore` writes them back into the handlers of a fresh process.

This script trains a small regression model three ways and compares the loss
curves: uninterrupted in this process, then interrupted after `--split` steps (a
fresh Python process trains, checkpoints with Orbax and exits) and resumed (another
fresh process restores the checkpoint and trains to the end). The resumed curve is
the uninterrupted one, bit for bit: the same parameters, optimiser moments and
dropout keys.

Run: python examples/resume_training.py [--quick] [--steps N] [--split K] [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

import effax as fx

# --- effects --------------------------------------------------------------------------

params = fx.State[dict[str, jax.Array]]("params")
opt_state = fx.State[optax.OptState]("opt_state")
dropout = fx.RandomKey("dropout")
loss_log = fx.Emit[jax.Array]("loss")

optimizer = optax.adam(1e-2)
X = jnp.linspace(-2.0, 2.0, 64).reshape(-1, 1)
Y = jnp.sin(2 * X)

# --- the training step: performs effects, plumbs nothing ---------------------------------


def predict(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    hidden = jnp.tanh(x @ p["w1"] + p["b1"])
    keep = jax.random.bernoulli(dropout.next_key(), 0.9, hidden.shape)
    return (jnp.where(keep, hidden / 0.9, 0.0)) @ p["w2"] + p["b2"]


@fx.jit
def train_step() -> None:
    def loss(p: dict[str, jax.Array]) -> jax.Array:
        return jnp.mean((predict(p, X) - Y) ** 2)

    value, grads = jax.value_and_grad(loss)(params.get())
    updates, new_opt_state = optimizer.update(grads, opt_state.get())
    params.set(optax.apply_updates(params.get(), updates))
    opt_state.set(new_opt_state)
    loss_log.emit(value)


# --- the program entry: handlers, checkpoints ----------------------------------------------


def fresh_run() -> fx.Handlers:
    """The handlers of a run from step 0 (a resumed run restores into these)."""
    k1, k2 = jax.random.split(jax.random.key(42))
    p = {
        "w1": jax.random.normal(k1, (1, 32)),
        "b1": jnp.zeros((1, 32)),
        "w2": jax.random.normal(k2, (32, 1)) / 32,
        "b2": jnp.zeros((1, 1)),
    }
    return fx.handlers(
        params.init(p), opt_state.init(optimizer.init(p)), dropout.seed(0), loss_log.collect()
    )


def train(hs: fx.Handlers, steps: int) -> np.ndarray:
    with hs:
        for _ in range(steps):
            train_step()
    return np.asarray(jnp.stack(hs[loss_log])) if steps else np.zeros(0, np.float32)


def first_part(out: pathlib.Path, split: int) -> None:
    """Train `split` steps, checkpoint, and stop (run in a fresh process)."""
    hs = fresh_run()
    np.save(out / "losses_first.npy", train(hs, split))
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save((out / "checkpoint").absolute(), fx.snapshot(hs), force=True)


def second_part(out: pathlib.Path, steps: int, split: int) -> None:
    """Restore the checkpoint into a fresh run and train to the end."""
    hs = fresh_run()
    with ocp.StandardCheckpointer() as checkpointer:
        saved = checkpointer.restore((out / "checkpoint").absolute(), fx.snapshot(hs))
    fx.restore(saved, hs)
    np.save(out / "losses_rest.npy", train(hs, steps - split))


def main(
    steps: int = 300, split: int = 120, *, out: str | pathlib.Path = "examples/out/resume"
) -> dict[str, Any]:
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    uninterrupted = train(fresh_run(), steps)
    for phase in ("first", "rest"):
        command = [
            "--phase",
            phase,
            "--steps",
            str(steps),
            "--split",
            str(split),
            "--out",
            str(out),
        ]
        subprocess.run([sys.executable, __file__, *command], check=True)
    resumed = np.concatenate([np.load(out / "losses_first.npy"), np.load(out / "losses_rest.npy")])
    same = resumed.tobytes() == uninterrupted.tobytes()
    print(f"loss at step 0: {uninterrupted[0]:.4f}, at step {steps - 1}: {uninterrupted[-1]:.6f}")
    print(f"stopped after step {split - 1}, checkpointed with Orbax in {out}, resumed")
    print(f"resumed loss curve equals the uninterrupted one, bit for bit: {same}")
    return {"uninterrupted": uninterrupted, "resumed": resumed, "same": same}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run (60 steps)")
    parser.add_argument("--steps", type=int, default=None, help="training steps")
    parser.add_argument("--split", type=int, default=None, help="steps before the interruption")
    parser.add_argument("--out", default="examples/out/resume", help="where checkpoints go")
    parser.add_argument("--phase", choices=["first", "rest"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    steps = args.steps or (60 if args.quick else 300)
    split = args.split or steps * 2 // 5
    if args.phase == "first":
        first_part(pathlib.Path(args.out), split)
    elif args.phase == "rest":
        second_part(pathlib.Path(args.out), steps, split)
    else:
        main(steps, split, out=args.out)
