"""vmap (ensemble, keys='split'), remat inside the twin scan, value_and_grad of the
whole stack; plus the key-semantics check of scan against a pure nnx.scan fed the
keys a Python loop draws."""

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
D, L, B = 4, 3, 3
x = jnp.arange(5 * D, dtype=jnp.float32).reshape(5, D) / 10


def same(a, b):
    return bool(jax.tree.all(jax.tree.map(lambda u, v: np.array_equal(u, v), a, b)))


class Block(nnx.Module):
    def __init__(self, dim, *, rngs):
        self.linear = nnx.Linear(dim, dim, rngs=rngs)
        self.bn = nnx.BatchNorm(dim, rngs=rngs)

    def __call__(self, x, key=None):
        x = jax.nn.gelu(self.bn(self.linear(x)))
        return x


@nnx.split_rngs(splits=L)
@nnx.vmap(in_axes=(0,), out_axes=0)
def create_blocks(rngs):
    return Block(D, rngs=rngs)


def effectful(block, x):
    y = block(x)
    count.set(count.get() + 1)
    log.emit(jnp.mean(y))
    return y + 0.01 * jax.random.normal(noise.next_key(), y.shape)


# ---- 1. scan keys: twin vs pure nnx.scan fed the Python-loop keys (bitwise) ----
def twin_scan(blocks, x):
    @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    def fwd(x, block):
        return effectful(block, x)
    return fwd(x, blocks)


def pure_scan(blocks, x, keys):
    @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=(nnx.Carry, 0))
    def fwd(x, block, key):
        y = block(x)
        return y + 0.01 * jax.random.normal(key, y.shape), jnp.mean(y)
    return fwd(x, blocks, keys)


b1, b2 = create_blocks(nnx.Rngs(0)), create_blocks(nnx.Rngs(0))
with fx.handlers(count.init(jnp.int32(0)), log.collect(), noise.seed(7)) as hs:
    y1 = twin_scan(b1, x)
keys = jnp.stack([jax.random.fold_in(jax.random.key(7), i) for i in range(L)])
y2, means = pure_scan(b2, x, keys)
print("1 scan twin vs pure nnx.scan(+loop keys): y bitwise", same(y1, y2),
      "emits bitwise", same(hs[log][0], means), "count", int(hs[count]),
      "BN bitwise", same(nnx.state(b1, nnx.BatchStat), nnx.state(b2, nnx.BatchStat)))

# ---- 2. remat inside the twin scan ----
def twin_scan_remat(blocks, x):
    @fxn.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    @fxn.remat
    def fwd(x, block):
        return effectful(block, x)
    return fwd(x, blocks)


b3 = create_blocks(nnx.Rngs(0))
with fx.handlers(count.init(jnp.int32(0)), log.collect(), noise.seed(7)) as hs3:
    y3 = twin_scan_remat(b3, x)
print("2 scan(remat) vs scan: y bitwise", same(y3, y1), "emits", same(hs3[log], hs[log]),
      "count", int(hs3[count]), "keys", hs3[noise].counter,
      "BN bitwise", same(nnx.state(b3, nnx.BatchStat), nnx.state(b1, nnx.BatchStat)))

# ---- 3. value_and_grad of the stack, vs nnx.value_and_grad of the pure program ----
def loss_twin(blocks, x):
    return jnp.mean(twin_scan_remat(blocks, x) ** 2)


def loss_pure(blocks, x, keys):
    return jnp.mean(pure_scan(blocks, x, keys)[0] ** 2)


b4, b5 = create_blocks(nnx.Rngs(0)), create_blocks(nnx.Rngs(0))
with fx.handlers(count.init(jnp.int32(0)), log.collect(), noise.seed(7)) as hs4:
    v4, g4 = fxn.value_and_grad(loss_twin)(b4, x)
v5, g5 = nnx.value_and_grad(loss_pure)(b5, x, keys)
print("3 value_and_grad twin vs nnx: value bitwise", same(v4, v5), "grads bitwise", same(g4, g5),
      "grads allclose", jax.tree.all(jax.tree.map(lambda a, b: np.allclose(a, b, atol=1e-6), g4, g5)),
      "count", int(hs4[count]), "keys", hs4[noise].counter, "emits", len(hs4[log]),
      "BN bitwise", same(nnx.state(b4, nnx.BatchStat), nnx.state(b5, nnx.BatchStat)))

# ---- 4. vmap: an ensemble (keys='split') vs effax.vmap over the functional form ----
@nnx.vmap(in_axes=0, out_axes=0)
def create_ensemble(seeds):
    return Block(D, rngs=nnx.Rngs(params=seeds))


def member(block, x):
    y = block(x)
    count.set(count.get() + 1)  # same across the batch: allowed under state='shared'
    log.emit(jnp.mean(y))
    return y + 0.01 * jax.random.normal(noise.next_key(), y.shape)


e1 = create_ensemble(jax.random.split(jax.random.key(0), B))
with fx.handlers(count.init(jnp.int32(0)), log.collect(), noise.seed(7)) as h6:
    y6 = fxn.vmap(member, in_axes=(0, None))(e1, x)
e2 = create_ensemble(jax.random.split(jax.random.key(0), B))
gd, st = nnx.split(e2)


def functional(st, x):
    blk = nnx.merge(gd, st)
    y = member(blk, x)
    return y, nnx.state(blk)


with fx.handlers(count.init(jnp.int32(0)), log.collect(), noise.seed(7)) as h7:
    y7, st7 = fx.vmap(functional, in_axes=(0, None))(st, x)
nnx.update(e2, st7)
# and a Python loop over the members: member b draws from a stream seeded fold_in(K, b)
K = jax.random.fold_in(jax.random.key(7), 0)
loop = []
for b in range(B):
    blk = nnx.merge(gd, jax.tree.map(lambda a: a[b], st))
    loop.append(blk(x) + 0.01 * jax.random.normal(jax.random.fold_in(jax.random.fold_in(K, b), 0), (5, D)))
print("4 vmap twin vs effax.vmap(functional): y bitwise", same(y6, y7), "emits", same(h6[log], h7[log]),
      "count", int(h6[count]), int(h7[count]), "keys", h6[noise].counter, h7[noise].counter,
      "BN bitwise", same(nnx.state(e1, nnx.BatchStat), nnx.state(e2, nnx.BatchStat)),
      "| vs Python loop over members (keys fold_in(fold_in(K,b),0)) allclose(1e-4)", np.allclose(y6, jnp.stack(loop), atol=1e-4),
      "members differ", not np.allclose(y6[0], y6[1]))
print("   max |vmap - loop|", float(jnp.max(jnp.abs(y6 - jnp.stack(loop)))), "max|noise|", 0.01*3)
