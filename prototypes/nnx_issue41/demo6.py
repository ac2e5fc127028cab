"""Spec coverage spot checks: tree mode (graph=False), StateAxes, no-Carry scan,
twin vmap under nnx.jit."""
import os
import sys
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
import effax as fx
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import effax_nnx as fxn

count = fx.State[jax.Array]("count"); log = fx.Emit[jax.Array]("log"); noise = fx.RandomKey("noise")
D, L = 4, 3
x = jnp.arange(5 * D, dtype=jnp.float32).reshape(5, D) / 10
same = lambda a, b: bool(jax.tree.all(jax.tree.map(lambda u, v: np.array_equal(u, v), a, b)))

class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(D, D, rngs=rngs); self.bn = nnx.BatchNorm(D, rngs=rngs)
    def __call__(self, x):
        y = jax.nn.gelu(self.bn(self.linear(x)))
        count.set(count.get() + 1); log.emit(jnp.mean(y))
        return y + 0.01 * jax.random.normal(noise.next_key(), y.shape)

@nnx.split_rngs(splits=L)
@nnx.vmap(in_axes=(0,), out_axes=0)
def create(rngs): return Block(rngs)

def hs(): return (count.init(jnp.int32(0)), log.collect(), noise.seed(7))

def go(name, prog, ref_prog=None):
    try:
        b = create(nnx.Rngs(0))
        with fx.handlers(*hs()) as h:
            y = prog(b)
        print(f"{name:40s} ok count {int(h[count])} keys {h[noise].counter} emits {np.shape(h[log][0])} "
              f"BN moved {not np.allclose(b.bn.mean[...], 0)}")
        return y, b
    except Exception as e:
        print(f"{name:40s} FAILED {type(e).__name__}: {str(e)[:300]}")

ref, _ = go("graph mode (default)", lambda b: fxn.scan(lambda x, blk: blk(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, b))
r = go("graph=False (tree mode)", lambda b: fxn.scan(lambda x, blk: blk(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry, graph=False)(x, b))
if r: print("   tree == graph bitwise", same(r[0], ref))
r = go("graph_updates=False", lambda b: fxn.scan(lambda x, blk: blk(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry, graph_updates=False)(x, b))
if r: print("   == graph bitwise", same(r[0], ref))
sa = nnx.StateAxes({nnx.BatchStat: 0, nnx.Param: 0})
r = go("StateAxes in_axes", lambda b: fxn.scan(lambda x, blk: blk(x), in_axes=(nnx.Carry, sa), out_axes=nnx.Carry)(x, b))
if r: print("   == bitwise", same(r[0], ref))
r = go("no Carry (in_axes=(0, None), out 0)", lambda b: fxn.scan(lambda blk, x: blk(x), in_axes=(0, None), out_axes=0)(b, x))
r = go("vmap over layers (keys=split)", lambda b: fxn.vmap(lambda blk, x: blk(x), in_axes=(0, None))(b, x))
r = go("vmap graph=False", lambda b: fxn.vmap(lambda blk, x: blk(x), in_axes=(0, None), graph=False)(b, x))
r2 = go("vmap under handle(nnx.jit)", lambda b: fx.handle(lambda bb: fxn.vmap(lambda blk, x: blk(x), in_axes=(0, None))(bb, x), transform=nnx.jit)(b))
if r and r2: print("   jit == eager", np.allclose(r[0], r2[0], atol=1e-5))
r = go("vmap keys=shared", lambda b: fxn.vmap(lambda blk, x: blk(x), in_axes=(0, None), keys="shared")(b, x))
