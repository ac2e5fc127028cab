"""Equinox modules trained with optax: dropout keys and the training flag come from
effects, forward passes are counted in a State, weight decay is provided by the
caller, the step is compiled with eqx.filter_jit through fx.handle."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b8lib.effects import dropout, learning_rate, losses, training
from b8lib.train import regression_data

eqx_calls = fx.State[jax.Array]("eqx_calls")
weight_decay = fx.Ask[jax.Array]("weight_decay")
hidden_sizes = fx.Ask[list[int]]("hidden_sizes", static=True)

X, Y = regression_data(32, 3)
Y1 = Y[:, 0]


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(training, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout.next_key(), 1 - self.rate, x.shape)
        return jnp.where(keep, x / (1 - self.rate), 0.0)


class MLP(eqx.Module):
    hidden: eqx.nn.Linear
    dropout: Dropout
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(3, 16, key=k1)
        self.dropout = Dropout(0.1)
        self.out = eqx.nn.Linear(16, 1, key=k2)

    @fx.uses(training, dropout, eqx_calls)  # pyright: ignore[reportUnboundVariable]  # E: arg-type
    def __call__(self, x: jax.Array) -> jax.Array:
        eqx_calls.modify(lambda n: n + 1)
        return self.out(self.dropout(jnp.tanh(self.hidden(x))))[0]


model = MLP(jax.random.key(0))
optimizer = optax.adam(1e-2)


# case: one forward pass per example with effax.vmap, keys split per example
with fx.handlers(training.provide(True), dropout.seed(0), eqx_calls.init(jnp.int32(0))) as hs:
    preds = fx.vmap(model, keys="split")(X)
print("preds", preds.shape, "calls", int(hs[eqx_calls]))


# case: the optax train step compiled with eqx.filter_jit
@fx.uses(training, dropout, eqx_calls)
def step(m: MLP, opt_state: optax.OptState, x: jax.Array, y: jax.Array) -> tuple[MLP, optax.OptState, jax.Array]:
    def loss_fn(mm: MLP) -> jax.Array:
        return jnp.mean((fx.vmap(mm, keys="split")(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(m)
    updates, opt_state = optimizer.update(grads, opt_state)
    return eqx.apply_updates(m, updates), opt_state, loss


train_step = fx.handle(step, transform=eqx.filter_jit)
opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
with fx.handlers(training.provide(True), dropout.seed(1), eqx_calls.init(jnp.int32(0))) as hs:
    for i in range(5):
        model, opt_state, loss = train_step(model, opt_state, X, Y1)
print("loss", float(loss), "forward passes", int(hs[eqx_calls]), "keys", hs[dropout].counter)


# case: a wider model whose call counts passes but whose row does not name the counter
class WideMLP(eqx.Module):
    layers: tuple[eqx.nn.Linear, ...]

    def __init__(self, key: jax.Array) -> None:
        keys = jax.random.split(key, 2)
        self.layers = (eqx.nn.Linear(3, 32, key=keys[0]), eqx.nn.Linear(32, 1, key=keys[1]))

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        eqx_calls.modify(lambda n: n + 1)  # E: effax-undeclared
        return self.layers[1](jnp.tanh(self.layers[0](x)))[0]


wide = WideMLP(jax.random.key(1))
with eqx_calls.init(jnp.int32(0)):
    wide(X[0])


# case: a model that calls its dropout submodule but leaves the key stream out of its row
class LeakyMLP(eqx.Module):
    hidden: eqx.nn.Linear
    dropout: Dropout

    def __init__(self, key: jax.Array) -> None:
        self.hidden = eqx.nn.Linear(3, 8, key=key)
        self.dropout = Dropout(0.5)

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.sum(self.dropout(self.hidden(x)))  # E: effax-undeclared


leaky = LeakyMLP(jax.random.key(2))
with training.provide(True), dropout.seed(2):
    leaky(X[0])


# case: eqx.filter_vmap of the model at module level, evaluation mode but no counter
with training.provide(False):
    preds_eval = eqx.filter_vmap(model)(X)  # E: effax-unhandled


# case: eqx.filter_vmap in evaluation mode with the counter installed
with eqx_calls.init(jnp.int32(0)) as counted:
    preds_eval = eqx.filter_vmap(model)(X)
print("evaluation passes", int(counted.value))


# case: weight decay asked inside a loss differentiated over the partitioned arrays
@fx.uses(training, dropout, eqx_calls, weight_decay)
def regularised_loss(params: MLP, static: MLP) -> jax.Array:
    m = eqx.combine(params, static)
    fit = jnp.mean((fx.vmap(m, keys="split")(X) - Y1) ** 2)
    leaves = jax.tree.leaves(eqx.filter(params, eqx.is_inexact_array))
    return fit + weight_decay.ask() * sum(jnp.sum(p**2) for p in leaves)


params, static = eqx.partition(model, eqx.is_inexact_array)
with fx.handlers(training.provide(True), dropout.seed(3), eqx_calls.init(jnp.int32(0)), weight_decay.provide(jnp.float32(1e-3))):
    value, g = fx.value_and_grad(regularised_loss)(params, static)
print("regularised", float(value))


# case: a penalty that asks for the weight decay outside its row
@fx.uses(eqx_calls)
def penalty(params: MLP) -> jax.Array:
    leaves = jax.tree.leaves(eqx.filter(params, eqx.is_inexact_array))
    return weight_decay.ask() * sum(jnp.sum(p**2) for p in leaves)  # E: effax-undeclared


with weight_decay.provide(jnp.float32(1e-3)), eqx_calls.init(jnp.int32(0)):
    penalty(params)


# case: jax.value_and_grad of the loss at module level, the decay not provided
with fx.handlers(training.provide(False), dropout.seed(4), eqx_calls.init(jnp.int32(0))):
    v_bad, g_bad = jax.value_and_grad(regularised_loss)(params, static)  # E: effax-unhandled


# case: a running-mean layer keeps its State in an attribute, which the plugin does not track
class RunningMean(eqx.Module):
    stat: fx.State[jax.Array] = eqx.field(static=True)

    def __init__(self, name: str) -> None:
        self.stat = fx.State[jax.Array](f"{name}.mean")

    def __call__(self, x: jax.Array) -> jax.Array:
        self.stat.modify(lambda m: 0.9 * m + 0.1 * jnp.mean(x, axis=0))
        return x - self.stat.get()


norm = RunningMean("input")
with norm.stat.init(jnp.zeros(3)):
    centred = norm(X)
centred_bare = norm(X)  # limit: effects held in class attributes are not tracked


# case: a static list of hidden sizes
with hidden_sizes.provide([32, 32]):  # E: effax-handler-type
    print(hidden_sizes.ask())


# case: an evaluation helper compiles the step but its row lacks the counter
@fx.uses(training, dropout)
def one_more_step(m: MLP, s: optax.OptState) -> jax.Array:
    _, _, loss = fx.jit(step)(m, s, X, Y1)  # E: effax-undeclared
    return loss


with fx.handlers(training.provide(True), dropout.seed(5), eqx_calls.init(jnp.int32(0))):
    one_more_step(model, opt_state)


# case: a rematerialised forward under fx.checkpoint, with its handlers
with fx.handlers(dropout.seed(6), eqx_calls.init(jnp.int32(0))):
    y0 = fx.checkpoint(model)(X[0])


# case: fx.grad of the loss at module level without the key stream
with fx.handlers(training.provide(True), eqx_calls.init(jnp.int32(0)), weight_decay.provide(jnp.float32(0.0))):
    g2 = fx.grad(regularised_loss)(params, static)  # E: effax-unhandled


# case: a learning-rate schedule reading the shared default, logging into losses
@fx.uses(learning_rate, losses)
def scheduled_lr(step_index: int) -> float:
    lr = learning_rate.ask() * 0.5 ** (step_index // 10)
    losses.emit(jnp.float32(lr))
    return lr


with losses.collect() as lr_log:
    lrs = [scheduled_lr(i) for i in (0, 10, 20)]
print("lrs", lrs, len(lr_log.values))
