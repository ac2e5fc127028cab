"""A configurable training run: static config, a logging layer, run entry points."""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import jax.numpy as jnp

import effax as fx
import confkit
from confkit import *  # noqa: F403
from confkit import MetricsLogger, collecting, global_step, histograms, log_scalar, log_weights, quiet, scalars

PARAMS = [jnp.eye(8) * 0.5 for _ in range(4)]


@fx.uses(model_cfg, temperature)
def mlp_forward(params: list[jax.Array], x: jax.Array) -> jax.Array:
    act = activation_fn()
    for w in params[: model_cfg.ask().depth]:
        x = act(x @ w) / temperature.ask()
    return x


@fx.jit
@fx.uses(*CONFIG_ROW)
def scaled_lr(g: jax.Array) -> jax.Array:
    return g * confkit.optim_cfg.ask().lr / model_cfg.ask().depth


@fx.uses(model_cfg, optim_cfg, scalars, global_step)
def sgd(params: list[jax.Array], grads: list[jax.Array]) -> list[jax.Array]:
    step = global_step.modify(lambda n: n + 1)
    log_scalar("step", step)
    return [p - scaled_lr(g) for p, g in zip(params, grads)]


# case: static config objects, traced temperature
with model_cfg.provide(ModelConfig(depth=3, activation="tanh")), temperature.provide(jnp.float32(1.0)):
    out = mlp_forward(PARAMS, jnp.ones((2, 8)))


# case: hidden sizes as a list for a static Ask
hidden_sizes = fx.Ask[list[int]]("hidden_sizes", static=True)


@fx.uses(hidden_sizes)
def n_params() -> int:
    sizes = hidden_sizes.ask()
    return sum(a * b for a, b in zip(sizes, sizes[1:]))


with hidden_sizes.provide([64, 64, 1]):  # E: effax-handler-type
    print(n_params())


# case: layer sizes as a tuple
@fx.uses(layer_sizes)
def n_params_tuple() -> int:
    sizes = layer_sizes.ask()
    return sum(a * b for a, b in zip(sizes, sizes[1:]))


with layer_sizes.provide((64, 64, 1)):
    print(n_params_tuple())


# case: a mutable dataclass as a static value
@dataclasses.dataclass
class DataConfig:
    batch_size: int = 32
    shuffle: bool = True


data_cfg = fx.Ask[DataConfig]("data_cfg", static=True)


@fx.uses(data_cfg)
def batch_size() -> int:
    return data_cfg.ask().batch_size


@fx.uses()
def main_data() -> int:
    with data_cfg.provide(DataConfig(batch_size=64)):  # E: effax-handler-type
        return batch_size()


# case: loss weights as a dict for a static Ask
loss_weights = fx.Ask[dict[str, float]]("loss_weights", static=True)


@fx.uses(loss_weights)
def total_loss(parts: dict[str, jax.Array]) -> jax.Array:
    return sum((loss_weights.ask()[k] * v for k, v in parts.items()), start=jnp.zeros(()))


@fx.uses()
def weighted() -> jax.Array:
    with loss_weights.provide({"mse": 1.0, "l2": 1e-4}):  # E: effax-handler-type
        return total_loss({"mse": jnp.ones(()), "l2": jnp.ones(())})


# case: loss weights as pairs and a frozenset of tags
loss_pairs = fx.Ask[tuple[tuple[str, float], ...]]("loss_pairs", static=True)
tags = fx.Ask[frozenset[str]]("tags", static=True)


@fx.uses(loss_pairs, tags)
def total_loss_pairs(parts: dict[str, jax.Array]) -> jax.Array:
    weights = dict(loss_pairs.ask())
    if "debug" in tags.ask():
        print(sorted(weights))
    return sum((weights[k] * v for k, v in parts.items()), start=jnp.zeros(()))


with loss_pairs.provide((("mse", 1.0), ("l2", 1e-4))), tags.provide(frozenset({"debug"})):
    total_loss_pairs({"mse": jnp.ones(())})


# case: an optimiser name given to a traced Ask
optimizer_name = fx.Ask[str]("optimizer_name")


@fx.jit
@fx.uses(optimizer_name)
def update(g: jax.Array) -> jax.Array:
    return -0.1 * g if optimizer_name.ask() == "sgd" else -0.01 * jnp.sign(g)


with optimizer_name.provide("sgd"):  # (marked here before issue 42: now reported on the compiled call, where run time raises)
    update(jnp.ones(3))  # E: effax-handler-type


# case: logging outside the row
@fx.uses(histograms)
def log_layer(w: jax.Array) -> None:
    histograms.emit(w)
    log_scalar("mean", jnp.mean(w))  # E: effax-undeclared


# case: logging under the collecting() helper
@fx.uses()
def log_all(ws: list[jax.Array]) -> list[str]:
    logger = MetricsLogger("train")
    with collecting() as hs:
        for w in ws:
            log_weights(w)
    logger.flush(hs)
    return logger.lines


# case: quiet() drops only the scalars
@fx.uses()
def silent_weights(w: jax.Array) -> None:
    with quiet():
        log_weights(w)  # limit


# case: config read at import time
DEFAULT_WIDTH = model_cfg.ask().width  # E: effax-unhandled


# case: handlers kept in a variable
defaults = fx.handlers(
    model_cfg.provide(ModelConfig()), optim_cfg.provide(OptimConfig()), run_name.provide("baseline")
)


@fx.uses()
def describe_run() -> str:
    with defaults:
        return f"{run_name.ask()}: depth {model_cfg.ask().depth}, lr {optim_cfg.ask().lr}"


# case: a handlers variable that lacks the model config
sweep_overrides = fx.handlers(optim_cfg.provide(OptimConfig(lr=1e-2)), run_name.provide("lr-sweep"))


@fx.uses()
def describe_sweep() -> str:
    with sweep_overrides:
        return f"{run_name.ask()}: depth {model_cfg.ask().depth}"  # E: effax-undeclared


# case: an ExitStack that never enters the model config
@fx.uses()
def describe_stacked() -> str:
    with contextlib.ExitStack() as stack:
        stack.enter_context(run_name.provide("stacked"))
        stack.enter_context(optim_cfg.provide(OptimConfig()))
        return f"{run_name.ask()}: depth {model_cfg.ask().depth}"  # limit


# case: a jitted config function at module level, optimiser config missing
with model_cfg.provide(ModelConfig(depth=4)):
    scaled_lr(jnp.ones(3))  # E: effax-unhandled


# case: a jitted config function under the full config
with fx.handlers(model_cfg.provide(ModelConfig()), optim_cfg.provide(OptimConfig(lr=0.1))):
    scaled_lr(jnp.ones(3))


# case: an optimiser loop that logs and counts
@fx.uses(*CONFIG_ROW)
def fit(params: list[jax.Array], steps: int) -> tuple[list[jax.Array], list[dict[str, jax.Array]]]:
    with fx.handlers(scalars.collect(), global_step.init(jnp.int32(0))) as hs:
        for _ in range(steps):
            params = sgd(params, [jnp.ones_like(p) for p in params])
    return params, hs[scalars]


# case: the optimiser loop forgets the step counter
@fx.uses(*CONFIG_ROW, scalars)
def fit_nostep(params: list[jax.Array], steps: int) -> list[jax.Array]:
    for _ in range(steps):
        params = sgd(params, [jnp.ones_like(p) for p in params])  # E: effax-undeclared
    return params
