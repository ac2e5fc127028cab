"""A hyper-parameter sweep over learning rates and model shapes: the static run
configuration is a frozen dataclass, the learning rate an Ask with a default, runs
are snapshotted and resumed, and the best loss is tracked in a State."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from b8lib.effects import TRAIN_ROW, RunConfig, config, dropout, learning_rate, losses, steps, training
from b8lib.layers import init_mlp
from b8lib.train import regression_data, train_step

X, Y = regression_data()
best_loss = fx.State[float]("best_loss")
trial_configs = fx.Ask[list[RunConfig]]("trial_configs", static=True)
grid_point = fx.Ask[tuple[float, int]]("grid_point", static=True)


# case: the layer shapes follow the static configuration
@fx.uses(config)
def build_shapes() -> list[tuple[int, int]]:
    cfg = config.ask()
    return [(cfg.width, cfg.width)] * cfg.depth


with config.provide(RunConfig(depth=3, width=4)):
    shapes = build_shapes()
print("shapes", shapes)


# case: one run per learning rate, the shared compiled train step
compiled_step = fx.jit(train_step)


@fx.uses(dropout, training, losses, learning_rate, steps)
def run(n_steps: int) -> dict[str, jax.Array]:
    params = init_mlp(jax.random.key(0), 3, 8, 1)
    for _ in range(n_steps):
        params = compiled_step(params, X, Y)
    return params


results: dict[float, float] = {}
for lr in (0.01, 0.05, 0.1):
    with fx.handlers(
        dropout.seed(0), training.provide(True), losses.collect(), learning_rate.provide(lr), steps.init(jnp.int32(0))
    ) as hs:
        run(3)
    results[lr] = float(hs[losses][-1])
print("final losses", results)


# case: a sweep helper whose row forgets the collected losses
@fx.uses(dropout, training, learning_rate, steps)
def quick_trial(params: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return train_step(params, X, Y)  # E: effax-undeclared


with fx.handlers(dropout.seed(1), losses.collect(), steps.init(jnp.int32(0))):
    quick_trial(init_mlp(jax.random.key(1), 3, 8, 1))


# case: the compiled step at module level without a step counter
with dropout.seed(2), losses.collect():
    p1 = fx.jit(train_step)(init_mlp(jax.random.key(2), 3, 8, 1), X, Y)  # E: effax-unhandled


# case: a run snapshotted after three steps and resumed in fresh handlers
params0 = init_mlp(jax.random.key(3), 3, 8, 1)
with fx.handlers(dropout.seed(4), steps.init(jnp.int32(0)), losses.collect()) as first:
    p = params0
    for _ in range(3):
        p = compiled_step(p, X, Y)
    saved = fx.snapshot(first)
with fx.handlers(dropout.seed(99), steps.init(jnp.int32(0)), losses.collect()) as resumed:
    fx.restore(saved, resumed)
    p = compiled_step(p, X, Y)
print("resumed at step", int(resumed[steps]), "counter", resumed[dropout].counter)


# case: a list of trial configurations given to a static Ask
with trial_configs.provide([RunConfig(), RunConfig(depth=3)]):  # E: effax-handler-type
    print(len(trial_configs.ask()))


# case: a tuple grid point is hashable and fine as a static value
@fx.uses(grid_point)
def describe_point() -> str:
    lr, width = grid_point.ask()
    return f"lr={lr} width={width}"


for point in itertools.product((0.01, 0.1), (4, 8)):
    with grid_point.provide(point):
        describe_point()


# case: handlers of different kinds in a typed list, spread into fx.handlers
cells: list[fx.Handler[Any]] = [dropout.seed(5), steps.init(jnp.int32(0)), losses.collect()]
with fx.handlers(*cells) as hs:
    compiled_step(params0, X, Y)
print("steps from the list", int(hs[steps]))


# case: a class body asks for the configuration when the class is defined
class TrialDefaults:
    lr = learning_rate.ask()
    width = config.ask().width  # E: effax-unhandled


# case: the class body under a provider of the configuration
with config.provide(RunConfig(width=16)):

    class WideDefaults:
        lr = learning_rate.ask()
        width = config.ask().width


print("wide", WideDefaults.width, WideDefaults.lr)


# case: a conditional handler handles only what both branches handle
fast_mode = True
with learning_rate.provide(0.2) if fast_mode else config.provide(RunConfig()):
    shapes_fast = build_shapes()  # E: effax-unhandled


# case: a conditional handler whose branches both provide the configuration
with config.provide(RunConfig(depth=1)) if fast_mode else config.provide(RunConfig(depth=4)):
    shapes_either = build_shapes()


# case: a row spread from the shared tuple, asking the learning rate outside it
@fx.uses(*TRAIN_ROW)
def decayed_lr() -> float:
    steps.modify(lambda n: n + 1)
    return learning_rate.ask() * 0.5  # E: effax-undeclared


with fx.handlers(steps.init(jnp.int32(0)), learning_rate.provide(0.3)):
    decayed_lr()  # E: effax-unhandled


# case: the same with the learning rate added to the spread row
@fx.uses(*TRAIN_ROW, learning_rate)
def decayed_lr_ok() -> float:
    steps.modify(lambda n: n + 1)
    return learning_rate.ask() * 0.5


with fx.handlers(steps.init(jnp.int32(0)), learning_rate.provide(0.3)):
    decayed_lr_ok()  # E: effax-unhandled


# case: fx.uses applied to a lambda, called at module level with no configuration
lr_per_unit = fx.uses(learning_rate, config)(lambda: learning_rate.ask() / config.ask().width)
per_unit = lr_per_unit()  # E: effax-unhandled


# case: one handled function per learning rate, in a dict comprehension
@fx.uses(learning_rate, steps)
def quadratic_descent(w: jax.Array) -> jax.Array:
    for _ in range(5):
        steps.modify(lambda n: n + 1)
        w = w - learning_rate.ask() * 2.0 * w
    return w


with steps.init(jnp.int32(0)) as step_cell:
    finals = {lr: fx.handle(quadratic_descent, learning_rate.provide(lr))(jnp.float32(1.0)) for lr in (0.1, 0.3)}
print("descent", {k: float(v) for k, v in finals.items()}, int(step_cell.value))


# case: the same descent vmapped over starting points; the counter update is shared
with steps.init(jnp.int32(0)):
    batch_finals = fx.vmap(quadratic_descent)(jnp.linspace(-1.0, 1.0, 4))


# case: a frozen trial record kept as a static value must hold tuples
@dataclasses.dataclass(frozen=True)
class Trial:
    name: str
    lrs: tuple[float, ...]


trial = fx.Ask[Trial]("trial", static=True)
with trial.provide(Trial("baseline", (0.01, 0.1))):
    print(trial.ask().lrs)


# case: tracking the best loss from a compiled tracker whose cell starts from an int
@fx.uses(best_loss)
def update_best(loss: jax.Array) -> None:
    best_loss.set(jnp.minimum(best_loss.get(), loss))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


if __name__ == "__main__":
    tracker = fx.handle(update_best, best_loss.init(10), transform=jax.jit)  # E: effax-handler-type
    for value in results.values():
        tracker(jnp.float32(value))
    print("best", tracker)
