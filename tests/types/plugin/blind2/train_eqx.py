"""Train an mlkit MLP (Equinox layers) on a toy regression problem."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

import effax as fx
import mlkit
from mlkit import *  # noqa: F403
from mlkit import MLP, base_lr, compiled_step, loss_fn, predict, predict_batch, train_step
from mlkit.effects import LAYER_ROW, STEP_ROW
from mlkit.effects import training as is_training

Batches = list[tuple[jax.Array, jax.Array]]
rng_alias = dropout_key


def make_data(key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    kx, ky = jax.random.split(key)
    x = jax.random.uniform(kx, (n, 3), minval=-1.0, maxval=1.0)
    y = jnp.sin(x[:, 0]) + x[:, 1] * x[:, 2] + 0.05 * jax.random.normal(ky, (n,))
    return x, y


# case: entry point handles everything
@fx.uses()
def run_training(steps: int, seed: int = 0) -> list[float]:
    x, y = make_data(jax.random.key(seed), 256)
    model = MLP(3, 32, jax.random.key(seed + 1))
    hyper = fx.handlers(
        learning_rate.provide(1e-2),
        weight_decay.provide(jnp.float32(1e-4)),
        training.provide(True),
    )
    with (
        hyper,
        fx.handlers(
            lr_now.init(base_lr()),  # the hyperparameters are installed by now
            dropout_key.seed(seed),
            forward_calls.init(jnp.int32(0)),
            loss_log.collect(),
        ) as hs,
    ):
        for _ in range(steps):
            model = compiled_step(model, x, y)
    return [float(v) for v in hs[loss_log]]


# case: entry point forgets the weight decay
@fx.uses()
def run_training_nowd(steps: int) -> MLP:
    x, y = make_data(jax.random.key(0), 128)
    model = MLP(3, 16, jax.random.key(1))
    with learning_rate.provide(1e-2), training.provide(True):
        with fx.handlers(
            lr_now.init(base_lr()),
            dropout_key.seed(0),
            forward_calls.init(jnp.int32(0)),
            loss_log.discard(),
        ):
            for _ in range(steps):
                model = compiled_step(model, x, y)  # E: effax-undeclared
    return model


# case: schedule initialised in the same handlers call that provides the learning rate
@fx.uses()
def run_schedule(steps: int) -> jax.Array:
    x, y = make_data(jax.random.key(2), 128)
    model = MLP(3, 16, jax.random.key(3))
    with fx.handlers(
        learning_rate.provide(3e-3),
        weight_decay.provide(jnp.float32(0.0)),
        training.provide(True),
        lr_now.init(base_lr()),  # E: effax-undeclared
        dropout_key.seed(1),
        forward_calls.init(jnp.int32(0)),
        loss_log.discard(),
    ) as hs:
        for _ in range(steps):
            model = train_step(model, x, y)
    return hs[lr_now]


# case: test loss computed after the call counter was closed
@fx.uses()
def train_then_test(model: MLP) -> tuple[jax.Array, jax.Array]:
    x_test, y_test = make_data(jax.random.key(9), 64)
    with fx.handlers(
        training.provide(False),
        dropout_key.seed(0),
        weight_decay.provide(jnp.float32(1e-4)),
    ):
        with forward_calls.init(jnp.int32(0)) as calls:
            preds = predict_batch(model, x_test)
        test_loss = loss_fn(model, x_test, y_test)  # E: effax-undeclared
    return jnp.mean((preds - y_test) ** 2) + 0 * calls.value, test_loss


# case: evaluation row without the dropout stream
@fx.uses(training, forward_calls)
def evaluate(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    preds = jnp.stack([model(xi) for xi in x])  # E: effax-undeclared
    return jnp.mean((preds - y) ** 2)


# case: evaluation installs what its row lacks
@fx.uses(forward_calls)
def evaluate_eval_mode(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    with training.provide(False), dropout_key.seed(0):
        preds = predict(model, x, batched=True)
    return jnp.mean((preds - y) ** 2)


# case: the library's partial under a row that is too narrow
@fx.uses(*LAYER_ROW)
def quick_predictions(model: MLP, x: jax.Array) -> jax.Array:
    return predict_batch(model, x)  # E: effax-undeclared


# case: a row built from the library's tuple
@fx.uses(*STEP_ROW, mlkit.weight_decay)
def two_steps(model: MLP, x: jax.Array, y: jax.Array) -> MLP:
    model = train_step(model, x, y)
    return mlkit.train_step(model, x, y)


# case: the library's tuple without the weight decay
@fx.uses(*STEP_ROW)
def epoch(model: MLP, batches: Batches) -> MLP:
    for xb, yb in batches:
        model = train_step(model, xb, yb)  # E: effax-undeclared
    return model


# case: a step handled with eqx.filter_jit, weight decay bound
handled_step = fx.handle(train_step, weight_decay.provide(jnp.float32(1e-4)), transform=eqx.filter_jit)


@fx.uses(*STEP_ROW)
def epoch_handled(model: MLP, batches: Batches) -> MLP:
    for xb, yb in batches:
        model = handled_step(model, xb, yb)
    return model


# case: script forgets the call counter
if __name__ == "__main__":
    xs, ys = make_data(jax.random.key(0), 64)
    net = MLP(3, 8, jax.random.key(2))
    with fx.handlers(
        learning_rate.provide(1e-2), weight_decay.provide(jnp.float32(0.0)), training.provide(True)
    ):
        with fx.handlers(lr_now.init(base_lr()), dropout_key.seed(0), loss_log.collect()) as main_hs:
            for _ in range(10):
                net = compiled_step(net, xs, ys)  # E: effax-unhandled
    print([float(v) for v in main_hs[loss_log]])


# case: script calls the pure entry point
if __name__ == "__main__":
    print(run_training(100))


# case: a handled predictor called after its counter is gone
eval_fn = fx.handle(predict_batch, training.provide(False), dropout_key.seed(0))
with forward_calls.init(jnp.int32(0)):
    eval_fn(MLP(3, 8, jax.random.key(3)), jnp.ones((4, 3)))
eval_fn(MLP(3, 8, jax.random.key(4)), jnp.ones((4, 3)))  # E: effax-unhandled


# case: aliased effects in the row
@fx.uses(is_training, rng_alias, forward_calls)
def predict_one(model: MLP, x: jax.Array) -> jax.Array:
    return predict(model, x, batched=False)


# case: an aliased stream installed for one call only
@fx.uses(is_training, forward_calls)
def predict_both(model: MLP, x: jax.Array) -> jax.Array:
    with rng_alias.seed(0):
        one = predict(model, x[0], batched=False)
    many = predict(model, x, batched=True)  # E: effax-undeclared
    return jnp.concatenate([one[None], many])
