"""Equinox modules with effects, trained with optax under `eqx.filter_jit`."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b6lib.effects import losses, noise, running_loss, temperature
from b6lib.layers import NoisyLinear, Scaled

KEY = jax.random.key(0)
X = jax.random.normal(KEY, (8, 3))
Y = jnp.sin(X[:, :1])
training = fx.Ask[bool]("training", static=True)
calls = fx.State[jax.Array]("calls")
centre = fx.Ask[jax.Array]("centre", static=True)


class MLP(eqx.Module):
    hidden: NoisyLinear
    out: eqx.nn.Linear

    def __init__(self, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = NoisyLinear(3, 16, 0.05, key=k1)
        self.out = eqx.nn.Linear(16, 1, key=k2)

    @fx.uses(noise, training, calls)
    def __call__(self, x: jax.Array) -> jax.Array:
        calls.modify(lambda n: n + 1)
        h = jnp.tanh(self.hidden(x)) if training.ask() else jnp.tanh(self.hidden.linear(x))
        return self.out(h)


MODEL = MLP(KEY)
HANDLERS = (noise.seed(0), training.provide(True), calls.init(jnp.int32(0)))

# case: one example through the model under every handler it needs
with fx.handlers(*HANDLERS):
    y0 = MODEL(X[0])
with fx.handlers(noise.seed(0), training.provide(False), calls.init(jnp.int32(0))):
    y_eval = fx.vmap(MODEL)(X)

# case: the model called at module level with the counter forgotten
with noise.seed(0), training.provide(True):
    y_bad = MODEL(X[0])  # E: effax-unhandled
y_bad_vmap = fx.vmap(MODEL, keys="split")(X)  # E: effax-unhandled


# case: a wrapper module whose row holds what its submodule performs
class Wrapper(eqx.Module):
    inner: NoisyLinear

    @fx.uses(noise, temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.inner(x) / temperature.ask()


wrapped = Wrapper(NoisyLinear(3, 2, 0.1, key=KEY))
with noise.seed(1), temperature.provide(jnp.float32(2.0)):
    w_out = wrapped(X[0])
    s_out = Scaled(NoisyLinear(3, 2, 0.1, key=KEY))(X[0])


# case: a wrapper module whose row leaves out its submodule's noise stream
class Rescaled(eqx.Module):
    inner: NoisyLinear

    @fx.uses(temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.inner(x) * temperature.ask()  # E: effax-undeclared


with noise.seed(1), temperature.provide(jnp.float32(2.0)):
    r_out = Rescaled(NoisyLinear(3, 2, 0.1, key=KEY))(X[0])


# case: a subclass calling its parent's __call__ through super()
class Tempered(Scaled):
    @fx.uses(noise, temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x) * 2.0


with noise.seed(2), temperature.provide(jnp.float32(1.0)):
    tempered = Tempered(NoisyLinear(3, 2, 0.1, key=KEY))(X[0])


# case: the parent's row reached through super() from a narrower row
class TemperedNarrow(Scaled):
    @fx.uses(temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x) * 2.0  # E: effax-undeclared


with noise.seed(2), temperature.provide(jnp.float32(1.0)):
    tempered_bad = TemperedNarrow(NoisyLinear(3, 2, 0.1, key=KEY))(X[0])

# case: a training step compiled by eqx.filter_jit through fx.handle
optimizer = optax.adam(1e-2)


@fx.uses(noise, training, calls, losses)
def step(model: MLP, opt_state: optax.OptState, x: jax.Array, y: jax.Array) -> tuple[MLP, optax.OptState, jax.Array]:
    def loss_fn(m: MLP) -> jax.Array:
        return jnp.mean((fx.vmap(m, keys="split")(x) - y) ** 2)

    loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
    updates, opt_state = optimizer.update(grads, opt_state)
    losses.emit(jax.lax.stop_gradient(loss))
    return eqx.apply_updates(model, updates), opt_state, loss


train_step = fx.handle(step, transform=eqx.filter_jit)
model, opt_state = MODEL, optimizer.init(eqx.filter(MODEL, eqx.is_inexact_array))
with fx.handlers(*HANDLERS, losses.collect()) as train_hs:
    for _ in range(3):
        model, opt_state, loss = train_step(model, opt_state, X, Y)

# case: the compiled step without a collector for the losses
with fx.handlers(noise.seed(0), training.provide(True), calls.init(jnp.int32(0))):
    model, opt_state, loss = train_step(model, opt_state, X, Y)  # E: effax-unhandled

# case: the step called eagerly, the training flag left to a forgotten provider
with noise.seed(0), calls.init(jnp.int32(0)), losses.collect():
    eager_result = step(MODEL, opt_state, X, Y)  # E: effax-unhandled


# case: JAX's own grad of a function with a row, kept in a variable
@fx.uses(temperature)
def energy(w: jax.Array) -> jax.Array:
    return jnp.sum(w**2) / temperature.ask()


grad_energy = jax.grad(energy)
with temperature.provide(jnp.float32(2.0)):
    g = grad_energy(jnp.ones(3))
    vg = jax.value_and_grad(energy)(jnp.ones(3))

# case: the kept gradient called with nothing installed
g_bad = grad_energy(jnp.ones(3))  # E: effax-unhandled
hess_bad = jax.hessian(energy)(jnp.ones(2))  # E: effax-unhandled


# case: JAX's value_and_grad of it inside a function whose row is empty
@fx.uses()
def energy_report(w: jax.Array) -> jax.Array:
    value, grad = jax.value_and_grad(energy)(w)  # E: effax-undeclared
    return value + jnp.sum(grad)  # E: no-any-return


with temperature.provide(jnp.float32(2.0)):
    reported = energy_report(jnp.ones(3))

# case: a State[float] started from a float, updated under eqx.filter_jit
with running_loss.init(1.0):
    fx.handle(lambda v: running_loss.modify(lambda r: 0.5 * r + v), transform=eqx.filter_jit)(0.25)

# case: the same State started from an int
with running_loss.init(1):  # E: effax-handler-type
    fx.handle(lambda v: running_loss.modify(lambda r: 0.5 * r + v), transform=eqx.filter_jit)(0.25)

# case: a static Ask of an array: arrays are unhashable
centre_bad = centre.provide(jnp.zeros(3))  # E: effax-handler-type
