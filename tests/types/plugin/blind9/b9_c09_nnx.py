"""A Flax NNX model whose blocks draw keys, count calls and tap activations, run with effax.nnx."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax  # E: import-untyped
from flax import nnx

import effax as fx
import effax.nnx as fxn
from b9lib.effects import acts, dropout, losses, metrics, training

calls = fx.State[jax.Array]("nnx_calls")
block_means = fx.Emit[jax.Array]("block_means")
noise_scale = fx.Ask[float]("noise_scale", default=0.01)

x = jnp.ones((3, 4))

# case: a block with effects, stacked and scanned


class Block(nnx.Module):
    def __init__(self, dim: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(dim, dim, rngs=rngs)

    @fx.uses(dropout, calls, block_means, acts, noise_scale)
    def __call__(self, h: jax.Array) -> jax.Array:
        h = jax.nn.gelu(self.linear(h))
        h = h + noise_scale.ask() * jax.random.normal(dropout.next_key(), h.shape)
        calls.modify(lambda n: n + 1)
        block_means.emit(jnp.mean(h))
        return acts.tap("block", h)


class Stack(nnx.Module):
    def __init__(self, dim: int, n_layers: int, *, rngs: nnx.Rngs) -> None:
        @nnx.split_rngs(splits=n_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create_block(r: nnx.Rngs) -> Block:
            return Block(dim, rngs=r)

        self.blocks = create_block(rngs)

    @fx.uses(dropout, calls, block_means, acts, noise_scale)
    def __call__(self, h: jax.Array) -> jax.Array:
        @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @fxn.remat
        def forward(h: jax.Array, block: Block) -> jax.Array:
            return block(h)

        return forward(h, self.blocks)


model = Stack(4, 3, rngs=nnx.Rngs(0))
forward_fn = fx.handle(lambda m, v: m(v), transform=nnx.jit)
with fx.handlers(dropout.seed(0), calls.init(jnp.int32(0)), block_means.collect(), acts.record()) as nh:
    y = forward_fn(model, x)
    y_eager = model(x)

# case: calling the stack with no tap handler

with fx.handlers(dropout.seed(0), calls.init(jnp.int32(0)), block_means.collect()):
    model(x)  # E: effax-unhandled

# case: a block called directly, inside a row that lacks the counter


@fx.uses(dropout, block_means, acts)
def probe_block(h: jax.Array) -> jax.Array:
    fresh = Block(4, rngs=nnx.Rngs(1))
    return fresh(h)  # E: effax-undeclared


with fx.handlers(dropout.seed(0), calls.init(jnp.int32(0)), block_means.collect(), acts.ignore()):
    probe_block(x)

# case: value_and_grad twin with tap gradients


def loss_of(m: Stack, v: jax.Array) -> jax.Array:
    return jnp.mean(m(v) ** 2)


with fx.handlers(dropout.seed(1), calls.init(jnp.int32(0)), block_means.collect(), acts.gradients()) as gh:
    loss, grads = fxn.value_and_grad(loss_of)(model, x)

# case: ensembles with the vmap twin


class Member(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(4, 1, rngs=rngs)

    @fx.uses(dropout)
    def __call__(self, v: jax.Array) -> jax.Array:
        return self.linear(v) + 0.1 * jax.random.normal(dropout.next_key(), (v.shape[0], 1))


@nnx.split_rngs(splits=3)
@nnx.vmap(in_axes=(0,), out_axes=0)
def create_members(r: nnx.Rngs) -> Member:
    return Member(rngs=r)


members = create_members(nnx.Rngs(0))


@fx.uses(dropout)
def ensemble(ms: Member, v: jax.Array) -> jax.Array:
    return ms(v)


with dropout.seed(2):
    ys = fxn.vmap(ensemble, in_axes=(0, None))(members, x)

# case: the ensemble vmap with no stream

fxn.vmap(ensemble, in_axes=(0, None))(members, x)  # E: effax-unhandled

# case: cond twin on a training flag


@fx.uses(dropout)
def noisy_member(m: Member, v: jax.Array) -> jax.Array:
    return m(v)


@fx.uses()
def quiet_member(m: Member, v: jax.Array) -> jax.Array:
    return m.linear(v)


single = Member(rngs=nnx.Rngs(3))
with dropout.seed(3):
    picked = fxn.cond(jnp.bool_(True), noisy_member, quiet_member, single, x)

# case: cond twin with lambdas bound to the member

fxn.cond(jnp.bool_(True), lambda m, v: m(v), lambda m, v: m.linear(v), single, x)  # E: effax-unhandled

# case: an NNX training step with losses emitted


@fx.uses(training, dropout, losses)
def nnx_step(m: Member, opt: nnx.Optimizer, v: jax.Array, t: jax.Array) -> None:  # E: type-arg
    def loss_fn(mm: Member) -> jax.Array:
        out = mm(v) if training.ask() else mm.linear(v)
        return jnp.mean((out - t) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(m)
    opt.update(m, grads)
    losses.emit(loss)


opt = nnx.Optimizer(single, optax.sgd(1e-2), wrt=nnx.Param)
train_nnx = fx.handle(nnx_step, transform=nnx.jit)
with fx.handlers(training.provide(True), dropout.seed(4), losses.collect()) as lh:
    for _ in range(2):
        train_nnx(single, opt, x, jnp.zeros((3, 1)))

# case: NNX step without the loss collector

with training.provide(True), dropout.seed(4):
    train_nnx(single, opt, x, jnp.zeros((3, 1)))  # E: effax-unhandled

# case: fori_loop twin counting blocks

loop_calls = fx.State[jax.Array]("loop_calls")


@fx.uses(loop_calls)
def refine(i: jax.Array, m: Member) -> Member:
    loop_calls.modify(lambda n: n + 1)
    return m


with loop_calls.init(jnp.int32(0)) as lc:
    fxn.fori_loop(0, 3, refine, single)

# case: fori_loop twin with no counter

fxn.fori_loop(0, 2, refine, single)  # E: effax-unhandled

# case: metrics of the member averaged over a batch


@fx.uses(metrics)
def member_metric(m: Member, v: jax.Array) -> jax.Array:
    out = m.linear(v)
    metrics.emit(jnp.mean(out))
    return out


with metrics.collect() as mm:
    member_metric(single, x)

# case: switch twin choosing a member head


@fx.uses(metrics)
def head_a(m: Member, v: jax.Array) -> jax.Array:
    out = m.linear(v)
    metrics.emit(jnp.mean(out))
    return out


@fx.uses(metrics)
def head_b(m: Member, v: jax.Array) -> jax.Array:
    out = -m.linear(v)
    metrics.emit(jnp.mean(out))
    return out


with metrics.collect() as sw_metrics:
    chosen = fxn.switch(jnp.int32(1), [head_a, head_b], single, x)

# case: switch twin with a lambda branch drawing keys and no stream

with metrics.collect():
    fxn.switch(jnp.int32(0), [lambda m, v: m(v), head_b], single, x)  # E: effax-unhandled

# case: while_loop twin refining until a count


@fx.uses(loop_calls)
def keep_going(m: Member) -> jax.Array:
    return loop_calls.get() < 3


@fx.uses(loop_calls)
def one_more(m: Member) -> Member:
    loop_calls.modify(lambda n: n + 1)
    return m


with loop_calls.init(jnp.int32(0)) as wl:
    fxn.while_loop(keep_going, one_more, single)

# case: the while twin inside a row missing the counter


@fx.uses()
def refine_until_done(m: Member) -> Member:
    return fxn.while_loop(keep_going, one_more, m)  # E: effax-undeclared


with loop_calls.init(jnp.int32(0)):
    refine_until_done(single)

# case: remat twin around a member call


@fx.uses(dropout)
def remat_member(m: Member, v: jax.Array) -> jax.Array:
    return fxn.remat(lambda mm, vv: mm(vv))(m, v)  # E: no-any-return


with dropout.seed(5):
    remat_member(single, x)

# case: remat twin at module level without a stream

fxn.remat(lambda mm, vv: mm(vv))(single, x)  # E: effax-unhandled

# case: grad twin of a member loss with a stream


@fx.uses(dropout)
def member_loss(m: Member, v: jax.Array) -> jax.Array:
    return jnp.mean(m(v) ** 2)


with dropout.seed(6):
    member_grads = fxn.grad(member_loss)(single, x)
