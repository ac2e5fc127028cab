"""A Flax NNX CNN whose dropout keys, training flag and metrics are effects."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx

training = fx.Ask[bool]("training", static=True)
dropout_key = fx.RandomKey("dropout")
losses = fx.Emit[jax.Array]("losses")
accuracy = fx.Emit[jax.Array]("accuracy")
lr = fx.Ask[jax.Array]("lr")


class CNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(1, 8, kernel_size=(3, 3), rngs=rngs)
        self.norm = nnx.BatchNorm(8, rngs=rngs)
        self.dropout = nnx.Dropout(0.2)
        self.linear = nnx.Linear(8 * 14 * 14, 10, rngs=rngs)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        eval_mode = not training.ask()
        x = nnx.relu(self.norm(self.conv(x), use_running_average=eval_mode))
        b = x.shape[0]
        x = x.reshape(b, 14, 2, 14, 2, 8).mean(axis=(2, 4)).reshape(b, -1)  # 2x2 average pool
        if not eval_mode:
            x = self.dropout(x, deterministic=False, rngs=dropout_key.next_key())
        return self.linear(x)


def xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


@fx.uses(training, dropout_key, losses, lr)
def cnn_step(model: CNN, images: jax.Array, labels: jax.Array) -> None:
    def loss_fn(m: CNN) -> jax.Array:
        return xent(m(images), labels)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda p, g: p - lr.ask() * g, params, grads))
    losses.emit(loss)


cnn_train = fx.handle(cnn_step, transform=nnx.jit)
model = CNN(nnx.Rngs(0))
images = jax.random.uniform(jax.random.key(2), (16, 28, 28, 1))
labels = jnp.arange(16) % 10


class Schedule:
    """A learning-rate multiplier read through a property."""

    def __init__(self, base: float) -> None:
        self.base = base

    @property
    @fx.uses(lr)
    def current(self) -> jax.Array:
        return lr.ask() * self.base


# case: compiled step at module level under all handlers
with fx.handlers(
    training.provide(True), dropout_key.seed(0), losses.collect(), lr.provide(jnp.float32(0.05))
) as hs:
    for _ in range(5):
        cnn_train(model, images, labels)
print([float(v) for v in hs[losses]])


# case: training loop without the learning rate
with fx.handlers(training.provide(True), dropout_key.seed(1), losses.discard()):
    cnn_train(model, images, labels)  # E: effax-unhandled


# case: a layer drawing keys outside its row
class NoisyHead(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(10, 10, rngs=rngs)

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        if training.ask():
            x = x + 0.01 * jax.random.normal(dropout_key.next_key(), x.shape)  # E: effax-undeclared
        return self.linear(x)


# case: a submodule whose row is wider than the parent's
class Classifier(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.backbone = CNN(rngs)
        self.temperature = 2.0

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.backbone(x) / self.temperature  # E: effax-undeclared


# case: a submodule under a row that covers it
class CalibratedClassifier(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.backbone = CNN(rngs)
        self.head = nnx.Linear(10, 10, rngs=rngs)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(self.backbone(x))


# case: evaluation installs eval mode and a stream
@fx.uses()
def eval_accuracy(m: CNN, x: jax.Array, y: jax.Array) -> jax.Array:
    with training.provide(False), dropout_key.seed(0):
        logits = m(x)
    return jnp.mean(jnp.argmax(logits, -1) == y)


# case: evaluation in eval mode without a dropout stream
@fx.uses()
def eval_accuracy_noseed(m: CNN, x: jax.Array, y: jax.Array) -> jax.Array:
    with training.provide(False):
        logits = m(x)  # E: effax-undeclared
    return jnp.mean(jnp.argmax(logits, -1) == y)


# case: emitting accuracy outside the row
@fx.uses(training, dropout_key)
def eval_and_log(m: CNN, x: jax.Array, y: jax.Array) -> None:
    logits = m(x)
    accuracy.emit(jnp.mean(jnp.argmax(logits, -1) == y))  # E: effax-undeclared


# case: a property read under a row that covers it
@fx.uses(lr)
def warm_lr(s: Schedule) -> jax.Array:
    return s.current * 0.1


# case: a property read under a row that does not
@fx.uses(training)
def warm_lr_wrong(s: Schedule) -> jax.Array:
    factor = 0.1 if training.ask() else 1.0
    return s.current * factor  # E: effax-undeclared


# case: a property read at module level
schedule = Schedule(0.5)
print(schedule.current)  # E: effax-unhandled


# case: an array given to a static Ask
mean_image = fx.Ask[jax.Array]("mean_image", static=True)


@fx.uses(mean_image)
def center(x: jax.Array) -> jax.Array:
    return x - mean_image.ask()


with mean_image.provide(jnp.mean(images, axis=0)):  # E: effax-handler-type
    centered = center(images)
