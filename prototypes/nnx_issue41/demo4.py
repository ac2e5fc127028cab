"""NNX's own Dropout/Rngs streams inside the twin scan (with nnx.split_rngs) next
to effax effects; and what raw nnx.scan / effax.scan do today."""

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
D, L = 4, 3
x = jnp.arange(5 * D, dtype=jnp.float32).reshape(5, D) / 10
EFFECTS = True


def _data(a):
    return jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a


def same(a, b):
    return bool(jax.tree.all(jax.tree.map(lambda u, v: np.array_equal(_data(u), _data(v)), a, b)))


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(D, D, rngs=rngs)
        self.bn = nnx.BatchNorm(D, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)  # NNX's own stream, not effax's

    def __call__(self, x):
        y = self.dropout(jax.nn.gelu(self.bn(self.linear(x))))
        if EFFECTS:
            count.set(count.get() + 1)
            log.emit(jnp.mean(y))
        return y


class Model(nnx.Module):  # 06_scan_over_layers' shape: split_rngs + vmap create, scan apply
    def __init__(self, rngs):
        @nnx.split_rngs(splits=L)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs):
            return Block(rngs)

        self.blocks = create(rngs)

    def __call__(self, x, scan_impl):
        @scan_impl(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def fwd(x, block):
            return block(x)

        return fwd(x, self.blocks)


m1, m2 = Model(nnx.Rngs(0)), Model(nnx.Rngs(0))
with fx.handlers(count.init(jnp.int32(0)), log.collect()) as h:
    y1 = m1(x, fxn.scan)
    y1b = m1(x, fxn.scan)
EFFECTS = False
y2 = m2(x, nnx.scan)
y2b = m2(x, nnx.scan)
print("NNX Dropout streams in twin scan vs nnx.scan: y bitwise", same((y1, y1b), (y2, y2b)),
      "state bitwise", same(nnx.state(m1), nnx.state(m2)), "count", int(h[count]),
      "dropped something", bool(jnp.any(y1 == 0)))

# ---- today ----
EFFECTS = True
try:
    with count.init(jnp.int32(0)):
        nnx.scan(lambda c, i: (count.set(count.get() + 1), (c, None))[1],
                 in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(x, jnp.arange(2))
    print("raw nnx.scan + State: no error")
except Exception as e:
    print("raw nnx.scan + State:", type(e).__name__, "|", str(e)[:200].replace("\n", " "))

m3 = Model(nnx.Rngs(0))
before = np.asarray(m3.blocks.bn.mean[...])
m3.blocks.dropout.deterministic = True  # effax.scan can't carry NNX rng state either
with fx.handlers(count.init(jnp.int32(0)), log.collect()) as h:
    fx.scan(lambda c, b: (b(c), None), x, m3.blocks)
print("effax.scan over stacked module today: BN mean unchanged (update lost):",
      np.array_equal(before, np.asarray(m3.blocks.bn.mean[...])), "count", int(h[count]))
