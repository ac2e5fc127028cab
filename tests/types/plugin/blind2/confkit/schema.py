"""Configuration as static `Ask` effects holding frozen dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx

__all__ = [
    "CONFIG_ROW",
    "ModelConfig",
    "OptimConfig",
    "activation_fn",
    "layer_sizes",
    "model_cfg",
    "optim_cfg",
    "run_name",
    "temperature",
]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    depth: int = 2
    width: int = 64
    activation: str = "relu"


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    clip: float | None = None
    schedule: tuple[int, ...] = (1000, 2000)


model_cfg = fx.Ask[ModelConfig]("model_cfg", static=True)
optim_cfg = fx.Ask[OptimConfig]("optim_cfg", static=True)
run_name = fx.Ask[str]("run_name", static=True)
layer_sizes = fx.Ask[tuple[int, ...]]("layer_sizes", static=True)
temperature = fx.Ask[jax.Array]("temperature")

CONFIG_ROW = (model_cfg, optim_cfg)

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "gelu": jax.nn.gelu,
}


@fx.uses(model_cfg)
def activation_fn() -> Callable[[jax.Array], jax.Array]:
    return _ACTIVATIONS[model_cfg.ask().activation]
