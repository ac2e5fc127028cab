"""A tiny causal language model with one attention layer, sampled with a temperature."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import acts, dropout, n_heads, temperature, training
from b10lib.layers import drop, tempered_softmax

VOCAB, DIM, T = 11, 8, 5
attn_scores = fx.Emit[jax.Array]("attn_scores")
kv_cache = fx.State[jax.Array]("kv_cache")
top_k = fx.Ask[int]("top_k", static=True, default=3)

_k = jax.random.split(jax.random.key(0), 4)
EMBED = jax.random.normal(_k[0], (VOCAB, DIM)) * 0.1
WQ = jax.random.normal(_k[1], (DIM, DIM)) * 0.1
WK = jax.random.normal(_k[2], (DIM, DIM)) * 0.1
WO = jax.random.normal(_k[3], (DIM, VOCAB)) * 0.1
TOKENS = jnp.array([1, 4, 2, 7, 3])


@fx.uses(n_heads, attn_scores, acts)
def attention(h: jax.Array) -> jax.Array:
    heads = n_heads.ask()
    q = (h @ WQ).reshape(h.shape[0], heads, -1)
    k = (h @ WK).reshape(h.shape[0], heads, -1)
    s = jnp.einsum("thd,shd->hts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((h.shape[0], h.shape[0]), bool))
    w = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1)
    attn_scores.emit(jnp.mean(w))
    out = jnp.einsum("hts,shd->thd", w, k).reshape(h.shape[0], -1)
    return acts.tap("attn/out", out)


@fx.uses(n_heads, attn_scores, acts, training, dropout)
def logits_of(tokens: jax.Array) -> jax.Array:
    h = EMBED[tokens]
    h = h + drop(attention(h), 0.1)
    return h @ WO


@fx.uses(n_heads, attn_scores, acts, training, dropout, temperature)
def next_token_probs(tokens: jax.Array) -> jax.Array:
    return tempered_softmax(logits_of(tokens)[-1])


EVAL = (n_heads.provide(2), attn_scores.discard(), acts.ignore(), dropout.seed(0))

# case: evaluation under a bundle spread from a tuple
with fx.handlers(*EVAL, temperature.provide(jnp.float32(1.0))):
    p = next_token_probs(TOKENS)
print(p.shape)

# case: probabilities with no temperature installed
with fx.handlers(*EVAL):
    next_token_probs(TOKENS)  # E: effax-unhandled

# case: a handled function given the spread evaluation handlers, temperature from outside
probs_fn = fx.handle(next_token_probs, *EVAL)
with temperature.provide(jnp.float32(0.7)):
    print(probs_fn(TOKENS).sum())

# case: the same handled function called bare
probs_fn_2 = fx.handle(next_token_probs, *EVAL)
probs_fn_2(TOKENS)  # E: effax-unhandled

# case: attention with the attention-score collector missing
with n_heads.provide(2), acts.ignore():
    attention(EMBED[TOKENS])  # E: effax-unhandled


# case: greedy decoding that forgets the tap in its row
@fx.uses(n_heads, attn_scores, training, dropout, temperature)
def greedy(tokens: jax.Array) -> jax.Array:
    p = next_token_probs(tokens)  # E: effax-undeclared
    return jnp.argmax(p)


with fx.handlers(*EVAL, temperature.provide(jnp.float32(1.0))):
    greedy(TOKENS)


# case: sampling a token from a stream given by name
sample_key = fx.RandomKey("sample_key")


@fx.uses(n_heads, attn_scores, acts, training, dropout, temperature, sample_key)
def sample_next(tokens: jax.Array) -> jax.Array:
    logits = logits_of(tokens)[-1] / temperature.ask()
    return fx.random.categorical(logits, stream=sample_key)


with fx.handlers(*EVAL, temperature.provide(jnp.float32(0.8)), sample_key.seed(3)):
    print(sample_next(TOKENS))


# case: sampling from the default stream with no rng in the row
@fx.uses(n_heads, attn_scores, acts, training, dropout, temperature)
def sample_default(tokens: jax.Array) -> jax.Array:
    logits = logits_of(tokens)[-1]
    return fx.random.categorical(logits / temperature.ask())  # E: effax-undeclared


with fx.handlers(*EVAL, temperature.provide(jnp.float32(0.8)), fx.rng.seed(0)):
    sample_default(TOKENS)


# case: top-k filtering: the default answers, the row holds it
@fx.uses(top_k)
def top_k_mask(logits: jax.Array) -> jax.Array:
    kth = jnp.sort(logits)[-top_k.ask()]
    return jnp.where(logits >= kth, logits, -jnp.inf)


print(top_k_mask(jnp.arange(6.0)))
with top_k.provide(2):
    print(top_k_mask(jnp.arange(6.0)))


# case: a decoder that filters top-k without it in its row, under a caller's provider
@fx.uses(temperature)
def filtered_probs(logits: jax.Array) -> jax.Array:
    return tempered_softmax(top_k_mask(logits))  # E: effax-undeclared


with top_k.provide(4), temperature.provide(jnp.float32(1.0)):
    filtered_probs(jnp.arange(6.0))


# case: autoregressive decoding with a KV-cache state and a fori_loop
@fx.uses(kv_cache)
def decode_step(i: int, last: jax.Array) -> jax.Array:
    kv_cache.modify(lambda c: c.at[i].set(EMBED[last]))
    return jnp.argmax(kv_cache.get()[i] @ WO)


with kv_cache.init(jnp.zeros((4, DIM))) as cache:
    final = fx.fori_loop(0, 4, decode_step, jnp.int32(1))
print(final, cache.value.shape)

# case: the same loop with no cache handler
fx.fori_loop(0, 4, decode_step, jnp.int32(1))  # E: effax-unhandled

# case: recording the attention output tap while decoding greedily, compiled
with fx.handlers(*EVAL[:3], dropout.seed(1), temperature.provide(jnp.float32(1.0))):
    with acts.record("attn/*") as rec:
        fx.jit(next_token_probs)(TOKENS)
print(rec.value["attn/out"].shape)


# case: training mode flips dropout on; the row names it
@fx.uses(n_heads, attn_scores, acts, dropout, training)
def train_logits(tokens: jax.Array) -> jax.Array:
    with training.provide(True):
        return logits_of(tokens)


with n_heads.provide(2), attn_scores.collect() as sc, acts.ignore(), dropout.seed(5):
    train_logits(TOKENS)
print(len(sc.values))

# case: a walrus-bound scores collector, n_heads missing
with (sc2 := attn_scores.collect()), acts.ignore(), dropout.seed(0):
    logits_of(TOKENS)  # E: effax-unhandled
print(sc2.values)


# case: a vocabulary class whose body asks the temperature where the class is defined
class Vocab:
    size = VOCAB
    softness = temperature.ask()  # E: effax-unhandled


# case: the same class body under a provider
with temperature.provide(jnp.float32(1.0)):

    class WarmVocab:
        size = VOCAB
        softness = temperature.ask()


print(WarmVocab.softness)


# case: beam scores by fx.map over beams, everything in the row
@fx.uses(n_heads, attn_scores, acts, training, dropout, temperature)
def beam_scores(beams: jax.Array) -> jax.Array:
    return fx.map(lambda b: jnp.max(next_token_probs(b)), beams)


BEAMS = jnp.stack([TOKENS, TOKENS[::-1]])
with fx.handlers(n_heads.provide(2), attn_scores.collect(), acts.ignore(), dropout.seed(0), temperature.provide(jnp.float32(1.0))):
    print(beam_scores(BEAMS))

# case: beam scores with four heads requested as a list
head_list = fx.Ask[list[int]]("head_list", static=True)
with head_list.provide([2, 2]), n_heads.provide(2):  # E: effax-handler-type
    fx.jit(fx.uses(head_list)(lambda: len(head_list.ask())))()

# case: a list of decoders written in place, the first read by number, nothing installed
[greedy, sample_next][0](TOKENS)  # E: effax-unhandled


# case: decoding until an end token with fx.while_loop, the cache in the row
@fx.uses(kv_cache)
def decode_until(limit: int) -> jax.Array:
    def cond_fn(c: tuple[jax.Array, jax.Array]) -> jax.Array:
        return (c[0] < limit) & (c[1] != 0)

    def body_fn(c: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return c[0] + 1, decode_step(c[0], c[1])  # pyright: ignore[reportArgumentType]  # E: arg-type

    return fx.while_loop(cond_fn, body_fn, (jnp.int32(0), jnp.int32(3)))[0]  # E: no-any-return


with kv_cache.init(jnp.zeros((4, DIM))):
    print(decode_until(4))

# case: decoding until an end token with no cache installed
decode_until(4)  # E: effax-unhandled

# case: attention scores summed by an interceptor that rescales before collecting
rescale = fx.intercept(attn_scores, emit=lambda outer, v: outer.emit(v * 10))
with n_heads.provide(2), acts.ignore(), attn_scores.collect() as sc3, rescale:
    attention(EMBED[TOKENS])
print(sc3.values)
