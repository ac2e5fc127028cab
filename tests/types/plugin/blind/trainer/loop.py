"""The training loop, importing the trainer's effects and layers by name."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from trainer.effects import MODEL_ROW, STEP_ROW, calls, dropout_key, learning_rate, losses, training
from trainer.layers import MLP, Dropout, Optimizer, evaluate, fast_loss, loss_fn, predict, sharp_predict


# case: step declares the imported row
@fx.uses(*STEP_ROW)
def train_step(model: MLP, x: jax.Array, y: jax.Array) -> Any:
    return fx.grad(loss_fn)(model, x, y)


# case: loop installs every handler
@fx.uses()
def train(key: jax.Array, x: jax.Array, y: jax.Array) -> list[jax.Array]:
    model = MLP(key)
    with fx.handlers(training.provide(True), dropout_key.seed(0), calls.init(jnp.int32(0))):
        with losses.collect() as collected:
            for _ in range(3):
                fast_loss(model, x, y)
    return collected.value


# case: evaluate handled training, only the key remains
@fx.uses(dropout_key)
def validation(model: MLP, x: jax.Array) -> jax.Array:
    return evaluate(model, x)


# case: imported partial within the row
@fx.uses(*MODEL_ROW)
def sharpened(model: MLP, x: jax.Array) -> jax.Array:
    return sharp_predict(model, x) + predict(model, x)


# case: imported submodule class used as attribute
class Head:
    def __init__(self) -> None:
        self.drop = Dropout(0.2)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.drop(x)


# case: imported property read within the row
@fx.uses(learning_rate)
def sgd(opt: Optimizer, w: jax.Array, g: jax.Array) -> jax.Array:
    return w - opt.step_size * g


# case: step row misses the imported losses effect
@fx.uses(*MODEL_ROW, calls)
def step_no_losses(model: MLP, x: jax.Array, y: jax.Array) -> Any:
    return fx.grad(loss_fn)(model, x, y)  # E: effax-undeclared


# case: loop forgets the call counter
@fx.uses()
def train_no_calls(key: jax.Array, x: jax.Array, y: jax.Array) -> None:
    model = MLP(key)
    with fx.handlers(training.provide(True), dropout_key.seed(0), losses.discard()):
        fast_loss(model, x, y)  # E: effax-undeclared


# case: evaluate still needs the key
@fx.uses(training)
def validation_missing(model: MLP, x: jax.Array) -> jax.Array:
    return evaluate(model, x)  # E: effax-undeclared


# case: imported partial outside the row
@fx.uses(training)
def sharpened_missing(model: MLP, x: jax.Array) -> jax.Array:
    return sharp_predict(model, x)  # E: effax-undeclared


# case: imported module instance called outside the row
@fx.uses(dropout_key)
def direct_call(model: MLP, x: jax.Array) -> jax.Array:
    return model(x)  # E: effax-undeclared


# case: imported classmethod outside the row
@fx.uses()
def smoke(key: jax.Array) -> jax.Array:
    with training.provide(False):
        return MLP.smoke_test(key)  # E: effax-undeclared


# case: imported property read outside the row
@fx.uses()
def sgd_missing(opt: Optimizer, w: jax.Array, g: jax.Array) -> jax.Array:
    return w - opt.step_size * g  # E: effax-undeclared


# case: imported effect operation outside the row
@fx.uses(*MODEL_ROW)
def count_and_predict(model: MLP, x: jax.Array) -> jax.Array:
    calls.modify(lambda n: n + 1)  # E: effax-undeclared
    return predict(model, x)
