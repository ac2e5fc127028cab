"""Metrics and interpretability on a small residual network: dict metrics emitted and
stacked, activations tapped per layer, recorded, patched and differentiated, site
names prefixed by an interceptor."""

from __future__ import annotations

import fnmatch

import jax
import jax.numpy as jnp

import effax as fx
from b8lib.effects import acts, metrics
from b8lib.layers import Dense

probe = fx.Tap[jax.Array]("probe")
seen = fx.Tap[jax.Array]("seen")
watch = fx.Ask[set[str]]("watch", static=True)
norms = fx.Emit[jax.Array]("norms")

N_LAYERS, D = 3, 4
W = jax.random.normal(jax.random.key(0), (N_LAYERS, D, D)) / 2.0
READOUT = jnp.linspace(-1.0, 1.0, D)
X0 = jnp.ones(D)


@fx.uses(acts)
def block(x: jax.Array) -> jax.Array:
    return acts.tap("out", jnp.tanh(acts.tap("pre", 2.0 * x)))


@fx.uses(acts)
def layer(h: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
    update = acts.tap("update", jnp.tanh(h @ w))
    return h + update, None


@fx.uses(acts)
def network(x: jax.Array) -> jax.Array:
    h, _ = fx.scan(layer, x, W)
    return h @ READOUT


# case: record every layer's update, stacked along the scan
with acts.record("update") as rec:
    y_clean = fx.jit(network)(X0)
print("updates", rec.value["update"].shape)


# case: replay the recording with the second layer's update zeroed
with acts.replace({"update": rec.value["update"].at[1].set(0.0)}):
    y_ablated = fx.jit(network)(X0)
print("ablation effect", float(y_clean - y_ablated))


# case: a rule replacing sites by pattern, a static function
def zero_pre(site: str, value: jax.Array) -> jax.Array:
    return jnp.zeros_like(value) if fnmatch.fnmatch(site, "pre") else value


with acts.replace(zero_pre):
    y_rule = fx.jit(block)(X0)


# case: the tapped network called at module level with nothing handling its taps
y_untapped = network(X0)  # E: effax-unhandled


# case: taps switched off; a layer object from the library taps its output too
dense = Dense(jnp.eye(D), jnp.zeros(D), "dense")
with acts.ignore():
    y_off = dense(network(X0) * jnp.ones(D))


# case: site names prefixed per block by an interceptor installed inside the row
def prefixed(i: int) -> fx.Interceptor[fx.Tap[jax.Array]]:
    return fx.intercept(acts, tap=lambda outer, site, v: outer.tap(f"block{i}/{site}", v))


@fx.uses(acts)
def stacked_blocks(x: jax.Array) -> jax.Array:
    for i in range(3):
        with prefixed(i):
            x = block(x)
    return jnp.sum(x)


with acts.record("*/out") as named:
    fx.jit(stacked_blocks)(X0)
print(sorted(named.value))


# case: a prefixing interceptor at module level, nothing outside it to forward to
to_block0 = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(f"block0/{site}", v))
with to_block0:
    block(X0)  # E: effax-unhandled


# case: the interceptor sends each value to a second tap, which nobody records
with acts.gradients("*out"), fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v))):
    fx.grad(block)(X0)  # E: effax-unhandled


# case: the same chain with the second tap recorded: gradient times activation
with seen.record("*out") as values, acts.gradients("*out") as grads:
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v))):
        fx.jit(fx.grad(lambda x: jnp.sum(block(x))))(X0)
print({s: (values.value[s] * grads.value[s]).shape for s in values.value})


# case: dict metrics from a compiled step, stacked and cleared between steps
@fx.uses(metrics, acts)
def train_metrics(x: jax.Array) -> jax.Array:
    y = block(x)
    metrics.emit({"loss": jnp.sum(y**2)})
    metrics.emit({"norm": jnp.linalg.norm(y)})
    return y * 0.5


with metrics.collect() as collected, acts.ignore():
    x = X0
    for _ in range(3):
        x = fx.jit(train_metrics)(x)
        summary = collected.stacked()
        collected.clear()
print("metric keys", sorted(summary))


# case: a helper reports a norm into an Emit its row does not name
@fx.uses(acts)
def block_with_norm(x: jax.Array) -> jax.Array:
    y = block(x)
    norms.emit(jnp.linalg.norm(y))  # E: effax-undeclared
    return y


with acts.ignore(), norms.collect():
    block_with_norm(X0)


# case: gradients at the tapped sites, from a pure entry point that handles the tap
@fx.uses()
def attribution(x: jax.Array) -> jax.Array:
    with acts.gradients("update") as g:
        fx.grad(network)(x)
    return g.value["update"]  # E: no-any-return


with acts.ignore():
    attr = attribution(X0)


# case: differentiating the tapped network from a function whose row lacks the tap
@fx.uses(norms)
def attribution_leaky(x: jax.Array) -> jax.Array:
    return fx.grad(network)(x)  # E: effax-undeclared, no-any-return


with acts.gradients(), norms.collect():
    attribution_leaky(X0)


# case: a probe tapped under a recorder of another tap
with acts.record():
    probed = probe.tap("input", X0)  # E: effax-unhandled


# case: a probe under its own recorder, in a fori_loop with Python-int bounds
with probe.record() as probes:
    fx.fori_loop(0, 4, lambda i, c: probe.tap("carry", c * 0.5), X0)
print("probe taps", probes.value["carry"].shape)


# case: a static set of watched sites
with watch.provide({"out", "pre"}):  # E: effax-handler-type
    print(watch.ask())


# case: norms emitted per example under fx.vmap, collected once
@fx.uses(norms)
def per_example_norm(x: jax.Array) -> jax.Array:
    n = jnp.linalg.norm(x)
    norms.emit(n)
    return n  # E: no-any-return


with norms.collect() as per_ex:
    fx.vmap(per_example_norm)(jnp.ones((3, D)))
print("per example", per_ex.values[0].shape)


# case: take() hands over what was collected so far; the handled function owns a collector
norm_cell = norms.collect()
handled_norm = fx.handle(per_example_norm, norm_cell)
for row in jnp.eye(2):
    handled_norm(row)
taken = norm_cell.take()
print("taken", len(taken))


# case: a handled function given the tap recorder, called where nothing else is installed
record_probe = fx.handle(block, probe.record())
y_rp = record_probe(X0)  # E: effax-unhandled


# case: the prefixed blocks compiled at module level with only the norms collected
with norms.collect():
    fx.jit(stacked_blocks)(X0)  # E: effax-unhandled


# case: a batch summary vmaps the norm reporter from a function whose row lacks the norms
@fx.uses(acts)
def batch_summary(xs: jax.Array) -> jax.Array:
    ys = fx.vmap(block)(xs)
    return fx.vmap(per_example_norm)(ys)  # E: effax-undeclared


with acts.ignore(), norms.collect():
    batch_summary(jnp.ones((2, D)))
