"""Equinox and Flax NNX layers that perform effects."""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax  # type: ignore[import-untyped]
from flax import nnx

import effax as fx
from fxlib import dropout, losses, steps, temperature
from fxlib.ops import scaled

training = fx.Ask[bool]("training", static=True)

# case: an Equinox dropout module with its row on __call__
class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    @fx.uses(training, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout.next_key(), 1 - self.rate, x.shape)
        return jnp.where(keep, x / (1 - self.rate), 0.0)

# case: an MLP whose __call__ calls its dropout submodule
class MLP(eqx.Module):
    hidden: eqx.nn.Linear
    drop: Dropout
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(3, 8, key=k1)
        self.drop = Dropout(0.1)
        self.out = eqx.nn.Linear(8, 1, key=k2)

    @fx.uses(steps, training, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        steps.modify(lambda n: n + 1)
        return self.out(self.drop(jnp.tanh(self.hidden(x))))[0]

# case: a residual block whose row forgets the dropout submodule's key stream
class Residual(eqx.Module):
    inner: eqx.nn.Linear
    drop: Dropout

    def __init__(self, key: jax.Array) -> None:
        self.inner = eqx.nn.Linear(3, 3, key=key)
        self.drop = Dropout(0.5)

    @fx.uses(training)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.drop(self.inner(x))  # E: effax-undeclared

optimizer = optax.adam(1e-2)
XS = jax.random.normal(jax.random.key(1), (8, 3))
YS = jnp.sin(XS[:, 0])

# case: an Equinox step with fx.vmap and eqx.filter_value_and_grad, row declared
@fx.uses(steps, training, dropout)
def eqx_step(model: MLP, opt_state: optax.OptState) -> tuple[MLP, optax.OptState, jax.Array]:
    def loss_fn(m: MLP) -> jax.Array:
        return jnp.mean((fx.vmap(m, keys="split")(XS) - YS) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = optimizer.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state, loss

eqx_train = fx.handle(eqx_step, transform=eqx.filter_jit)

# case: an eval function that calls the model but declares only training
@fx.uses(training)
def eqx_eval(model: MLP) -> jax.Array:
    return jnp.mean((jax.vmap(lambda x: model(x))(XS) - YS) ** 2)  # E: effax-undeclared

# case: evaluation with the model called inside its own handlers
@fx.uses()
def eqx_eval_pure(model: MLP) -> jax.Array:
    with fx.handlers(training.provide(False), steps.init(jnp.int32(0)), dropout.seed(0)):
        return model(XS[0])

# case: module-level Equinox training under every handler
eqx_model = MLP(jax.random.key(0))
eqx_opt = optimizer.init(eqx.filter(eqx_model, eqx.is_inexact_array))
with fx.handlers(training.provide(True), dropout.seed(0), steps.init(jnp.int32(0))) as eqx_hs:
    for _ in range(3):
        eqx_model, eqx_opt, eqx_loss = eqx_train(eqx_model, eqx_opt)
print("eqx", float(eqx_loss), int(eqx_hs[steps]))

# case: the handled Equinox step called with the flag but no key stream or counter
with training.provide(True):
    eqx_model, eqx_opt, eqx_loss = eqx_train(eqx_model, eqx_opt)  # E: effax-unhandled

# case: calling the Equinox model at module level with no handlers
first_pred = eqx_model(XS[0])  # E: effax-unhandled

# case: a residual block run under training and dropout handlers
with fx.handlers(training.provide(True), dropout.seed(2)):
    res_out = Residual(jax.random.key(3))(XS[0])

# case: an NNX module asking the flag and drawing dropout keys
class NNXNet(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(3, 8, rngs=rngs)
        self.dropout = nnx.Dropout(0.2)
        self.l2 = nnx.Linear(8, 1, rngs=rngs)

    @fx.uses(training, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.relu(self.l1(x))
        if training.ask():
            h = self.dropout(h, deterministic=False, rngs=dropout.next_key())
        return self.l2(h)[:, 0]

# case: an NNX step with nnx.value_and_grad and an emitted loss
@fx.uses(training, dropout, losses)
def nnx_step(model: NNXNet, opt: nnx.Optimizer[NNXNet]) -> None:
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(XS) - YS) ** 2))(model)
    opt.update(model, grads)
    losses.emit(loss)

nnx_train = fx.handle(nnx_step, transform=nnx.jit)

# case: an NNX step that scales its input but does not declare temperature
@fx.uses(training, dropout)
def nnx_scaled_step(model: NNXNet) -> jax.Array:
    return model(scaled(XS))  # E: effax-undeclared

# case: module-level NNX training loop under its handlers
nnx_model = NNXNet(nnx.Rngs(0))
nnx_opt = nnx.Optimizer(nnx_model, optax.adamw(1e-3), wrt=nnx.Param)
with fx.handlers(training.provide(True), dropout.seed(0), losses.collect()) as nnx_hs:
    for _ in range(2):
        nnx_train(nnx_model, nnx_opt)
print("nnx losses", [round(float(v), 3) for v in nnx_hs[losses]])

# case: the NNX step collected into a collector that closed already
with fx.handlers(training.provide(False), dropout.seed(0)):
    nnx_train(nnx_model, nnx_opt)  # E: effax-unhandled

# case: module level: layers called directly with no handlers
nnx_model(XS)  # E: effax-unhandled
Dropout(0.5)(XS)  # E: effax-unhandled
MLP(jax.random.key(4))(XS[0])  # E: effax-unhandled

if __name__ == "__main__":
    # case: main block drives the layer cases
    with fx.handlers(training.provide(True), dropout.seed(0), temperature.provide(jnp.float32(1.0))): nnx_scaled_step(nnx_model)
    with fx.handlers(training.provide(False), steps.init(jnp.int32(0)), dropout.seed(0)): eqx_eval(eqx_model)
    print(eqx_eval_pure(eqx_model))
