"""An Equinox MLP regressor trained with optax, its model and optimiser state held in effax State cells."""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b10lib.effects import dropout, losses, training
from b10lib.layers import drop


class MLP(eqx.Module):
    l1: eqx.nn.Linear
    l2: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.l1 = eqx.nn.Linear(3, 8, key=k1)
        self.l2 = eqx.nn.Linear(8, 1, key=k2)

    @fx.uses(training, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(drop(jax.nn.relu(self.l1(x)), 0.2))[0]


@dataclasses.dataclass(frozen=True)
class Config:
    widths: Any
    lr: float = 1e-2


model_state = fx.State[MLP]("model_state")
opt_state = fx.State[Any]("opt_state")
run_name = fx.Ask[str]("run_name")
config = fx.Ask[Config]("config", static=True)
grad_norm = fx.Emit[jax.Array]("grad_norm")

OPT = optax.adam(1e-2)
MODEL0 = MLP(jax.random.key(0))
XS = jnp.linspace(-1.0, 1.0, 24).reshape(8, 3)
YS = jnp.sin(XS.sum(axis=1))


@fx.uses(training, dropout)
def batch_loss(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    pred = fx.vmap(model)(x)
    return jnp.mean((pred - y) ** 2)


@fx.uses(model_state, opt_state, training, dropout, losses, grad_norm)
def train_step(x: jax.Array, y: jax.Array) -> jax.Array:
    model = model_state.get()
    with training.provide(True):
        value, grads = eqx.filter_value_and_grad(batch_loss)(model, x, y)
    updates, new_opt = OPT.update(grads, opt_state.get(), model)
    model_state.set(eqx.apply_updates(model, updates))
    opt_state.set(new_opt)
    grad_norm.emit(optax.global_norm(grads))
    losses.emit(value)
    return value


def run_handlers() -> tuple[fx.Handler[Any], ...]:
    return (
        model_state.init(MODEL0),
        opt_state.init(OPT.init(eqx.filter(MODEL0, eqx.is_array))),
        dropout.seed(0),
        losses.collect(),
        grad_norm.collect(),
    )


# case: three eager steps, then three steps compiled with eqx.filter_jit
cells = run_handlers()
with fx.handlers(*cells) as hs:
    for _ in range(3):
        train_step(XS, YS)
    fast = fx.handle(train_step, transform=eqx.filter_jit)
    for _ in range(3):
        fast(XS, YS)
print(len(hs[losses]), hs[dropout].counter)

# case: a training step with no gradient-norm collector
with fx.handlers(model_state.init(MODEL0), opt_state.init(OPT.init(eqx.filter(MODEL0, eqx.is_array))), dropout.seed(0), losses.collect()):
    train_step(XS, YS)  # E: effax-unhandled

# case: the model evaluated at module level: the training flag stays off, so dropout needs its stream all the same
with dropout.seed(0):
    print(MODEL0(XS[0]))

# case: the model evaluated in training mode with no dropout stream
with training.provide(True):
    MODEL0(XS[0])  # E: effax-unhandled

# case: Equinox's filter_vmap of the model in training mode, stream missing
with training.provide(True):
    eqx.filter_vmap(MODEL0)(XS)  # E: effax-unhandled

# case: Equinox's filter_vmap of the model under its stream (evaluation)
with dropout.seed(1):
    print(eqx.filter_vmap(MODEL0)(XS).shape)


# case: a step whose row forgets the loss emit
@fx.uses(model_state, opt_state, training, dropout, grad_norm)
def quiet_step(x: jax.Array, y: jax.Array) -> None:
    model = model_state.get()
    value, grads = eqx.filter_value_and_grad(batch_loss)(model, x, y)
    updates, new_opt = OPT.update(grads, opt_state.get(), model)
    model_state.set(eqx.apply_updates(model, updates))
    opt_state.set(new_opt)
    losses.emit(value)  # E: effax-undeclared


with fx.handlers(*run_handlers()):
    quiet_step(XS, YS)


# case: a traced str Ask read only eagerly, to tag a run
@fx.uses(run_name, losses)
def tag_losses() -> str:
    losses.emit(jnp.float32(0))
    return f"run {run_name.ask()}"


with run_name.provide("baseline"), losses.collect():
    print(tag_losses())


# case: the same str Ask read inside a compiled call
@fx.uses(run_name, training, dropout)
def named_loss(x: jax.Array, y: jax.Array) -> jax.Array:
    print("tracing", run_name.ask())
    return batch_loss(MODEL0, x, y)


with run_name.provide("baseline"), dropout.seed(0):
    fx.jit(named_loss)(XS, YS)  # E: effax-handler-type

# case: the str given to a handled function compiled by JAX, kept and called later
with dropout.seed(0):
    named_fast = fx.handle(named_loss, run_name.provide("sweep-3"), transform=jax.jit)  # E: effax-handler-type
    named_fast(XS, YS)


# case: a static config holding a list, hashed into the cache key
@fx.uses(config)
def lr_of() -> float:
    return config.ask().lr * len(config.ask().widths)


with config.provide(Config([8, 8])):  # E: effax-handler-type
    fx.jit(lr_of)()

# case: a static config holding a tuple
with config.provide(Config((8, 8))):
    print(fx.jit(lr_of)())

# case: a model state cell read by a compiled predictor
predict = fx.jit(fx.uses(model_state, training, dropout)(lambda x: fx.vmap(model_state.get())(x)))
with model_state.init(MODEL0), dropout.seed(2):
    print(predict(XS).shape)

# case: the compiled predictor with no model state
with dropout.seed(2):
    predict(XS)  # E: effax-unhandled


# case: a grad-norm clipper as an interceptor that forwards to a collector
@fx.uses(grad_norm)
def emit_norm(v: jax.Array) -> None:
    grad_norm.emit(v)


clip = fx.intercept(grad_norm, emit=lambda outer, v: outer.emit(jnp.minimum(v, 1.0)))
with grad_norm.collect() as gn, clip:
    emit_norm(jnp.float32(3.0))
print(gn.values)

# case: the clipper with no collector outside it
with clip:
    emit_norm(jnp.float32(3.0))  # E: effax-unhandled

# case: an interceptor that drops norms by itself needs no collector
with fx.intercept(grad_norm, emit=lambda outer, v: None):
    emit_norm(jnp.float32(3.0))

# case: a loss evaluated through JAX's checkpoint, under its stream
with dropout.seed(3):
    print(jax.checkpoint(batch_loss)(MODEL0, XS, YS))


# case: a gradient through the model from a row that omits the dropout stream
@fx.uses(training)
def input_saliency(x: jax.Array) -> jax.Array:
    return jax.grad(lambda u: MODEL0(u))(x)  # E: effax-undeclared, no-any-return


with training.provide(True), dropout.seed(0):
    input_saliency(XS[0])

# case: a tracker built by its classmethod and copied through type(self), under its state
from b10lib.metrics import Tracker, history  # noqa: E402

with history.init(jnp.float32(1)) as hc:
    tr = Tracker.fresh()
    tr.last = jnp.float32(4)
    tr2 = tr.copy()
print(hc.value, type(tr2).__name__)

# case: the tracker's classmethod constructor at module level, nothing installed
Tracker.fresh()  # E: effax-unhandled

# case: the tracker's copy from a step whose row omits the history
@fx.uses(model_state)
def snapshot_model(t: Tracker) -> Tracker:
    return t.copy()  # E: effax-undeclared


with model_state.init(MODEL0), history.init(jnp.float32(0)):
    snapshot_model(tr)

# case: an optimiser learning-rate scale as a float state started from an int, updated compiled
lr_scale = fx.State[float]("lr_scale")
with dropout.seed(0):
    decay_fast = fx.handle(fx.uses(lr_scale)(lambda: lr_scale.modify(lambda v: v * 0.5)), lr_scale.init(1), transform=jax.jit)  # E: effax-handler-type
    decay_fast()

# case: the same scale started from a float
decay_ok = fx.handle(fx.uses(lr_scale)(lambda: lr_scale.modify(lambda v: v * 0.5)), lr_scale.init(1.0), transform=jax.jit)
decay_ok()
