"""An Equinox MLP with dropout and a call counter, trained with optax."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b7lib.effects import dropout_key, losses, step_count
from b7lib.effects import train_mode as training

activation = fx.Ask[str]("activation", static=True, default="tanh")
hidden_sizes = fx.Ask[tuple[int, ...]]("hidden_sizes", static=True)
block_widths = fx.Ask[dict[str, int]]("block_widths", static=True)
label_noise = fx.Ask[jax.Array]("label_noise")
forward_calls = fx.State[jax.Array]("forward_calls")
running_loss = fx.State[float]("running_loss")

ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "gelu": jax.nn.gelu}


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(training, dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout_key.next_key(), 1 - self.rate, x.shape)
        return jnp.where(keep, x / (1 - self.rate), 0.0)


class MLP(eqx.Module):
    hidden: eqx.nn.Linear
    drop: Dropout
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(3, 16, key=k1)
        self.drop = Dropout(0.1)
        self.out = eqx.nn.Linear(16, 1, key=k2)

    @fx.uses(training, dropout_key, activation, forward_calls)
    def __call__(self, x: jax.Array) -> jax.Array:
        forward_calls.modify(lambda n: n + 1)
        act = ACTIVATIONS[activation.ask()]
        return self.out(self.drop(act(self.hidden(x))))[0]


class UncountedMLP(MLP):
    @fx.uses(training, dropout_key, activation)
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[activation.ask()]
        h = self.drop(act(self.hidden(x)))
        forward_calls.modify(lambda n: n + 1)  # E: effax-undeclared
        return self.out(h)[0]


optimizer = optax.adam(1e-2)
MODEL_ROW = (training, dropout_key, activation, forward_calls)


@fx.uses(*MODEL_ROW, losses, step_count)
def step(model: MLP, opt_state: optax.OptState, x: jax.Array, y: jax.Array) -> tuple[MLP, optax.OptState, jax.Array]:
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss_fn(p: MLP) -> jax.Array:
        m = eqx.combine(p, static)
        return jnp.mean((fx.vmap(m, keys="split")(x) - y) ** 2)

    loss, grads = fx.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    step_count.modify(lambda n: n + 1)
    losses.emit(loss)
    return eqx.apply_updates(model, updates), opt_state, loss


@fx.uses(*MODEL_ROW, step_count)
def step_unlogged(model: MLP, opt_state: optax.OptState, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = eqx.filter_value_and_grad(lambda m: jnp.mean((fx.vmap(m)(x) - y) ** 2))(model)
    losses.emit(jax.lax.stop_gradient(loss))  # E: effax-undeclared
    return loss


@fx.uses(label_noise, fx.rng)
def noisy_labels(y: jax.Array) -> jax.Array:
    return y + label_noise.ask() * fx.random.normal(y.shape)


model = MLP(jax.random.key(0))
opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
x = jax.random.normal(jax.random.key(1), (16, 3))
y = jnp.sin(x[:, 0]) + x[:, 1] * x[:, 2]
train_step = fx.handle(step, transform=eqx.filter_jit)
base_cells = (training.provide(True), dropout_key.seed(0), forward_calls.init(jnp.int32(0)))

# case: a few compiled steps under every handler
with fx.handlers(*base_cells, step_count.init(jnp.int32(0)), losses.collect()) as hs:
    for i in range(3):
        model, opt_state, loss = train_step(model, opt_state, x, y)

# case: compiled steps with no step counter
with fx.handlers(*base_cells, losses.collect()):
    train_step(model, opt_state, x, y)  # E: effax-unhandled

# case: an eager step with the dropout stream missing
with training.provide(True), forward_calls.init(jnp.int32(0)), step_count.init(jnp.int32(0)), losses.discard():
    step(model, opt_state, x, y)  # E: effax-unhandled

# case: an evaluation forward pass: dropout off by default, counter installed
with forward_calls.init(jnp.int32(0)), dropout_key.seed(1):
    pred = fx.vmap(model)(x)

# case: an evaluation forward pass with no counter
with dropout_key.seed(1):
    fx.vmap(model)(x)  # E: effax-unhandled

# case: a single example through the model, nothing installed
model(x[0])  # E: effax-unhandled

# case: a model subclass that narrows its row (a counter outside)
unc = UncountedMLP(jax.random.key(2))  # pyright: ignore[reportCallIssue]  # E: call-arg, arg-type
with forward_calls.init(jnp.int32(0)), dropout_key.seed(2):
    unc(x[0])

# case: a step that emits a loss its row omits (a collector outside)
with fx.handlers(*base_cells, step_count.init(jnp.int32(0)), losses.collect()):
    step_unlogged(model, opt_state, x, y)

# case: noisy labels under a provider and a seed
with label_noise.provide(jnp.float32(0.1)), fx.rng.seed(3):
    y_noisy = noisy_labels(y)
    y_noisy_jit = fx.handle(noisy_labels, label_noise.provide(jnp.float32(0.2)), transform=eqx.filter_jit)(y)

# case: noisy labels compiled by Equinox with the noise bound but no stream
fx.handle(noisy_labels, label_noise.provide(jnp.float32(0.2)), transform=eqx.filter_jit)(y)  # E: effax-unhandled

# case: noisy labels under jax.grad of a loss, nothing provided
jax.grad(lambda w: jnp.sum(noisy_labels(w * y)))(1.0)  # E: effax-unhandled

# case: an activation chosen by a hashable static name
with activation.provide("relu"), forward_calls.init(jnp.int32(0)):
    relu_pred = model(x[0])  # E: effax-unhandled

# case: hidden sizes given as a tuple to a static Ask
with hidden_sizes.provide(tuple([16, 16])):
    sizes = hidden_sizes.ask()

# case: block widths given as a dict to a static Ask
widths_h = block_widths.provide({"hidden": 16, "out": 1})  # E: effax-handler-type

# case: the running loss kept in a float, scanned
with running_loss.init(0.0) as rl:
    fx.scan(lambda c, v: (c, running_loss.modify(lambda r: 0.9 * r + 0.1 * v)), 0, jnp.arange(3.0))  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value

# case: the running loss started from an int, scanned
with running_loss.init(0) as rl:  # E: effax-handler-type
    fx.scan(lambda c, v: (c, running_loss.modify(lambda r: 0.9 * r + 0.1 * v)), 0, jnp.arange(3.0))  # pyright: ignore[reportArgumentType]  # E: arg-type, return-value


@fx.uses()
def evaluate(m: MLP, xs: jax.Array) -> jax.Array:
    with forward_calls.init(jnp.int32(0)), dropout_key.seed(0):
        return jnp.mean(fx.vmap(m)(xs))  # E: effax-undeclared


@fx.uses(training)
def evaluate_sloppy(m: MLP, xs: jax.Array) -> jax.Array:
    with dropout_key.seed(0):
        return jnp.mean(fx.vmap(m)(xs))  # E: effax-undeclared


# case: a pure evaluation entry point, also jitted by Equinox
score = evaluate(model, x)
score_jit = eqx.filter_jit(evaluate)(model, x)

# case: an evaluation whose row misses the counter its model needs (a counter outside)
with forward_calls.init(jnp.int32(0)):
    evaluate_sloppy(model, x)


@fx.uses(dropout_key)
def drop_only(h: jax.Array) -> jax.Array:
    return model.drop(h)  # E: effax-undeclared


# case: a submodule called through an attribute, its training flag outside the row
with training.provide(True), dropout_key.seed(0):
    drop_only(x[0])
