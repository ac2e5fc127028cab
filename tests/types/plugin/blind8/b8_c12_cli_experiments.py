"""An experiment command line: each command is a pure entry point (`@fx.uses()`) that
installs what it needs; a global loss log is installed around the dispatcher."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx
from b8lib.custom import cost
from b8lib.effects import RunConfig, acts, config, dropout, learning_rate, losses, metrics, steps, training
from b8lib.layers import Dense, init_mlp, maybe_dropout, mlp, tick
from b8lib.train import mse_loss, regression_data, train_step

X, Y = regression_data(8, 3)


@dataclasses.dataclass
class Args:
    command: str
    steps: int = 3
    seed: int = 0
    lr: float = 0.05


def parse(argv: list[str]) -> Args:
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.05)
    ns = parser.parse_args(argv)
    return Args(ns.command, ns.steps, ns.seed, ns.lr)


# case: the train command installs everything its loop needs
@fx.uses()
def cmd_train(args: Args) -> float:
    params = init_mlp(jax.random.key(args.seed), 3, 8, 1)
    with fx.handlers(
        dropout.seed(args.seed), training.provide(True), losses.collect(), learning_rate.provide(args.lr), steps.init(jnp.int32(0))
    ) as hs:
        step = fx.jit(train_step)
        for _ in range(args.steps):
            params = step(params, X, Y)
    return float(hs[losses][-1])


print("train", cmd_train(parse(["train", "--steps", "2"])))


# case: a quick-train command that forgets to collect the losses it emits
@fx.uses()
def cmd_quick(args: Args) -> None:
    params = init_mlp(jax.random.key(args.seed), 3, 8, 1)
    with fx.handlers(dropout.seed(args.seed), steps.init(jnp.int32(0))):
        train_step(params, X, Y)  # E: effax-undeclared


with losses.collect() as global_log:
    cmd_quick(parse(["quick"]))


# case: an evaluation command reading the training flag with no handler anywhere
@fx.uses()
def cmd_eval(args: Args) -> float:
    params = init_mlp(jax.random.key(args.seed), 3, 8, 1)
    mode = training.ask()  # E: effax-undeclared
    with dropout.seed(0), acts.ignore():
        pred = mlp(params, X)  # E: effax-undeclared
    return float(jnp.mean((pred - Y) ** 2)) if not mode else 0.0


print("eval", cmd_eval(parse(["eval"])))


# case: the evaluation command with the flag provided inside
@fx.uses()
def cmd_eval_ok(args: Args) -> float:
    params = init_mlp(jax.random.key(args.seed), 3, 8, 1)
    with dropout.seed(0), acts.ignore(), training.provide(False):
        pred = mlp(params, X)
    return float(jnp.mean((pred - Y) ** 2))


print("eval ok", cmd_eval_ok(parse(["eval"])))


# case: an inspect command records the hidden taps but draws dropout keys unseeded
@fx.uses()
def cmd_inspect(args: Args) -> dict[str, jax.Array]:
    params = init_mlp(jax.random.key(args.seed), 3, 8, 1)
    with acts.record() as rec, training.provide(True):
        mlp(params, X)  # E: effax-undeclared
    return dict(rec.value)


with dropout.seed(0):
    cmd_inspect(parse(["inspect"]))


# case: the dispatcher keeps commands in a dict; their rows are not followed there
COMMANDS: dict[str, Callable[[Args], object]] = {"train": cmd_train, "eval": cmd_eval_ok}
with losses.collect():
    for name in ("train", "eval"):
        COMMANDS[name](parse([name, "--steps", "1"]))


# case: a cost report at module level: the ledger opened, the counter not
with cost.open() as spent:
    cost.add(1.5)
    tick()  # E: effax-unhandled


# case: the counter ticked under its cell, the ledger's total read afterwards
with steps.init(jnp.int32(0)) as counter, cost.open() as spent:
    tick()
    cost.add(2.0)
print("ticks", int(counter.value), "cost", float(spent.value))


# case: a layer object's call at module level with its taps ignored
layer = Dense(jnp.eye(3), jnp.zeros(3), "cli/dense")
with acts.ignore():
    layer(X)


# case: the same layer called in a sweep comprehension without any tap handler
outs = [layer(X * s) for s in (0.5, 1.0)]  # E: effax-unhandled


# case: a metrics command emits a dict it forgot to collect
@fx.uses(losses)
def cmd_metrics(args: Args) -> None:
    losses.emit(jnp.float32(args.lr))
    metrics.emit({"lr": jnp.float32(args.lr)})  # E: effax-undeclared


with losses.collect(), metrics.collect():
    cmd_metrics(parse(["metrics"]))


# case: a config command shaping a model from the static configuration
@fx.uses(config)
def cmd_shapes(args: Args) -> list[int]:
    cfg = config.ask()
    return [cfg.width] * cfg.depth


with config.provide(RunConfig(depth=4, width=2)):
    print(cmd_shapes(parse(["shapes"])))
shapes_bare = cmd_shapes(parse(["shapes"]))  # E: effax-unhandled


# case: a dropout preview with the flag provided and a key stream seeded
with training.provide(True), dropout.seed(3):
    preview = maybe_dropout(jnp.ones(6), rate=0.5)


# case: the preview with the flag provided but no key stream
with training.provide(True):
    preview_bad = maybe_dropout(jnp.ones(6), rate=0.5)  # E: effax-unhandled


# case: the loss value of one batch, differentiated by fx.value_and_grad at module level
with fx.handlers(dropout.seed(4), training.provide(True), losses.collect()) as hs:
    loss_value, loss_grads = fx.value_and_grad(mse_loss)(init_mlp(jax.random.key(4), 3, 8, 1), X, Y)
print("loss", float(loss_value), "logged", len(hs[losses]))


# case: the same at module level without the loss log
with dropout.seed(5):
    lv_bad = fx.value_and_grad(mse_loss)(init_mlp(jax.random.key(5), 3, 8, 1), X, Y)  # E: effax-unhandled


# case: the main block runs the training command under a global step counter
if __name__ == "__main__":
    with steps.init(jnp.int32(0)) as global_steps:
        result = cmd_train(parse(["train", "--steps", "1"]))
        tick()
    print("main", result, int(global_steps.value))
