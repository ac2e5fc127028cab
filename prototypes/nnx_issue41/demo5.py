"""Taps through the twins: recorded per layer in the twin scan (== the scan's
per-layer outputs), tap gradients under the twin value_and_grad (== a hand-written
perturbation), parameter grads bitwise nnx.value_and_grad's; a traced Ask."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import effax as fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import effax_nnx as fxn  # noqa: E402

acts = fx.Tap[jax.Array]("acts")
scale = fx.Ask[jax.Array]("scale")
D, L = 4, 3
x = jnp.arange(5 * D, dtype=jnp.float32).reshape(5, D) / 10
TAP = True


def same(a, b):
    return bool(jax.tree.all(jax.tree.map(lambda u, v: np.array_equal(u, v), a, b)))


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(D, D, rngs=rngs)
        self.bn = nnx.BatchNorm(D, rngs=rngs)

    def __call__(self, x):
        y = jax.nn.gelu(self.bn(self.linear(x)))
        return (acts.tap("out", y) if TAP else y) * (scale.ask() if TAP else 1.5)


@nnx.split_rngs(splits=L)
@nnx.vmap(in_axes=(0,), out_axes=0)
def create(rngs):
    return Block(rngs)


def stack_fwd(blocks, x, impl, eps=None):
    if eps is None:
        @impl(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
        def fwd(x, block):
            y = block(x)
            return y, y

        return fwd(x, blocks)
    # hand-written perturbation of the site: y_l := y_l + eps_l (before * scale)
    @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=(nnx.Carry, 0))
    def fwd2(x, block, e):
        y = jax.nn.gelu(block.bn(block.linear(x)))
        y = (y + e) * 1.5
        return y, y

    return fwd2(x, blocks, eps)


# 1. recorded taps == per-layer outputs of the scan
b1 = create(nnx.Rngs(0))
with fx.handlers(acts.record(), scale.provide(jnp.float32(1.5))) as h:
    y, per_layer = stack_fwd(b1, x, fxn.scan)
rec = h[acts]["out"]
print("recorded taps shape", rec.shape, "== per-layer outputs/1.5:", np.allclose(rec * 1.5, per_layer, atol=0))

# 2. tap gradients + parameter grads under the twin value_and_grad (inside a twin scan)
def loss_twin(blocks, x):
    return jnp.mean(stack_fwd(blocks, x, fxn.scan)[0] ** 2)


b2 = create(nnx.Rngs(0))
with fx.handlers(acts.gradients(), scale.provide(jnp.float32(1.5))) as hg:
    v2, g2 = fxn.value_and_grad(loss_twin)(b2, x)
tapg = hg[acts]["out"]

TAP = False
b3 = create(nnx.Rngs(0))
eps0 = jnp.zeros((L, 5, D))


def loss_pure(blocks, x, eps):
    return jnp.mean(stack_fwd(blocks, x, None, eps)[0] ** 2)


v3, (g3, ge) = nnx.value_and_grad(loss_pure, argnums=(0, 2))(b3, x, eps0)
b4 = create(nnx.Rngs(0))
v4, g4 = nnx.value_and_grad(lambda b, x: jnp.mean(stack_fwd(b, x, nnx.scan)[0] ** 2))(b4, x)
print("value twin vs nnx bitwise", same(v2, v4), "| param grads bitwise", same(g2, g4),
      "| tap grads shape", tapg.shape, "allclose hand perturbation", np.allclose(tapg, ge, atol=1e-7),
      "bitwise", same(tapg, ge))
print("BN stats twin vs nnx bitwise", same(nnx.state(b2, nnx.BatchStat), nnx.state(b4, nnx.BatchStat)))

# 3. eager retracing of the twin (a new inner per call): count traces
TAP = True
traces = []


def body(x, block):
    traces.append(1)
    return block(x)


b5 = create(nnx.Rngs(0))
with fx.handlers(acts.ignore(), scale.provide(jnp.float32(1.5))):
    for _ in range(3):
        fxn.scan(body, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, b5)
print("eager twin scan: body traced", len(traces), "times in 3 calls")
traces.clear()
TAP = False
for _ in range(3):
    nnx.scan(lambda x, b: (traces.append(1), b(x) * 1.5)[1], in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, b5)
print("eager raw nnx.scan (new lambda each call): traced", len(traces), "times")
