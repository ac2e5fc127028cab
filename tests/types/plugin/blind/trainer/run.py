"""A training script: module-level code using the trainer package."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
import trainer.layers as layers
from trainer.effects import calls, dropout_key, losses, training

key = jax.random.key(0)
x = jax.random.normal(key, (8, 3))
y = jnp.sum(x, axis=1)
model = layers.MLP(key)

# case: script installs all handlers
with fx.handlers(training.provide(True), dropout_key.seed(0), calls.init(jnp.int32(0))):
    with losses.collect() as collected:
        loss = layers.fast_loss(model, x, y)
print(loss, collected.value)

# case: evaluation under the key stream only
with dropout_key.seed(1):
    preds = layers.evaluate(model, x)

# case: module-level call forgets the key stream
with training.provide(False):
    preds_bad = layers.predict(model, x)  # E: effax-unhandled

# case: module-level attribute-style access of a compiled function
with training.provide(True), dropout_key.seed(0), losses.discard():
    loss_bad = layers.fast_loss(model, x, y)  # E: effax-unhandled

# case: main guard evaluates without handlers
if __name__ == "__main__":
    print(layers.evaluate(model, x))  # E: effax-unhandled
