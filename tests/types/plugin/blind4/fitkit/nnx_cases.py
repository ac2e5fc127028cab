"""effax.nnx twins with Flax NNX modules, checked against rows."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx
import effax.nnx as fxn
from optics.effects import acts, losses, lr, noise, step_count
from fitkit.models import Block, Ensemble, Member, Stack, block_row

x = jnp.ones((5, 4))
stack = Stack(4, 3, rngs=nnx.Rngs(0))
block = Block(4, rngs=nnx.Rngs(1))
ensemble = Ensemble(3, rngs=nnx.Rngs(2))
everything: list[fx.Handler[Any]] = [
    noise.seed(0),
    step_count.init(jnp.int32(0)),
    losses.collect(),
    acts.record(),
]


def loss_fn(model: Stack, v: jax.Array) -> jax.Array:
    return jnp.mean(model(v) ** 2)


@fx.uses(*block_row)
def row_loss(model: Stack, v: jax.Array) -> jax.Array:
    return jnp.mean(model(v) ** 2)


# case: the stacked model under every handler, compiled with nnx.jit through fx.handle
forward = fx.handle(lambda m, v: m(v), transform=nnx.jit)
with fx.handlers(*everything) as hs:
    forward(stack, x)
print(hs[step_count], hs[noise].counter)

# case: the stacked model called at module level with a handler missing
with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.discard()):
    stack(x)  # E: effax-unhandled

# case: effax.nnx.value_and_grad of a row function, at module level, handled
with fx.handlers(noise.seed(1), step_count.init(jnp.int32(0)), losses.collect(), acts.gradients()) as hs2:
    loss, grads = fxn.value_and_grad(row_loss)(stack, x)
print(float(loss))

# case: effax.nnx.grad of a row function at module level, taps unhandled
with fx.handlers(noise.seed(1), step_count.init(jnp.int32(0)), losses.collect()):
    fxn.grad(row_loss)(stack, x)  # E: effax-unhandled

# case: a train step with a row that lacks the tap
@fx.uses(noise, step_count, losses, lr)
def train_step(model: Stack, v: jax.Array) -> jax.Array:
    loss, grads = fxn.value_and_grad(row_loss)(model, v)  # E: effax-undeclared
    return loss * lr.ask()  # E: no-any-return


with fx.handlers(*everything, lr.provide(jnp.float32(0.1))):
    train_step(stack, x)

# case: a train step that handles the tap inside
@fx.uses(noise, step_count, losses, lr)
def train_step_ok(model: Stack, v: jax.Array) -> jax.Array:
    with acts.ignore():
        loss, grads = fxn.value_and_grad(row_loss)(model, v)
    return loss * lr.ask()  # E: no-any-return


with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.collect(), lr.provide(jnp.float32(0.1))):
    train_step_ok(stack, x)

# case: an ensemble through effax.nnx.vmap in a function whose row holds the stream
@fx.uses(noise)
def predict(model: Ensemble, v: jax.Array) -> jax.Array:
    return model(v).mean(axis=0)


with noise.seed(2):
    predict(ensemble, x)

# case: effax.nnx.vmap with a lambda body in a row lacking the stream
@fx.uses(lr)
def predict_bad(members: Member, v: jax.Array) -> jax.Array:
    return fxn.vmap(lambda m, u: m(u), in_axes=(0, None))(members, v) * lr.ask()  # E: effax-undeclared, no-any-return


with noise.seed(2), lr.provide(jnp.float32(1.0)):
    predict_bad(ensemble.members, x)

# case: effax.nnx.fori_loop with a block, at module level, handled
with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.collect(), acts.ignore()) as hs3:
    fxn.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (block, x))
print(hs3[step_count])

# case: effax.nnx.fori_loop at module level with the state unhandled
with fx.handlers(noise.seed(0), losses.collect(), acts.ignore()):
    fxn.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (block, x))  # E: effax-unhandled

# case: effax.nnx.cond choosing between a block and the identity, in a row lacking emits
@fx.uses(noise, step_count, acts)
def maybe_block(m: Block, v: jax.Array, go: jax.Array) -> jax.Array:
    out: jax.Array = fxn.cond(go, lambda mm, u: mm(u), lambda mm, u: u, m, v)  # E: effax-undeclared
    return out


with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.collect(), acts.ignore()):
    maybe_block(block, x, jnp.bool_(True))

# case: effax.nnx.switch inside a full row
@fx.uses(*block_row)
def switch_block(m: Block, v: jax.Array, i: jax.Array) -> jax.Array:
    out: jax.Array = fxn.switch(i, [lambda mm, u: mm(u), lambda mm, u: mm(-u)], m, v)
    return out


with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.collect(), acts.ignore()):
    switch_block(block, x, jnp.int32(0))

# case: effax.nnx.while_loop counting steps in a row without the state
@fx.uses(lr)
def count_up(limit: int) -> jax.Array:
    def body(c: jax.Array) -> jax.Array:
        step_count.modify(lambda n: n + 1)
        return c + lr.ask()

    out: jax.Array = fxn.while_loop(lambda c: c < limit, body, jnp.float32(0))  # E: effax-undeclared
    return out


with lr.provide(jnp.float32(1.0)), step_count.init(jnp.int32(0)):
    count_up(3)

# case: effax.nnx.remat of a block call inside a full row
@fx.uses(*block_row)
def remat_block(m: Block, v: jax.Array) -> jax.Array:
    out: jax.Array = fxn.remat(lambda mm, u: mm(u))(m, v)
    return out


with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.collect(), acts.ignore()):
    remat_block(block, x)

# case: effax.nnx.remat of a block method at module level without the stream
with fx.handlers(step_count.init(jnp.int32(0)), losses.collect(), acts.ignore()):
    fxn.remat(lambda mm, u: mm(u))(block, x)  # E: effax-unhandled

# case: effax.nnx.scan over the stacked blocks inside a pure entry point
@fx.uses()
def stack_entry(model: Stack, v: jax.Array) -> jax.Array:
    with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.discard(), acts.ignore()):
        return model(v)


stack_entry(stack, x)

# case: a raw nnx.jit around a row function, handlers outside
@nnx.jit
def raw_compiled(model: Stack, v: jax.Array) -> jax.Array:
    return model(v)


with fx.handlers(noise.seed(0), step_count.init(jnp.int32(0)), losses.collect(), acts.ignore()):
    try:
        raw_compiled(stack, x)
    except fx.EffectLeakError:
        print("use fx.handle(fn, transform=nnx.jit)")
