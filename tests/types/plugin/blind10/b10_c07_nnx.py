"""A Flax NNX residual MLP with noisy BatchNorm blocks, stacked by effax.nnx's twins of NNX's transforms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx
import effax.nnx as fxn

block_noise = fx.RandomKey("block_noise")
block_calls = fx.State[jax.Array]("block_calls")
block_means = fx.Emit[jax.Array]("block_means")
hidden = fx.Tap[jax.Array]("hidden")
noise_scale = fx.Ask[float]("noise_scale", default=0.01)

BLOCK_ROW = (block_noise, block_calls, block_means, hidden, noise_scale)


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.bn = nnx.BatchNorm(dim, rngs=rngs)

    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jax.nn.gelu(self.bn(self.linear(x)))
        x = x + noise_scale.ask() * jax.random.normal(block_noise.next_key(), x.shape)
        block_calls.modify(lambda n: n + 1)
        block_means.emit(jnp.mean(x))
        return hidden.tap("block", x)


class Stack(nnx.Module):
    def __init__(self, dim: int, n_layers: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=n_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs: nnx.Rngs) -> Block:
            return Block(dim, rngs=rngs)

        self.blocks = create(rngs)

    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @fxn.remat
        def forward(x: jax.Array, block: Block) -> jax.Array:
            return block(x)

        return forward(x, self.blocks)


MODEL = Stack(4, 3, rngs=nnx.Rngs(0))
BLOCK = Block(4, rngs=nnx.Rngs(1))
XB = jnp.ones((5, 4))


def all_handlers(seed: int = 0) -> tuple[fx.Handler[object], ...]:  # pyright: ignore[reportInvalidTypeArguments]  # E: type-var
    return (block_noise.seed(seed), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.record())


@fx.uses(*BLOCK_ROW)
def loss_fn(model: Stack, x: jax.Array) -> jax.Array:
    return jnp.mean(model(x) ** 2)


# case: the stacked model compiled with nnx.jit through fx.handle
forward_jit = fx.handle(lambda m, x: m(x), transform=nnx.jit)
with fx.handlers(block_noise.seed(0), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.record()) as hs:
    y = forward_jit(MODEL, XB)
print(int(hs[block_calls]), hs[hidden]["block"].shape)

# case: the model called at module level with nothing installed
MODEL(XB)  # E: effax-unhandled

# case: the model called with the tap missing
with block_noise.seed(0), block_calls.init(jnp.int32(0)), block_means.collect():
    MODEL(XB)  # E: effax-unhandled

# case: one training step by effax.nnx.value_and_grad, tap gradients recorded
with fx.handlers(block_noise.seed(1), block_calls.init(jnp.int32(0)), block_means.discard(), hidden.gradients()) as hs:
    loss, grads = fxn.value_and_grad(loss_fn)(MODEL, XB)
    params = nnx.state(MODEL, nnx.Param)
    nnx.update(MODEL, jax.tree.map(lambda p, g: p - 0.01 * g, params, grads))
print(float(loss), hs[hidden]["block"].shape)

# case: the gradient step with the mean collector missing
with block_noise.seed(1), block_calls.init(jnp.int32(0)), hidden.gradients():
    fxn.grad(loss_fn)(MODEL, XB)  # E: effax-unhandled

# case: one block under effax.nnx.cond, its row performed through the lambda's operands
go = jnp.bool_(True)
with fx.handlers(block_noise.seed(2), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    fxn.cond(go, lambda m, u: m(u), lambda m, u: (block_means.emit(jnp.mean(u)), u)[1], BLOCK, XB)

# case: the same cond with nothing installed
fxn.cond(go, lambda m, u: m(u), lambda m, u: u, BLOCK, XB)  # E: effax-unhandled

# case: effax.nnx.switch over a list of branches, handlers present
with fx.handlers(block_noise.seed(3), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    fxn.switch(jnp.int32(1), [lambda m, u: (block_means.emit(jnp.mean(u)), u)[1], lambda m, u: m(u)], BLOCK, XB)

# case: effax.nnx.switch with the key stream missing
with block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore():
    fxn.switch(jnp.int32(1), [lambda m, u: u, lambda m, u: m(u)], BLOCK, XB)  # E: effax-unhandled


# case: a remat written where it is called, inside a function whose row lacks the stream
@fx.uses(block_calls, block_means, hidden, noise_scale)
def rematted(x: jax.Array) -> jax.Array:
    return fxn.remat(lambda m, u: m(u))(BLOCK, x)  # E: effax-undeclared, no-any-return


with fx.handlers(block_noise.seed(4), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    rematted(XB)


# case: the remat with the whole row declared
@fx.uses(*BLOCK_ROW)
def rematted_ok(x: jax.Array) -> jax.Array:
    return fxn.remat(lambda m, u: m(u))(BLOCK, x)  # E: no-any-return


with fx.handlers(block_noise.seed(4), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    rematted_ok(XB)


# case: a repeated block (a body with a row) by effax.nnx.fori_loop from a row that omits the tap
@fx.uses(block_noise, block_calls, block_means, noise_scale)
def repeat_block(x: jax.Array) -> jax.Array:
    @fx.uses(*BLOCK_ROW)
    def body(i: int, c: tuple[Block, jax.Array]) -> tuple[Block, jax.Array]:
        m, u = c
        return m, m(u)

    return fxn.fori_loop(0, 2, body, (BLOCK, x))[1]  # E: effax-undeclared


with fx.handlers(block_noise.seed(5), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    repeat_block(XB)

# case: an ensemble of blocks by effax.nnx.vmap with split keys
ENSEMBLE = nnx.vmap(lambda r: Block(4, rngs=r), in_axes=0)(nnx.Rngs(0).split(2))
with fx.handlers(block_noise.seed(6), block_calls.init(jnp.int32(0)), block_means.discard(), hidden.ignore()):
    ens = fxn.vmap(lambda m, u: m(u), in_axes=(0, None))(ENSEMBLE, XB)
print(ens.shape)


# case: the noise scale default, asked by an evaluation entry that provides it
@fx.uses()
def evaluate(x: jax.Array) -> jax.Array:
    with fx.handlers(block_noise.seed(0), block_calls.init(jnp.int32(0)), block_means.discard(), hidden.ignore()):
        with noise_scale.provide(0.0):
            return MODEL(x)


print(evaluate(XB).shape)


# case: an evaluation entry that forgets to switch the tap off
@fx.uses()
def evaluate_bad(x: jax.Array) -> jax.Array:
    with fx.handlers(block_noise.seed(0), block_calls.init(jnp.int32(0)), block_means.discard()):
        return MODEL(x)  # E: effax-undeclared


with hidden.ignore():
    evaluate_bad(XB)

# case: the stacked model's forward by a handled function owning its cells, under nnx.jit
cells = (block_noise.seed(7), block_calls.init(jnp.int32(0)), block_means.discard(), hidden.ignore())
owned = fx.handle(loss_fn, *cells, transform=nnx.jit)
print(owned(MODEL, XB), cells[1].value)

# case: a handled loss that owns only some cells, called bare
partly = fx.handle(loss_fn, block_noise.seed(8), block_calls.init(jnp.int32(0)))
partly(MODEL, XB)  # E: effax-unhandled


# case: a quiet block subclass calling the parent's call from a row without the tap
class QuietBlock(Block):
    @fx.uses(block_noise, block_calls, block_means, noise_scale)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x) * 0.5  # E: effax-undeclared


QUIET = QuietBlock(4, rngs=nnx.Rngs(2))
with fx.handlers(block_noise.seed(0), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    QUIET(XB)


# case: a subclass whose row covers the parent's
class ScaledBlock(Block):
    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x) * 0.5


SCALED = ScaledBlock(4, rngs=nnx.Rngs(3))
with fx.handlers(block_noise.seed(0), block_calls.init(jnp.int32(0)), block_means.collect(), hidden.ignore()):
    print(SCALED(XB).shape)

# case: effax.nnx.while_loop running blocks until a norm threshold
with fx.handlers(block_noise.seed(9), block_calls.init(jnp.int32(0)), block_means.discard(), hidden.ignore()) as hs:
    fxn.while_loop(lambda c: c[2] < 2, lambda c: (c[0], c[0](c[1]), c[2] + 1), (BLOCK, XB, jnp.int32(0)))
print(hs[block_calls])
