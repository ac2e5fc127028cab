"""A Flax NNX model whose blocks draw noise, count calls, emit means and tap their
outputs; stacked with effax.nnx.scan and remat, ensembled with effax.nnx.vmap,
trained with effax.nnx.value_and_grad under nnx.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax  # E: import-untyped
from flax import nnx

import effax as fx
import effax.nnx as fxn
from b8lib.effects import acts, dropout, training

block_noise = fx.RandomKey("block_noise")
calls = fx.State[jax.Array]("nnx_calls")
block_means = fx.Emit[jax.Array]("block_means")
depth_scale = fx.Ask[jax.Array]("depth_scale")

DIM = 4
X = jnp.ones((5, DIM))


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)

    @fx.uses(block_noise, calls, block_means, acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.tanh(self.linear(x))
        x = x + 0.01 * jax.random.normal(block_noise.next_key(), x.shape)
        calls.modify(lambda n: n + 1)
        block_means.emit(jnp.mean(x))
        return acts.tap("block", x)


BLOCK_ROW = (block_noise, calls, block_means, acts)


class Stack(nnx.Module):
    def __init__(self, dim: int, n_layers: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=n_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create_block(rngs: nnx.Rngs) -> Block:
            return Block(dim, rngs=rngs)

        self.blocks = create_block(rngs)

    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @fxn.remat
        def forward(x: jax.Array, block: Block) -> jax.Array:
            return block(x)

        return forward(x, self.blocks)  # type: ignore[no-any-return]  # E: unused-ignore


model = Stack(DIM, 3, rngs=nnx.Rngs(0))
single = Block(DIM, rngs=nnx.Rngs(1))


# case: one block, eagerly, under its four handlers
with fx.handlers(block_noise.seed(0), calls.init(jnp.int32(0)), block_means.collect(), acts.record()) as hs:
    y = single(X)
print("block calls", int(hs[calls]), "taps", hs[acts]["block"].shape)


# case: the stacked model compiled with nnx.jit through fx.handle
forward_jit = fx.handle(lambda m, x: m(x), transform=nnx.jit)
with fx.handlers(block_noise.seed(1), calls.init(jnp.int32(0)), block_means.collect(), acts.record()) as hs:
    y = forward_jit(model, X)
print("layers counted", int(hs[calls]), "means", hs[block_means][0].shape)


# case: a block called at module level with nothing installed
y_bare = single(X)  # E: effax-unhandled


# case: a residual wrapper whose row omits the emitted means of its submodule
class Residual(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.body = Block(dim, rngs=rngs)

    @fx.uses(block_noise, calls, acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.body(x)  # E: effax-undeclared


residual = Residual(DIM, rngs=nnx.Rngs(2))
with fx.handlers(block_noise.seed(2), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    residual(X)


# case: the residual wrapper with the full row, scaled by an asked depth factor
class ScaledResidual(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.body = Block(dim, rngs=rngs)

    @fx.uses(*BLOCK_ROW, depth_scale)
    def __call__(self, x: jax.Array) -> jax.Array:
        return x + depth_scale.ask() * self.body(x)


scaled_res = ScaledResidual(DIM, rngs=nnx.Rngs(3))
with fx.handlers(
    block_noise.seed(3), calls.init(jnp.int32(0)), block_means.discard(), acts.ignore(), depth_scale.provide(jnp.float32(0.5))
):
    scaled_res(X)


# case: an ensemble of blocks under effax.nnx.vmap, each drawing its own keys
@nnx.split_rngs(splits=3)
@nnx.vmap(in_axes=(0,), out_axes=0)
def create_members(rngs: nnx.Rngs) -> Block:
    return Block(DIM, rngs=rngs)


members = create_members(nnx.Rngs(4))
with fx.handlers(block_noise.seed(4), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    ys = fxn.vmap(lambda m, x: m(x), in_axes=(0, None))(members, X)
print("ensemble", ys.shape)


# case: the ensemble at module level with the counter and taps but no key stream
with calls.init(jnp.int32(0)), block_means.collect(), acts.ignore():
    ys_bad = fxn.vmap(lambda m, x: m(x), in_axes=(0, None))(members, X)  # E: effax-unhandled


# case: a gated block with effax.nnx.cond, the branches given the module and input
@fx.uses(*BLOCK_ROW)
def gated(block: Block, x: jax.Array, go: jax.Array) -> jax.Array:
    return fxn.cond(go, lambda m, u: m(u), lambda m, u: m(u) * 0.0, block, x)  # E: no-any-return


with fx.handlers(block_noise.seed(5), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    gated(single, X, jnp.bool_(True))


# case: the gate in a function whose row lacks the tap the block performs
@fx.uses(block_noise, calls, block_means)
def gated_untapped(block: Block, x: jax.Array, go: jax.Array) -> jax.Array:
    return fxn.cond(go, lambda m, u: m(u), lambda m, u: u, block, x)  # E: effax-undeclared, no-any-return


with fx.handlers(block_noise.seed(6), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    gated_untapped(single, X, jnp.bool_(True))


# case: a loss over the stack, differentiated by effax.nnx.value_and_grad with tap gradients
@fx.uses(*BLOCK_ROW)
def loss_fn(m: Stack, x: jax.Array) -> jax.Array:
    return jnp.mean(m(x) ** 2)


with fx.handlers(block_noise.seed(7), calls.init(jnp.int32(0)), block_means.collect(), acts.gradients()) as hs:
    loss, grads = fxn.value_and_grad(loss_fn)(model, X)
print("loss", float(loss), "d loss / d block", hs[acts]["block"].shape)


# case: a train step whose row lacks the emitted block means
@fx.uses(block_noise, calls, acts)
def grad_step(m: Stack, x: jax.Array) -> jax.Array:
    loss, grads = fxn.value_and_grad(loss_fn)(m, x)  # E: effax-undeclared
    return loss  # type: ignore[no-any-return]


with fx.handlers(block_noise.seed(8), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    grad_step(model, X)


# case: an optimiser step compiled by nnx.jit through fx.handle, five updates
@fx.uses(*BLOCK_ROW)
def opt_step(m: Stack, opt: nnx.Optimizer, x: jax.Array) -> jax.Array:  # E: type-arg
    loss, grads = fxn.value_and_grad(loss_fn)(m, x)
    opt.update(m, grads)
    return loss  # type: ignore[no-any-return]


optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
train = fx.handle(opt_step, transform=nnx.jit)
with fx.handlers(block_noise.seed(9), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()) as hs:
    for _ in range(3):
        last = train(model, optimizer, X)
print("trained loss", float(last), "calls", int(hs[calls]))


# case: a classifier head with nnx.Dropout fed the shared dropout stream, mode static
class Head(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.drop = nnx.Dropout(0.2)
        self.out = nnx.Linear(DIM, 2, rngs=rngs)

    @fx.uses(training, dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        if training.ask():
            x = self.drop(x, deterministic=False, rngs=dropout.next_key())
        return self.out(x)


head = Head(rngs=nnx.Rngs(5))
with training.provide(True), dropout.seed(0):
    logits = head(X)
eval_logits = head(X)  # the training flag's default, False: no key needed  # E: effax-unhandled


# case: a head whose row omits the training flag it asks
class EvalHead(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.out = nnx.Linear(DIM, 2, rngs=rngs)

    @fx.uses(dropout)
    def __call__(self, x: jax.Array) -> jax.Array:
        if training.ask():  # E: effax-undeclared
            x = x * jax.random.bernoulli(dropout.next_key(), 0.8, x.shape) / 0.8
        return self.out(x)


with training.provide(True), dropout.seed(1):
    EvalHead(rngs=nnx.Rngs(6))(X)


# case: a counted refinement with effax.nnx.fori_loop, its row without the counter
@fx.uses(block_noise)
def refine(x: jax.Array) -> jax.Array:
    return fxn.fori_loop(0, 3, lambda i, u: (calls.modify(lambda n: n + 1), u * 0.5)[1], x)  # E: effax-undeclared


with block_noise.seed(10), calls.init(jnp.int32(0)):
    refine(X)


# case: effax.nnx.while_loop at module level drawing from an unseeded stream
x_walk = fxn.while_loop(lambda c: c < 1.0, lambda c: c + fx.random.uniform(stream=block_noise), jnp.asarray(0.0))  # E: effax-unhandled


# case: effax.nnx.switch over two branches of a module, with every handler
with fx.handlers(block_noise.seed(11), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    y_sw = fxn.switch(jnp.int32(1), [lambda m, u: 0.5 * m(u), lambda m, u: m(u)], single, X)


# case: remat of a block written where it is called, at module level with taps only
with acts.record():
    y_remat = fxn.remat(lambda m, u: m(u))(single, X)  # E: effax-unhandled
