"""Flax NNX modules under the effax.nnx twins."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import effax as fx
import effax.nnx as fxn
from b5lib.effects import acts as taps
from b5lib.effects import dropout as noise
from b5lib.effects import losses as means
from b5lib.effects import steps as calls


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)

    @fx.uses(noise, calls)
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.tanh(self.linear(x))
        calls.modify(lambda n: n + 1)
        return x + 0.01 * jax.random.normal(noise.next_key(), x.shape)


class Probe(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)

    @fx.uses(taps, means)
    def __call__(self, x: jax.Array) -> jax.Array:
        h = taps.tap("probe", self.linear(x))
        means.emit(jnp.mean(h))
        return h


block = Block(2, rngs=nnx.Rngs(0))
probe = Probe(2, rngs=nnx.Rngs(1))
x = jnp.ones((3, 2))

# case: effax.nnx.cond with the block as operand, in a row that covers it
@fx.uses(noise, calls)
def maybe_block(go: jax.Array, u: jax.Array) -> jax.Array:
    return fxn.cond(go, lambda m, y: m(y), lambda m, y: y, block, u)  # E: no-any-return


with fx.handlers(noise.seed(0), calls.init(jnp.int32(0))) as hs:
    maybe_block(jnp.bool_(True), x)
print(hs[calls])

# case: effax.nnx.cond with the block as operand, the row lacking the State
@fx.uses(noise)
def maybe_block_bad(go: jax.Array, u: jax.Array) -> jax.Array:
    return fxn.cond(go, lambda m, y: m(y), lambda m, y: y, block, u)  # E: effax-undeclared, no-any-return


with fx.handlers(noise.seed(0), calls.init(jnp.int32(0))):
    maybe_block_bad(jnp.bool_(True), x)

# case: effax.nnx.remat of a lambda called where it is written, under the handlers
with fx.handlers(noise.seed(1), calls.init(jnp.int32(0))):
    print(fxn.remat(lambda m, u: m(u))(block, x).shape)

# case: the remat lambda with the key stream only
with noise.seed(1):
    fxn.remat(lambda m, u: m(u))(block, x)  # E: effax-unhandled

# case: effax.nnx.switch over the two modules
@fx.uses(noise, calls, taps, means)
def pick_module(i: jax.Array, u: jax.Array) -> jax.Array:
    return fxn.switch(i, [lambda a, b, y: b(a(y)), lambda a, b, y: b(y)], block, probe, u)  # E: no-any-return


with fx.handlers(noise.seed(2), calls.init(jnp.int32(0)), taps.ignore(), means.collect()):
    print(pick_module(jnp.int32(1), x).shape)

# case: effax.nnx.switch at module level with the probe's handlers missing
with fx.handlers(noise.seed(2), calls.init(jnp.int32(0))):
    fxn.switch(jnp.int32(0), [lambda a, b, y: b(a(y)), lambda a, b, y: b(y)], block, probe, x)  # E: effax-unhandled

# case: a stack of blocks scanned with the twin, the step counted
class Stack(nnx.Module):
    def __init__(self, dim: int, n: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=n)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs: nnx.Rngs) -> Block:
            return Block(dim, rngs=rngs)

        self.blocks = create(rngs)

    @fx.uses(noise, calls)
    def __call__(self, x: jax.Array) -> jax.Array:
        @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @fxn.remat
        def forward(h: jax.Array, b: Block) -> jax.Array:
            return b(h)

        out: jax.Array = forward(x, self.blocks)
        return out


stack = Stack(2, 2, rngs=nnx.Rngs(3))
with fx.handlers(noise.seed(3), calls.init(jnp.int32(0))) as stack_hs:
    stack(x)
print(stack_hs[calls], stack_hs[noise].counter)

# case: the stack called with no key stream
with calls.init(jnp.int32(0)):
    stack(x)  # E: effax-unhandled

# case: a vmapped ensemble with the twin, seeded and not
@nnx.split_rngs(splits=2)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make_members(rngs: nnx.Rngs) -> Block:
    return Block(2, rngs=rngs)


members = make_members(nnx.Rngs(4))
with fx.handlers(noise.seed(4), calls.init(jnp.int32(0))):
    print(fxn.vmap(lambda m, u: m(u), in_axes=(0, None))(members, x).shape)

# case: a vmapped ensemble with the twin, seeded and not (the failing use)
with noise.seed(4):
    # (missed in the score, then a limit: the ensemble's type is not inferred yet where
    # the walk reads it; the call is now checked once mypy has inferred it)
    fxn.vmap(lambda m, u: m(u), in_axes=(0, None))(members, x)  # E: effax-unhandled

# case: value_and_grad with the twin, the loss's row covered
@fx.uses(noise, calls)
def loss_fn(m: Block, u: jax.Array) -> jax.Array:
    return jnp.mean(m(u) ** 2)


with fx.handlers(noise.seed(5), calls.init(jnp.int32(0))):
    loss, grads = fxn.value_and_grad(loss_fn)(block, x)
print(float(loss))

# case: value_and_grad with the twin, the loss's row covered (the failing use)
with calls.init(jnp.int32(0)):
    fxn.grad(loss_fn)(block, x)  # E: effax-unhandled

# case: a training step compiled with nnx.jit as the transform
@fx.uses(noise, calls)
def apply(m: Block, u: jax.Array) -> jax.Array:
    return m(u)


forward_jit = fx.handle(apply, transform=nnx.jit)
with fx.handlers(noise.seed(6), calls.init(jnp.int32(0))):
    print(forward_jit(block, x).shape)

# case: a training step compiled with nnx.jit as the transform (the failing use)
forward_jit(block, x)  # E: effax-unhandled

# case: the probe's taps recorded through nnx.jit, and called with the recorder only
probe_jit = fx.handle(lambda m, u: m(u), transform=nnx.jit)
with fx.handlers(taps.record(), means.collect()) as probe_hs:
    probe_jit(probe, x)
print(sorted(probe_hs[taps]))
with taps.record():
    probe_jit(probe, x)  # limit: a lambda's row is not inferred

# case: an effax.nnx fori_loop over the block, in a row lacking the stream
@fx.uses(calls)
def loop_block(u: jax.Array) -> jax.Array:
    return fxn.fori_loop(0, 2, lambda i, y: block(y), u)  # E: effax-undeclared


@fx.uses(calls, noise)
def loop_block_ok(u: jax.Array) -> jax.Array:
    return fxn.fori_loop(0, 2, lambda i, y: block(y), u)


with fx.handlers(noise.seed(7), calls.init(jnp.int32(0))):
    print(loop_block_ok(x).shape)
with fx.handlers(noise.seed(7), calls.init(jnp.int32(0))):
    loop_block(x)

# case: an effax.nnx while_loop reading the State in its condition
@fx.uses(calls)
def until_three(u: jax.Array) -> jax.Array:
    return fxn.while_loop(lambda y: calls.get() + jnp.sum(y) < 3, lambda y: y + 1.0, u)


with calls.init(jnp.int32(0)):
    print(until_three(jnp.zeros(1)))

# case: an effax.nnx while_loop reading the State in its condition (the failing use)
until_three(jnp.zeros(1))  # E: effax-unhandled

# case: an interceptor of the taps installed around an nnx twin
with taps.record() as named, means.collect():
    with fx.intercept(taps, tap=lambda outer, site, val: outer.tap(f"outer/{site}", val)):
        fxn.remat(lambda m, u: m(u))(probe, x)
print(sorted(named.value))

# case: an interceptor of the taps installed around an nnx twin (the failing use)
with means.collect(), fx.intercept(taps, tap=lambda outer, site, val: outer.tap(f"outer/{site}", val)):
    fxn.remat(lambda m, u: m(u))(probe, x)  # E: effax-unhandled
