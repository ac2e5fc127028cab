"""Flax NNX modules performing effects, through the `effax.nnx` twins and `nnx.jit`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax  # E: import-untyped
from flax import nnx

import effax as fx
import effax.nnx as fxn
from b6lib.effects import acts, init_key, losses, noise, steps, temperature
from b6lib.nnx_blocks import BLOCK_ROW, Block, Head, batch, make_stack, zeros_count

DIM, LAYERS = 6, 3
X = batch(4, DIM)
STACK = make_stack(DIM, LAYERS)
HEAD = Head(DIM, 2, rngs=nnx.Rngs(1))


@fx.uses(*BLOCK_ROW)
def through_stack(blocks: Block, x: jax.Array) -> jax.Array:
    @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    @fxn.remat
    def body(h: jax.Array, block: Block) -> jax.Array:
        return block(h)

    return body(x, blocks)  # type: ignore[no-any-return]  # E: unused-ignore


@fx.uses(*BLOCK_ROW, temperature)
def classify(blocks: Block, head: Head, x: jax.Array) -> jax.Array:
    return head(through_stack(blocks, x))


# case: the scanned stack under every handler its row names
with fx.handlers(noise.seed(0), steps.init(zeros_count()), acts.record()) as hs:
    h = through_stack(STACK, X)
layer_outputs = hs[acts]["block"]

# case: the scanned stack with its noise stream unseeded
with steps.init(zeros_count()), acts.ignore():
    h_bad = through_stack(STACK, X)  # E: effax-unhandled

# case: a classifier compiled with nnx.jit through fx.handle
forward = fx.handle(classify, transform=nnx.jit)
with fx.handlers(noise.seed(0), steps.init(zeros_count()), acts.ignore(), temperature.provide(jnp.float32(1.0))):
    logits = forward(STACK, HEAD, X)

# case: the compiled classifier without its temperature
with fx.handlers(noise.seed(0), steps.init(zeros_count()), acts.ignore()):
    logits_bad = forward(STACK, HEAD, X)  # E: effax-unhandled

# case: the head alone at module level, with and without a provider
with temperature.provide(jnp.float32(2.0)):
    head_only = HEAD(X)
head_only_bad = HEAD(X)  # E: effax-unhandled


# case: a training step with the twin of nnx.value_and_grad and an nnx.Optimizer
@fx.uses(*BLOCK_ROW, temperature, losses)
def train_step(blocks: Block, head: Head, opt: nnx.Optimizer[Head], x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(hd: Head, bl: Block) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(classify(bl, hd, x), y).mean()  # E: no-any-return

    loss, grads = fxn.value_and_grad(loss_fn)(head, blocks)
    opt.update(head, grads)
    losses.emit(loss)
    return loss  # type: ignore[no-any-return]


labels = jnp.array([0, 1, 0, 1])
optimizer = nnx.Optimizer(HEAD, optax.sgd(0.05), wrt=nnx.Param)
step = fx.handle(train_step, transform=nnx.jit)
with fx.handlers(
    noise.seed(1), steps.init(zeros_count()), acts.ignore(), temperature.provide(jnp.float32(1.0)), losses.collect()
) as train_hs:
    for _ in range(2):
        step(STACK, HEAD, optimizer, X, labels)


# case: a step whose row forgets the block's taps
@fx.uses(noise, steps, temperature)
def eval_step(blocks: Block, head: Head, x: jax.Array) -> jax.Array:
    return jnp.argmax(classify(blocks, head, x), axis=-1)  # E: effax-undeclared


with fx.handlers(noise.seed(1), steps.init(zeros_count()), acts.ignore(), temperature.provide(jnp.float32(1.0))):
    predictions = eval_step(STACK, HEAD, X)

# case: an ensemble of heads under the vmap twin, one key per member
@nnx.split_rngs(splits=3)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make_heads(rngs: nnx.Rngs) -> Head:
    return Head(DIM, 2, rngs=rngs)


HEADS = make_heads(nnx.Rngs(2))
with temperature.provide(jnp.float32(1.0)):
    ensemble = fxn.vmap(lambda m, x: m(x), in_axes=(0, None))(HEADS, X)

# case: the ensemble with no temperature
ensemble_bad = fxn.vmap(lambda m, x: m(x), in_axes=(0, None))(HEADS, X)  # E: effax-unhandled

# case: the cond and remat twins, lambdas bound to the module operand
SINGLE = Block(DIM, rngs=nnx.Rngs(3))
with noise.seed(2), steps.init(zeros_count()), acts.ignore():
    maybe = fxn.cond(jnp.bool_(True), lambda m, u: m(u), lambda m, u: u, SINGLE, X)
    rematted = fxn.remat(lambda m, u: m(u))(SINGLE, X)

# case: the same twins without the block's counter
with noise.seed(2), acts.ignore():
    maybe_bad = fxn.cond(jnp.bool_(True), lambda m, u: m(u), lambda m, u: u, SINGLE, X)  # E: effax-unhandled
with noise.seed(2), acts.ignore():
    rematted_bad = fxn.remat(lambda m, u: m(u))(SINGLE, X)  # E: effax-unhandled


# case: a fori loop twin applying one block repeatedly inside a function with a row
@fx.uses(*BLOCK_ROW)
def repeat_block(block: Block, x: jax.Array, n: int) -> jax.Array:
    return fxn.fori_loop(0, n, lambda i, h: block(h), x)


with noise.seed(4), steps.init(zeros_count()) as n_calls, acts.ignore():
    repeated = repeat_block(SINGLE, X, 3)


# case: the fori loop twin inside a function whose row omits the tap family
@fx.uses(noise, steps)
def repeat_block_narrow(block: Block, x: jax.Array, n: int) -> jax.Array:
    return fxn.fori_loop(0, n, lambda i, h: block(h), x)  # E: effax-undeclared


with noise.seed(4), steps.init(zeros_count()), acts.ignore():
    repeated_narrow = repeat_block_narrow(SINGLE, X, 2)


# case: a module whose constructor draws its initial scale from an effax stream
class ScaledHead(nnx.Module):
    @fx.uses(init_key)
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.head = Head(dim, 2, rngs=rngs)
        self.scale = nnx.Param(jax.random.uniform(init_key.next_key(), (2,)))

    @fx.uses(temperature)
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(x) * self.scale[...]


with init_key.seed(0):
    scaled_head = ScaledHead(DIM, rngs=nnx.Rngs(5))
with temperature.provide(jnp.float32(1.0)):
    scaled_logits = scaled_head(X)

# case: the module constructed with no init stream
scaled_head_bad = ScaledHead(DIM, rngs=nnx.Rngs(5))  # E: effax-unhandled


# case: a switch twin choosing a module per index, all handlers installed
@fx.uses(*BLOCK_ROW, temperature)
def routed(index: jax.Array, block: Block, head: Head, x: jax.Array) -> Any:
    return fxn.switch(index, [lambda b, hd, u: hd(u), lambda b, hd, u: hd(b(u))], block, head, x)


with fx.handlers(noise.seed(5), steps.init(zeros_count()), acts.ignore(), temperature.provide(jnp.float32(1.0))):
    routed_out = routed(jnp.int32(1), SINGLE, HEAD, X)

# case: the switch twin at module level without the block's taps handled
with noise.seed(5), steps.init(zeros_count()), temperature.provide(jnp.float32(1.0)):
    switched_bad = fxn.switch(jnp.int32(1), [lambda b, hd, u: hd(u), lambda b, hd, u: hd(b(u))], SINGLE, HEAD, X)  # E: effax-unhandled


# case: an architecture as a static Ask: a NamedTuple of tuples is hashable
class Arch(NamedTuple):
    widths: tuple[int, ...]
    act: str


class LooseArch(NamedTuple):
    widths: list[int]
    act: str


arch = fx.Ask[Arch]("arch", static=True)
loose_arch = fx.Ask[LooseArch]("loose_arch", static=True)


@fx.uses(arch)
def build_heads() -> list[Head]:
    return [Head(w, 2, rngs=nnx.Rngs(i)) for i, w in enumerate(arch.ask().widths)]


with arch.provide(Arch((4, 6), "gelu")):
    built = build_heads()

# case: the NamedTuple holding a list given to a static Ask
with loose_arch.provide(LooseArch([4, 6], "gelu")):  # E: effax-handler-type
    pass
