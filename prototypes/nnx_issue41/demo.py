"""Scan over layers (after flax examples/nnx_toy_examples/06_scan_over_layers.py:
Block = Linear + BatchNorm (+ Dropout, deterministic here), blocks created with
nnx.split_rngs + nnx.vmap, applied with nnx.scan) with effax effects in the block:
a State counter, an Emit and a key draw per layer.

Compares: (A) effax_nnx.scan (prototype), (B) an unrolled Python loop over the
layers under the same handlers, (C) pure NNX with nnx.scan and no effects (module
state), each eagerly; and (A) under nnx.jit via effax.handle(transform=nnx.jit)."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import effax as fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import effax_nnx as fxn  # noqa: E402

count = fx.State[jax.Array]("count")
log = fx.Emit[jax.Array]("log")
noise = fx.RandomKey("noise")
EFFECTS = True
D, L = 4, 3


class Block(nnx.Module):
    def __init__(self, dim, *, rngs):
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.bn = nnx.BatchNorm(dim, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, deterministic=True, rngs=rngs)

    def __call__(self, x):
        x = jax.nn.gelu(self.dropout(self.bn(self.linear(x))))
        if EFFECTS:
            count.set(count.get() + 1)
            log.emit(jnp.mean(x))
            x = x + 0.01 * jax.random.normal(noise.next_key(), x.shape)
        return x


class MLP(nnx.Module):
    def __init__(self, dim, n_layers, *, rngs):
        @nnx.split_rngs(splits=n_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create_block(rngs):
            return Block(dim, rngs=rngs)

        self.blocks = create_block(rngs)
        self.n_layers = n_layers

    def scanned(self, x, scan_impl):
        @scan_impl(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def forward(x, block):
            return block(x)

        return forward(x, self.blocks)

    def unrolled(self, x):
        graphdef, state = nnx.split(self.blocks)
        new_states = []
        for i in range(self.n_layers):
            block = nnx.merge(graphdef, jax.tree.map(lambda a: a[i], state))
            x = block(x)
            new_states.append(nnx.state(block))
        nnx.update(self.blocks, jax.tree.map(lambda *a: jnp.stack(a), *new_states))
        return x


def handlers():
    return (count.init(jnp.int32(0)), log.collect(), noise.seed(7))


def bn_stats(model):
    return np.asarray(model.blocks.bn.mean[...]), np.asarray(model.blocks.bn.var[...])


x = jnp.arange(5 * D, dtype=jnp.float32).reshape(5, D) / 10


def run(call):
    model = MLP(D, L, rngs=nnx.Rngs(0))
    with fx.handlers(*handlers()) as hs:
        y = call(model)
        y = call(model)  # twice: handler state and BatchNorm stats carried over
    return np.asarray(y), int(hs[count]), hs[noise].counter, [np.asarray(v) for v in hs[log]], bn_stats(model)


def same(a, b):
    return jax.tree.all(jax.tree.map(lambda u, v: np.array_equal(u, v), a, b))


proto = run(lambda m: m.scanned(x, fxn.scan))
loop = run(lambda m: m.unrolled(x))
print("A effax_nnx.scan eager: y[0]", proto[0][0], "count", proto[1], "keys drawn", proto[2])
print("   log:", np.round(np.concatenate([np.ravel(v) for v in proto[3]]), 5))
print("B unrolled loop:        y[0]", loop[0][0], "count", loop[1], "keys drawn", loop[2])
print("   log:", np.round(np.concatenate([np.ravel(v) for v in loop[3]]), 5))
print("A vs B: y allclose", np.allclose(proto[0], loop[0], atol=1e-6), "bitwise", same(proto[0], loop[0]))
print("A vs B: count/keys equal", proto[1:3] == loop[1:3])
print("A vs B: log allclose", np.allclose(np.concatenate([np.ravel(v) for v in proto[3]]),
                                          np.concatenate([np.ravel(v) for v in loop[3]]), atol=1e-6))
print("A vs B: BN stats allclose", all(np.allclose(a, b, atol=1e-6) for a, b in zip(proto[4], loop[4])),
      "bitwise", same(proto[4], loop[4]))
print("BN mean moved from 0:", not np.allclose(proto[4][0], 0.0))

# the per-key draws equal the Python loop's keys: noise counter c + step
# under nnx.jit (effax.handle with transform=nnx.jit around the prototype)
def jitted_call(m):
    return fx.handle(lambda mm: mm.scanned(x, fxn.scan), transform=nnx.jit)(m)


jit = run(jitted_call)
print("A under nnx.jit vs A eager: y allclose", np.allclose(jit[0], proto[0], atol=1e-6),
      "count/keys", jit[1:3] == proto[1:3],
      "BN", all(np.allclose(a, b, atol=1e-6) for a, b in zip(jit[4], proto[4])),
      "log", np.allclose(np.concatenate([np.ravel(v) for v in jit[3]]),
                         np.concatenate([np.ravel(v) for v in proto[3]]), atol=1e-6))

# pure NNX without effects: module-state semantics of the twin == nnx.scan's
EFFECTS = False
pure = run(lambda m: m.scanned(x, nnx.scan))
twin = run(lambda m: m.scanned(x, fxn.scan))
print("no effects: twin vs nnx.scan bitwise y", same(twin[0], pure[0]), "BN", same(twin[4], pure[4]))
