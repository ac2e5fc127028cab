"""A Flax NNX model with stacked blocks, trained through the effax.nnx twins."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax  # E: import-untyped
from flax import nnx

import effax as fx
import effax.nnx as fxn
from b7lib.effects import acts, dropout_key, losses, step_count
from b7lib.effects import train_mode as training

block_calls = fx.State[jax.Array]("block_calls")
layer_means = fx.Emit[jax.Array]("layer_means")
gate = fx.Ask[jax.Array]("gate")

BLOCK_ROW = (training, dropout_key, block_calls, layer_means, acts)


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.rate = 0.1

    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jax.nn.gelu(self.linear(x))
        if training.ask():
            keep = jax.random.bernoulli(dropout_key.next_key(), 1 - self.rate, x.shape)
            x = jnp.where(keep, x / (1 - self.rate), 0.0)
        block_calls.modify(lambda n: n + 1)
        layer_means.emit(jnp.mean(x))
        return acts.tap("block", x)


class Stack(nnx.Module):
    def __init__(self, dim: int, depth: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=depth)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs: nnx.Rngs) -> Block:
            return Block(dim, rngs=rngs)

        self.blocks = make(rngs)
        self.head = nnx.Linear(dim, 1, rngs=rngs)

    @fx.uses(*BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @fxn.remat
        def forward(x: jax.Array, block: Block) -> jax.Array:
            return block(x)

        return self.head(forward(x, self.blocks))[..., 0]


class QuietStack(Stack):
    @fx.uses(training, dropout_key, block_calls, acts)
    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(x)  # E: effax-undeclared


class Gated(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.body = Block(dim, rngs=rngs)

    @fx.uses(gate, *BLOCK_ROW)
    def __call__(self, x: jax.Array) -> jax.Array:
        return fxn.cond(jnp.mean(x) > gate.ask(), lambda m, u: m(u), lambda m, u: (layer_means.emit(jnp.mean(u)), u)[1], self.body, x)  # E: no-any-return


class GatedNoTap(Gated):
    @fx.uses(gate, training, dropout_key, block_calls, layer_means)
    def __call__(self, x: jax.Array) -> jax.Array:
        return fxn.cond(jnp.mean(x) > gate.ask(), lambda m, u: m(u), lambda m, u: (layer_means.emit(jnp.mean(u)), u)[1], self.body, x)  # E: effax-undeclared, no-any-return


def mse(model: Stack, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


@fx.uses(*BLOCK_ROW, step_count, losses)
def train_step(model: Stack, opt: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:  # E: type-arg
    loss, grads = fxn.value_and_grad(mse)(model, x, y)
    opt.update(model, grads)
    step_count.modify(lambda n: n + 1)
    losses.emit(loss)
    return loss  # E: no-any-return


@fx.uses(*BLOCK_ROW, step_count)
def train_step_no_log(model: Stack, opt: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:  # E: type-arg
    loss, grads = fxn.value_and_grad(mse)(model, x, y)
    opt.update(model, grads)
    losses.emit(loss)  # E: effax-undeclared
    return loss  # E: no-any-return


model = Stack(4, 3, rngs=nnx.Rngs(0))
opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
x = jax.random.normal(jax.random.key(1), (6, 4))
y = jnp.sum(x, axis=-1)
block_handlers = (dropout_key.seed(0), block_calls.init(jnp.int32(0)), layer_means.collect(), acts.ignore())

# case: a forward pass under every block handler
with fx.handlers(*block_handlers) as hs:
    y0 = model(x)

# case: a forward pass with the taps left unhandled
with dropout_key.seed(0), block_calls.init(jnp.int32(0)), layer_means.collect():
    model(x)  # E: effax-unhandled

# case: a forward pass with nothing at all
model(x)  # E: effax-unhandled

# case: training steps compiled with nnx.jit through effax.handle
fast_train = fx.handle(train_step, transform=nnx.jit)
with fx.handlers(training.provide(True), *block_handlers, step_count.init(jnp.int32(0)), losses.collect()) as hs:
    for _ in range(2):
        fast_train(model, opt, x, y)

# case: compiled training with no loss collector
with fx.handlers(training.provide(True), *block_handlers, step_count.init(jnp.int32(0))):
    fast_train(model, opt, x, y)  # E: effax-unhandled

# case: compiled training with no step counter, records taps
with fx.handlers(training.provide(True), dropout_key.seed(1), block_calls.init(jnp.int32(0)),
                 layer_means.discard(), acts.record("block"), losses.discard()):
    fx.handle(train_step, transform=nnx.jit)(model, opt, x, y)  # E: effax-unhandled

# case: a step whose row forgets the losses (a collector outside)
with fx.handlers(*block_handlers, step_count.init(jnp.int32(0)), losses.collect()):
    train_step_no_log(model, opt, x, y)

# case: a subclass that narrows the row of super().__call__ (taps handled outside)
quiet = QuietStack(4, 2, rngs=nnx.Rngs(2))
with fx.handlers(*block_handlers):
    quiet(x)

# case: a gated block through fxn.cond, gate provided
gated = Gated(4, rngs=nnx.Rngs(3))
with fx.handlers(gate.provide(jnp.float32(-10.0)), *block_handlers):
    g_out = gated(x)

# case: a gated block with no gate
with fx.handlers(*block_handlers):
    gated(x)  # E: effax-unhandled

# case: a gated block whose row leaves out the taps its branch performs (handled outside)
gated_nt = GatedNoTap(4, rngs=nnx.Rngs(4))
with fx.handlers(gate.provide(jnp.float32(-10.0)), *block_handlers):
    gated_nt(x)


class Member(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 1, rngs=rngs)

    @fx.uses(dropout_key)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear(x)[..., 0] + 0.1 * jax.random.normal(dropout_key.next_key(), x.shape[:1])


@nnx.split_rngs(splits=3)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make_members(rngs: nnx.Rngs) -> Member:
    return Member(rngs=rngs)


@fx.uses(dropout_key)
def run_member(m: Member, u: jax.Array) -> jax.Array:
    return m(u)


members = make_members(nnx.Rngs(5))
ensemble = fxn.vmap(run_member, in_axes=(0, None))

# case: an ensemble with split keys
with dropout_key.seed(6):
    ys = ensemble(members, x)

# case: an ensemble called with no stream
ensemble(members, x)  # E: effax-unhandled

# case: a loop of ensemble calls with fori_loop, keys seeded
with dropout_key.seed(7):
    _, acc = fxn.fori_loop(0, 3, lambda i, c: (c[0], c[1] + ensemble(c[0], x).sum()), (members, jnp.float32(0.0)))  # E: assignment

# case: the same loop without a seed
fxn.fori_loop(0, 3, lambda i, c: (c[0], c[1] + ensemble(c[0], x).sum()), (members, jnp.float32(0.0)))  # E: effax-unhandled
