"""Taps: recording, replacing and differentiating intermediates of a small network."""

from __future__ import annotations

import fnmatch

import jax
import jax.numpy as jnp
import numpy as np

import effax as fx
from b6lib import interceptors as ic
from b6lib.effects import acts, params, seen
from b6lib.layers import dense, residual_block

N_LAYERS, D = 3, 4
W = jax.random.normal(jax.random.key(0), (N_LAYERS, D, D)) / jnp.sqrt(D)
P = {
    "l0/w": jnp.eye(D) * 0.5,
    "l0/b": jnp.zeros(D),
    "l1/w": jnp.ones((D, 2)) * 0.1,
    "l1/b": jnp.zeros(2),
}
X = jnp.linspace(-1.0, 1.0, D)


@fx.uses(params, acts)
def mlp(x: jax.Array) -> jax.Array:
    return dense(dense(x, "l0"), "l1")


@fx.uses(acts)
def resnet(x: jax.Array) -> jax.Array:
    h, _ = fx.scan(residual_block, acts.tap("embed", x), W)
    return jnp.sum(h)


@fx.uses(acts)
def unrolled(x: jax.Array) -> jax.Array:
    for i in range(N_LAYERS):
        x, _ = residual_block(x, W[i])
    return jnp.sum(x)


# case: record every site of the MLP, compiled; then only the hidden one
with fx.handlers(params.init(P), acts.record()) as hs:
    y = fx.jit(mlp)(X)
with params.init(P), acts.record("l0") as only_l0:
    fx.jit(mlp)(X)

# case: the MLP's taps with no tap handler at all
with params.init(P):
    y_bad = fx.jit(mlp)(X)  # E: effax-unhandled

# case: a recorder whose pattern matches no site still handles every tap
with params.init(P), acts.record("nothing/*") as nothing:
    y_none = mlp(X)

# case: taps switched off with ignore(), inside a scan over stacked layers
with acts.ignore():
    out = fx.jit(resnet)(X)
    out_eager = resnet(X)

# case: the scan over layers with no tap handler
h_bad, _ = fx.scan(residual_block, X, W)  # E: effax-unhandled
out_bad = fx.jit(resnet)(X)  # E: effax-unhandled


# case: replacing the block outputs with a function, and with recorded rows
def zero_blocks(site: str, value: jax.Array) -> jax.Array:
    return jnp.zeros_like(value) if fnmatch.fnmatch(site, "block") else value


with acts.replace(zero_blocks):
    ablated = fx.jit(resnet)(X)
with acts.record("block") as clean:
    clean_out = fx.jit(resnet)(X)
with acts.replace({"block": clean.value["block"]}):
    replayed = fx.jit(resnet)(-X)

# case: activation patching: one layer at a time, the same compiled program
patched = fx.jit(resnet)
effects = np.zeros(N_LAYERS)
layers = jnp.arange(N_LAYERS)
for i in range(N_LAYERS):
    mask = (layers == i)[:, None]
    with acts.replace({"block": clean.value["block"]}, where={"block": mask}):
        effects[i] = float(patched(-X))

# case: the patching loop forgetting the replacer on its last layer
for i in range(N_LAYERS):
    if i == N_LAYERS - 1:
        effects[i] = float(patched(-X))  # E: effax-unhandled
        break
    with acts.replace({"block": clean.value["block"]}, where={"block": (layers == i)[:, None]}):
        effects[i] = float(patched(-X))

# case: gradients at the sites under fx.grad
with acts.gradients("block", "embed") as grads:
    dx = fx.jit(fx.grad(resnet))(X)
grad_x_act = jnp.sum(grads.value["block"] * clean.value["block"], axis=-1)

# case: the gradient taken with no tap handler
dx_bad = fx.grad(resnet)(X)  # E: effax-unhandled

# case: a mirror interceptor recording values while gradients flow: both handlers outside it
with seen.record("block") as values, acts.gradients("block") as g2, ic.mirror:
    fx.jit(fx.grad(unrolled))(X)

# case: the mirror with its second tap left unhandled
with acts.gradients("block"), ic.mirror:
    fx.grad(unrolled)(X)  # E: effax-unhandled
with seen.record(), ic.mirror:
    fx.jit(unrolled)(X)  # E: effax-unhandled


# case: a network naming its blocks with interceptors installed inside its row
@fx.uses(acts)
def named_network(x: jax.Array) -> jax.Array:
    for i in range(N_LAYERS):
        with fx.intercept(acts, tap=lambda outer, site, v, i=i: outer.tap(f"layer{i}/{site}", v)):
            x, _ = residual_block(x, W[i])
    return jnp.sum(x)


with acts.record("layer*/block") as named:
    fx.jit(named_network)(X)


# case: the naming network also tapping a second family its row does not name
@fx.uses(acts)
def named_network_seen(x: jax.Array) -> jax.Array:
    for i in range(N_LAYERS):
        x, _ = residual_block(x, W[i])
        seen.tap(f"resid{i}", x)  # E: effax-undeclared
    return jnp.sum(x)


with acts.ignore(), seen.record():
    named_network_seen(X)


# case: an interceptor whose function taps `seen`, installed by a function whose row holds both
@fx.uses(acts, seen)
def mirrored(x: jax.Array) -> jax.Array:
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v))):
        return unrolled(x)


with acts.ignore(), seen.record() as mirrored_values:
    mirrored(X)


# case: the same interceptor installed by a function whose row holds only `acts`
@fx.uses(acts)
def mirrored_narrow(x: jax.Array) -> jax.Array:
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v))):
        return unrolled(x)  # E: effax-undeclared


with acts.ignore(), seen.record():
    mirrored_narrow(X)

# case: per-example taps under fx.vmap, recorded
with acts.record("embed") as batched:
    fx.vmap(resnet)(jnp.stack([X, -X, 2 * X]))

# case: vmapped taps with nothing recording them
batched_bad = fx.vmap(resnet)(jnp.stack([X, -X]))  # E: effax-unhandled


# case: a probe class whose method taps and whose property reads the recorder
class Probe:
    def __init__(self, pattern: str) -> None:
        self.recorder = acts.record(pattern)

    @fx.uses(acts)
    def run(self, x: jax.Array) -> jax.Array:
        return resnet(x)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: v.shape for k, v in self.recorder.value.items()}


probe = Probe("block")
with probe.recorder:
    probe.run(X)
probe_shapes = probe.shapes

# case: the probe run outside its recorder
probe_bad = Probe("embed").run(X)  # E: effax-unhandled
