"""cond / switch / fori_loop / while_loop twins with a module (BatchNorm) and
effects, vs the Python program; and what raw NNX / effax.scan do today."""

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
scale = fx.Ask[jax.Array]("scale")
D = 4
x = jnp.arange(5 * D, dtype=jnp.float32).reshape(5, D) / 10


def same(a, b):
    return bool(jax.tree.all(jax.tree.map(lambda u, v: np.array_equal(u, v), a, b)))


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(D, D, rngs=rngs)
        self.bn = nnx.BatchNorm(D, rngs=rngs)

    def __call__(self, x):
        y = jax.nn.gelu(self.bn(self.linear(x))) * scale.ask()
        count.set(count.get() + 1)
        log.emit(jnp.mean(y))
        return y + 0.01 * jax.random.normal(noise.next_key(), y.shape)


def hs():
    return (count.init(jnp.int32(0)), log.collect(), noise.seed(3), scale.provide(jnp.float32(2)))


def run(prog, jit=False):
    m = Block(nnx.Rngs(0))
    f = fx.handle(prog, transform=nnx.jit) if jit else prog
    with fx.handlers(*hs()) as h:
        y = f(m, x)
    return np.asarray(y), int(h[count]), h[noise].counter, [np.asarray(v) for v in h[log]], \
        np.asarray(m.bn.mean[...])


def report(name, a, b):
    print(f"{name:38s} y {np.allclose(a[0], b[0], atol=1e-5)} (bitwise {same(a[0], b[0])}) "
          f"count {a[1]}=={b[1]} keys {a[2]}=={b[2]} "
          f"emits {np.allclose(np.concatenate([np.ravel(v) for v in a[3]]), np.concatenate([np.ravel(v) for v in b[3]]), atol=1e-5)} "
          f"BN {np.allclose(a[4], b[4], atol=1e-5)}")


# cond: module as operand
c_twin = lambda m, x: fxn.cond(jnp.sum(x) > 0, lambda m, x: m(x), lambda m, x: m(-x), m, x)
c_py = lambda m, x: m(x) if jnp.sum(x) > 0 else m(-x)
for jit in (False, True):
    report(f"cond (jit={jit})", run(c_twin, jit), run(c_py))
s_twin = lambda m, x: fxn.switch(1, [lambda m, x: m(x), lambda m, x: m(2 * x)], m, x)
report("switch", run(s_twin), run(lambda m, x: m(2 * x)))


# fori_loop: module in the carry, 3 steps
def f_twin(m, x):
    return fxn.fori_loop(0, 3, lambda i, c: (c[0], c[0](c[1])), (m, x))[1]


def f_py(m, x):
    for _ in range(3):
        x = m(x)
    return x


for jit in (False, True):
    report(f"fori_loop (jit={jit})", run(f_twin, jit), run(f_py))


# while_loop: no emits allowed (as effax.while_loop); State and keys carried
class Quiet(Block):
    def __call__(self, x):
        y = jax.nn.gelu(self.bn(self.linear(x))) * scale.ask()
        count.set(count.get() + 1)
        return y + 0.01 * jax.random.normal(noise.next_key(), y.shape)


def runq(prog):
    m = Quiet(nnx.Rngs(0))
    with fx.handlers(*hs()) as h:
        y = prog(m, x)
    return np.asarray(y), int(h[count]), int(h[noise].counter), [np.zeros(1)], np.asarray(m.bn.mean[...])


w_twin = lambda m, x: fxn.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1], c[1](c[2])),
                                     (jnp.int32(0), m, x))[2]
report("while_loop", runq(w_twin), runq(f_py))

# ---- today: raw NNX refuses, effax.scan drops BN ----
try:
    m = Block(nnx.Rngs(0))
    with fx.handlers(*hs()):
        nnx.scan(lambda c, i: (m(c), None), in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(x, jnp.arange(2))
    print("raw nnx.scan: no error")
except Exception as e:
    print("raw nnx.scan:", type(e).__name__, str(e)[:160].replace("\n", " "))
