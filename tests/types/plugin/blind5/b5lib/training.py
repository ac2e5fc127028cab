"""A small training library: an optax step with effects, and a loss with a row."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax  # E: import-untyped

import effax as fx
from b5lib.effects import dropout as dkey
from b5lib.effects import learning_rate as lr_eff
from b5lib.effects import losses as loss_out
from b5lib.effects import steps as global_step

Params = dict[str, jax.Array]
params_state = fx.State[Params]("params")
opt_state_eff = fx.State[optax.OptState]("opt_state")
OPTIMIZER = optax.sgd(0.1)


@fx.uses(dkey)
def predict(p: Params, x: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(dkey.next_key(), 0.95, x.shape)
    return jnp.where(keep, x, 0.0) @ p["w"] + p["b"]


@fx.uses(dkey)
def mse(p: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((predict(p, x) - y) ** 2)


@fx.uses(dkey, params_state, opt_state_eff, global_step, loss_out)
def train_step(x: jax.Array, y: jax.Array) -> jax.Array:
    p = params_state.get()
    loss, grads = jax.value_and_grad(mse)(p, x, y)
    updates, new_opt = OPTIMIZER.update(grads, opt_state_eff.get(), p)
    params_state.set(optax.apply_updates(p, updates))
    opt_state_eff.set(new_opt)
    global_step.modify(lambda n: n + 1)
    loss_out.emit(loss)
    return loss  # E: no-any-return


@fx.uses(lr_eff, params_state)
def decay(factor: float) -> None:
    params_state.modify(lambda p: {k: v * (1 - factor * lr_eff.ask()) for k, v in p.items()})


def init_params(n_in: int) -> Params:
    return {"w": jnp.zeros((n_in, 1)), "b": jnp.zeros((1,))}
