"""An Equinox MLP trained with optax; checkpoints via snapshot/restore; the shared training module."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax  # E: import-untyped

import effax as fx
from b9lib.effects import TRAIN_ROW, dropout, losses, lr, params, steps, training
from b9lib.training import init_params, loss_fn, sgd_step

calls = fx.State[jax.Array]("eqx_calls")
weight_decay = fx.Ask[jax.Array]("weight_decay")

xs = jax.random.normal(jax.random.key(1), (16, 3))
ys = jnp.sin(xs[:, :1])

# case: an Equinox dropout module reading the training flag


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(training, dropout)
    def __call__(self, v: jax.Array) -> jax.Array:
        if not training.ask():
            return v
        keep = jax.random.bernoulli(dropout.next_key(), 1 - self.rate, v.shape)
        return jnp.where(keep, v / (1 - self.rate), 0.0)


class MLP(eqx.Module):
    hidden: eqx.nn.Linear
    drop: Dropout
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(3, 8, key=k1)
        self.drop = Dropout(0.1)
        self.out = eqx.nn.Linear(8, 1, key=k2)

    @fx.uses(training, dropout, calls)
    def __call__(self, v: jax.Array) -> jax.Array:
        calls.modify(lambda n: n + 1)
        return self.out(self.drop(jnp.tanh(self.hidden(v))))


net = MLP(jax.random.key(0))
optimizer = optax.adam(1e-2)
opt_state = optimizer.init(eqx.filter(net, eqx.is_inexact_array))


@fx.uses(training, dropout, calls)
def eqx_step(model: MLP, state: optax.OptState, x: jax.Array, y: jax.Array) -> tuple[MLP, optax.OptState, jax.Array]:
    def batch_loss(m: MLP) -> jax.Array:
        return jnp.mean((fx.vmap(m, keys="split")(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(batch_loss)(model)
    updates, state = optimizer.update(grads, state)
    return eqx.apply_updates(model, updates), state, loss


train_step = fx.handle(eqx_step, transform=eqx.filter_jit)
with fx.handlers(training.provide(True), dropout.seed(0), calls.init(jnp.int32(0))) as eh:
    for _ in range(3):
        net, opt_state, loss = train_step(net, opt_state, xs, ys)

# case: the Equinox step without a call counter

with training.provide(True), dropout.seed(0):
    train_step(net, opt_state, xs, ys)  # E: effax-unhandled

# case: evaluation with filter_vmap of the module

with dropout.seed(0), calls.init(jnp.int32(0)):
    preds = fx.vmap(net, keys="split")(xs)

# case: a raw eqx.filter_vmap of the module at module level

eqx.filter_vmap(net)(xs)  # E: effax-unhandled

# case: regularised loss with a row missing the decay


@fx.uses(training, dropout, calls)
def reg_loss(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    fit_term = jnp.mean((fx.vmap(model)(x) - y) ** 2)
    leaves = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    return fit_term + weight_decay.ask() * sum(jnp.sum(w**2) for w in leaves)  # E: effax-undeclared


with fx.handlers(dropout.seed(0), calls.init(jnp.int32(0)), weight_decay.provide(jnp.float32(1e-3))):
    reg_loss(net, xs, ys)

# case: the shared training module's step


with fx.handlers(
    training.provide(True),
    dropout.seed(1),
    steps.init(jnp.int32(0)),
    params.init(init_params(3, 4)),
    lr.provide(jnp.float32(0.1)),
    losses.collect(),
) as run:
    for _ in range(3):
        fx.jit(sgd_step)(xs, ys)

# case: the shared step without a learning rate

with fx.handlers(training.provide(True), dropout.seed(1), steps.init(jnp.int32(0)), params.init(init_params(3, 4)), losses.collect()):
    sgd_step(xs, ys)  # E: effax-unhandled

# case: a wrapper declaring only the shared tuple


@fx.uses(*TRAIN_ROW)
def epoch_of_steps(n: int) -> None:
    for _ in range(n):
        sgd_step(xs, ys)  # E: effax-undeclared


with fx.handlers(training.provide(True), dropout.seed(1), steps.init(jnp.int32(0)), params.init(init_params(3, 4)), lr.provide(jnp.float32(0.1)), losses.collect()):
    epoch_of_steps(1)

# case: a wrapper whose row is the shared tuple plus the rest


@fx.uses(*TRAIN_ROW, params, lr, losses)
def epoch_ok(n: int) -> jax.Array:
    for _ in range(n):
        last = sgd_step(xs, ys)
    return last


with fx.handlers(training.provide(True), dropout.seed(2), steps.init(jnp.int32(0)), params.init(init_params(3, 4)), lr.provide(jnp.float32(0.1)), losses.collect()):
    epoch_ok(2)

# case: a wrapper with the wide shared tuple around an evaluation loss


@fx.uses(*TRAIN_ROW)
def eval_loss(p: dict[str, jax.Array]) -> jax.Array:
    return loss_fn(p, xs, ys)


with dropout.seed(0), steps.init(jnp.int32(0)):
    eval_loss(init_params(3, 4))

# case: the wide evaluation loss called with only the key stream

with dropout.seed(0):
    eval_loss(init_params(3, 4))  # E: effax-unhandled

# case: snapshot and restore a run


def fresh_run() -> fx.Handlers:
    return fx.handlers(
        training.provide(True),
        dropout.seed(0),
        steps.init(jnp.int32(0)),
        params.init(init_params(3, 4)),
        lr.provide(jnp.float32(0.1)),
        losses.collect(),
    )


first = fresh_run()
with first:
    for _ in range(2):
        sgd_step(xs, ys)
saved = fx.snapshot(first)
resumed = fresh_run()
fx.restore(saved, resumed)
with resumed:
    sgd_step(xs, ys)
uninterrupted = fresh_run()
with uninterrupted:
    for _ in range(3):
        sgd_step(xs, ys)
same = np.array_equal(resumed[params]["w"], uninterrupted[params]["w"])

# case: a run bundle made by a helper, then stepping outside it

run2 = fresh_run()
with run2:
    sgd_step(xs, ys)
sgd_step(xs, ys)  # E: effax-unhandled

# case: optax state carried in a State


opt_cell_state = fx.State[optax.OptState]("opt_state")
w_state = fx.State[jax.Array]("w_state")
sgd = optax.sgd(0.1)


@fx.uses(opt_cell_state, w_state)
def optax_update() -> jax.Array:
    g = jax.grad(lambda w: jnp.sum((xs @ w - ys[:, 0]) ** 2))(w_state.get())
    upd, new_state = sgd.update(g, opt_cell_state.get())
    opt_cell_state.set(new_state)
    w_state.set(optax.apply_updates(w_state.get(), upd))
    return w_state.get()


with fx.handlers(w_state.init(jnp.zeros(3)), opt_cell_state.init(sgd.init(jnp.zeros(3)))) as oh:
    fx.jit(optax_update)()
    fx.jit(optax_update)()

# case: optax update with its optimiser state missing

with w_state.init(jnp.zeros(3)):
    fx.jit(optax_update)()  # E: effax-unhandled

# case: value_and_grad wrapper with steps through the grad


@fx.uses(steps)
def counted_loss(w: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return jnp.sum((xs @ w) ** 2)


with steps.init(jnp.int32(0)) as stc:
    v, g = fx.value_and_grad(counted_loss)(jnp.ones(3))

# case: JAX value_and_grad of the counted loss in a row without steps


@fx.uses()
def loss_and_grad(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    return jax.value_and_grad(counted_loss)(w)  # E: effax-undeclared


with steps.init(jnp.int32(0)):
    loss_and_grad(jnp.ones(3))
