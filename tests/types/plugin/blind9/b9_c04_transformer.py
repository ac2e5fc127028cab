"""A single-head transformer block with taps on its intermediates."""

from __future__ import annotations

import fnmatch

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import acts, dropout, init_key, temperature, training
from b9lib.layers import Linear, drop, tapped_dense

seq, d_model = 5, 4
tokens = jnp.linspace(-1.0, 1.0, seq * d_model).reshape(seq, d_model)
k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
wq = jax.random.normal(k1, (d_model, d_model)) * 0.5
wk = jax.random.normal(k2, (d_model, d_model)) * 0.5
wv = jax.random.normal(k3, (d_model, d_model)) * 0.5
w_mlp = jax.random.normal(k4, (d_model, d_model)) * 0.5

attn_scale = fx.Ask[jax.Array]("attn_scale")
attention_maps = fx.Emit[jax.Array]("attention_maps")

# case: attention with taps on scores and output


@fx.uses(acts, temperature)
def attention(x: jax.Array) -> jax.Array:
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = acts.tap("attn/scores", q @ k.T / (jnp.sqrt(d_model) * temperature.ask()))
    probs = jax.nn.softmax(scores, axis=-1)
    return acts.tap("attn/out", probs @ v)


@fx.uses(acts, temperature, training, dropout)
def block(x: jax.Array) -> jax.Array:
    h = x + attention(x)
    h = h + drop(tapped_dense("mlp/hidden", h, w_mlp), 0.1)
    return acts.tap("block/out", h)


with fx.handlers(acts.record(), temperature.provide(jnp.float32(1.0)), dropout.seed(0)) as rh:
    out = fx.jit(block)(tokens)
recorded_sites = sorted(rh[acts])

# case: taps switched off

with acts.ignore(), temperature.provide(jnp.float32(1.0)), dropout.seed(0):
    plain = fx.jit(block)(tokens)

# case: taps with no handler of the tap

with temperature.provide(jnp.float32(1.0)), dropout.seed(0):
    block(tokens)  # E: effax-unhandled

# case: a record handler answers every site, patterns or not

with acts.record("attn/*") as attn_rec, temperature.provide(jnp.float32(1.0)):
    attention(tokens)

# case: replacing the attention output with zeros

zero_out = {"attn/out": jnp.zeros((seq, d_model))}
with acts.replace(zero_out) as rep, temperature.provide(jnp.float32(1.0)), dropout.seed(1):
    patched = fx.jit(block)(tokens)

# case: replace with a rule function


def ablate_hidden(site: str, value: jax.Array) -> jax.Array:
    return jnp.zeros_like(value) if fnmatch.fnmatch(site, "mlp/*") else value


with acts.replace(ablate_hidden), temperature.provide(jnp.float32(1.0)), dropout.seed(1):
    ablated = block(tokens)

# case: a tap written at module level

with acts.ignore():
    acts.tap("embed", tokens)
acts.tap("embed", tokens)  # E: effax-unhandled

# case: a block whose row forgets the tap


@fx.uses(temperature, training, dropout)
def untapped_block(x: jax.Array) -> jax.Array:
    h = x + attention(x)  # E: effax-undeclared
    return drop(h, 0.1)


with acts.ignore(), temperature.provide(jnp.float32(1.0)), dropout.seed(0):
    untapped_block(tokens)

# case: a block handling its taps inside


@fx.uses(temperature, training, dropout)
def quiet_block(x: jax.Array) -> jax.Array:
    with acts.ignore():
        h = x + attention(x)
    return drop(h, 0.1)


with temperature.provide(jnp.float32(1.0)), dropout.seed(0):
    quiet = quiet_block(tokens)

# case: gradients with respect to a tapped site


@fx.uses(acts, temperature)
def block_loss(x: jax.Array) -> jax.Array:
    return jnp.mean(attention(x) ** 2)


with acts.gradients("attn/*") as grads_h, temperature.provide(jnp.float32(1.0)):
    val, g = fx.value_and_grad(block_loss)(tokens)

# case: emitted attention maps under scan over layers


@fx.uses(attention_maps, attn_scale)
def layer_step(h: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
    probs = jax.nn.softmax(attn_scale.ask() * (h @ w) @ h.T, axis=-1)
    attention_maps.emit(probs)
    return h + probs @ h * 0.1, None


stack = jnp.stack([wq, wk, wv])
with attention_maps.collect() as maps, attn_scale.provide(jnp.float32(0.5)):
    h_final, _ = fx.scan(layer_step, tokens, stack)

# case: the scan without the scale

with attention_maps.collect():
    fx.scan(layer_step, tokens, stack)  # E: effax-unhandled

# case: scan inside a function whose row lacks the collector


@fx.uses(attn_scale)
def run_layers(x: jax.Array) -> jax.Array:
    return fx.scan(layer_step, x, stack)[0]  # E: effax-undeclared


with attention_maps.collect(), attn_scale.provide(jnp.float32(0.5)):
    run_layers(tokens)

# case: a linear layer module with a tap in its call

with init_key.seed(0):
    proj = Linear(d_model, 2)
with acts.record() as lin_rec:
    projected = proj(tokens)

# case: calling the layer instance with no tap handler

proj(tokens)  # E: effax-unhandled

# case: property with a row read at module level

with temperature.provide(jnp.float32(2.0)):
    w_scaled = proj.scaled_w
w_unscaled = proj.scaled_w  # E: effax-unhandled

# case: vmapped block over a batch of sequences

batch_tokens = jnp.stack([tokens, -tokens])
with acts.ignore(), temperature.provide(jnp.float32(1.0)):
    batched = fx.vmap(attention)(batch_tokens)

# case: record under vmap lays out taps per element

with acts.record("attn/out") as vrec, temperature.provide(jnp.float32(1.0)):
    fx.vmap(attention)(batch_tokens)

# case: checkpointed attention

remat_attention = fx.checkpoint(attention)
with acts.ignore(), temperature.provide(jnp.float32(1.0)):
    remat_out = remat_attention(tokens)

# case: checkpointed attention missing temperature

with acts.ignore():
    remat_attention(tokens)  # E: effax-unhandled

# case: tap inside a lambda given to cond

with acts.record() as crec:
    signed = fx.cond(tokens[0, 0] > 0, lambda: acts.tap("pos", tokens), lambda: acts.tap("neg", -tokens))
fx.cond(tokens[0, 0] > 0, lambda: acts.tap("pos", tokens), lambda: tokens)  # E: effax-unhandled

# case: attention sharded over devices with shard_map

import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:2]), ("d",))


@fx.uses(acts, temperature)
def per_device_attention(xs: jax.Array) -> jax.Array:
    return attention(xs[0])[None]


sharded_attention = fx.shard_map(per_device_attention, mesh=mesh, in_specs=P("d"), out_specs=P("d"))  # E: no-untyped-call
with acts.record("attn/out") as shrec, temperature.provide(jnp.float32(1.0)):
    sharded_out = sharded_attention(batch_tokens)

# case: sharded attention with the tap but no temperature

with acts.ignore():
    sharded_attention(batch_tokens)  # E: effax-unhandled

# case: a handled function with a recorder kept with it

recorded_block = fx.handle(attention, acts.record())
with temperature.provide(jnp.float32(1.0)):
    recorded_block(tokens)
recorded_block(tokens)  # E: effax-unhandled

# case: patching with a replacer given to handle and jit

patched_attention = fx.handle(attention, acts.replace({"attn/scores": jnp.zeros((seq, seq))}), temperature.provide(jnp.float32(1.0)), transform=jax.jit)
uniform_attn = patched_attention(tokens)

# case: replay of a recording in a fresh replacer

with acts.record("attn/out") as replay_rec, temperature.provide(jnp.float32(1.0)):
    original = attention(tokens)
with acts.replace({"attn/out": replay_rec.value["attn/out"]}), temperature.provide(jnp.float32(3.0)):
    replayed = attention(tokens)

# case: an interceptor over the tap that forwards

tap_logger = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, v * 1.0))
with acts.record() as ir, tap_logger, temperature.provide(jnp.float32(1.0)):
    attention(tokens)
with tap_logger, temperature.provide(jnp.float32(1.0)):
    attention(tokens)  # E: effax-unhandled

# case: a multi-head wrapper with a row lambda in a scan


@fx.uses(acts, temperature)
def multi_head(x: jax.Array, n_heads: int = 2) -> jax.Array:
    head = fx.uses(acts, temperature)(lambda c, _: (c + 0.5 * attention(x), None))
    return fx.scan(head, jnp.zeros_like(x), None, length=n_heads)[0]


with acts.ignore(), temperature.provide(jnp.float32(1.0)):
    mh = multi_head(tokens)

# case: the multi-head scan inside a row without taps


@fx.uses(temperature)
def heads_only(x: jax.Array) -> jax.Array:
    head = fx.uses(acts, temperature)(lambda c, _: (c + attention(x), None))
    return fx.scan(head, jnp.zeros_like(x), None, length=2)[0]  # E: effax-undeclared


with acts.ignore(), temperature.provide(jnp.float32(1.0)):
    heads_only(tokens)
