"""A data-augmentation and metrics pipeline: random crops and flips, running counters, optional logs."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import acts, dropout, metrics, training
from b10lib.layers import drop

augment = fx.RandomKey("augment")
counters = fx.StateDict[jax.Array]("counters")
flip_prob = fx.Ask[jax.Array]("flip_prob")
crop = fx.Ask[int]("crop", static=True, default=3)
debug_log = fx.Emit[jax.Array]("debug_log")
per_example_seen = fx.State[jax.Array]("per_example_seen")

IMAGES = jnp.arange(2 * 4 * 4, dtype=jnp.float32).reshape(2, 4, 4)


@fx.uses(augment, flip_prob)
def random_flip(img: jax.Array) -> jax.Array:
    flip = fx.random.bernoulli(flip_prob.ask(), stream=augment)
    return jnp.where(flip, img[:, ::-1], img)


@fx.uses(augment, crop)
def random_crop(img: jax.Array) -> jax.Array:
    size = crop.ask()
    i = fx.random.randint((), 0, img.shape[0] - size + 1, stream=augment)
    return jax.lax.dynamic_slice(img, (i, i), (size, size))


@fx.uses(counters)
def count(name: str, n: int | jax.Array = 1) -> jax.Array:
    c = counters.get(name, init=lambda: jnp.int32(0))
    counters.set(name, c + n)
    return c + n


@fx.uses(augment, flip_prob, crop, counters)
def augment_one(img: jax.Array) -> jax.Array:
    count("augmented")
    return random_crop(random_flip(img))


PIPE = (augment.seed(0), flip_prob.provide(jnp.float32(0.5)), counters.init())

# case: augmenting a batch with fx.map, counters created before the loop
with fx.handlers(*PIPE) as hs:
    augment_one(IMAGES[0])
    out = fx.map(augment_one, IMAGES)
print(out.shape, hs[counters])

# case: augmenting with the flip probability missing
with augment.seed(0), counters.init():
    augment_one(IMAGES[0])  # E: effax-unhandled

# case: a crop alone, whose crop size has a default: only the stream is needed
with augment.seed(1):
    print(random_crop(IMAGES[0]).shape)

# case: a crop with no stream at all
random_crop(IMAGES[0])  # E: effax-unhandled


# case: metrics emitted from a row that forgets them
@fx.uses(augment, flip_prob, crop, counters)
def augment_and_log(img: jax.Array) -> jax.Array:
    out = augment_one(img)
    metrics.emit(jnp.mean(out))  # E: effax-undeclared
    return out


with fx.handlers(augment.seed(0), flip_prob.provide(jnp.float32(0.5)), counters.init(), metrics.collect()):
    augment_and_log(IMAGES[0])


# case: an optional debug log: a try around the emit catching what a row raises
@fx.uses(augment, flip_prob, crop, counters)
def augment_maybe_logged(img: jax.Array) -> jax.Array:
    out = augment_one(img)
    try:
        debug_log.emit(jnp.max(out))
    except fx.UndeclaredEffectError:
        pass
    return out


with fx.handlers(*PIPE, debug_log.collect()):
    augment_maybe_logged(IMAGES[1])


# case: the optional log catching the wrong error inside a row
@fx.uses(augment, flip_prob, crop, counters)
def augment_wrongly_logged(img: jax.Array) -> jax.Array:
    out = augment_one(img)
    try:
        debug_log.emit(jnp.max(out))  # E: effax-undeclared
    except fx.UnhandledEffectError:
        pass
    return out


with fx.handlers(augment.seed(2), flip_prob.provide(jnp.float32(0.5)), counters.init(), debug_log.collect()):
    augment_wrongly_logged(IMAGES[1])

# case: an optional emit at module level under contextlib.suppress
with contextlib.suppress(fx.UnhandledEffectError):
    debug_log.emit(jnp.float32(1.0))

# case: an optional emit at module level under a base-class except
try:
    debug_log.emit(jnp.float32(2.0))
except LookupError:
    print("no debug log installed")

# case: an optional emit at module level catching an unrelated error
try:
    debug_log.emit(jnp.float32(3.0))  # E: effax-unhandled
except ValueError:
    pass


# case: per-example counts with vmap's batched state
@fx.uses(per_example_seen, augment, flip_prob)
def seen_flip(img: jax.Array) -> jax.Array:
    per_example_seen.modify(lambda s: s + 1)
    return random_flip(img)


with fx.handlers(per_example_seen.init(jnp.zeros(2)), augment.seed(0), flip_prob.provide(jnp.float32(0.5))) as hs:
    fx.vmap(seen_flip, state="batched")(IMAGES)
print(hs[per_example_seen])

# case: the batched flip with the per-example state missing
with augment.seed(0), flip_prob.provide(jnp.float32(0.5)):
    fx.vmap(seen_flip, state="batched")(IMAGES)  # E: effax-unhandled


# case: feature statistics through a tap, recorded with a pattern
@fx.uses(acts, augment, flip_prob, crop, counters)
def features(img: jax.Array) -> jax.Array:
    x = augment_one(img)
    return acts.tap("feat/mean", jnp.mean(x, axis=0))


with fx.handlers(*PIPE, acts.record("feat/*")) as hs:
    features(IMAGES[0])
print(hs[acts]["feat/mean"].shape)

# case: the features with the tap unhandled
with fx.handlers(augment.seed(5), flip_prob.provide(jnp.float32(0.5)), counters.init()):
    features(IMAGES[0])  # E: effax-unhandled

# case: the tap replaced by a constant during an ablation
with fx.handlers(*PIPE[:2], counters.init(), acts.replace({"feat/mean": jnp.zeros(3)})):
    print(features(IMAGES[0]))


# case: evaluation through dropout: the training flag's default keeps it off, no key stream
@fx.uses()
def eval_features(x: jax.Array) -> jax.Array:
    with training.provide(False):
        return drop(x)  # E: effax-undeclared


eval_features(IMAGES[0])

# case: evaluation through dropout at module level, with its stream installed
with dropout.seed(0):
    print(drop(IMAGES[0]).shape)

# case: the same call with no stream installed
print(drop(IMAGES[0]).shape)  # E: effax-unhandled

# case: a random permutation and a choice of images, default stream and a named one
with fx.rng.seed(0), augment.seed(3):
    order = fx.random.permutation(2)
    pick = fx.random.choice(2, (3,), stream=augment)
print(order, pick)

# case: a choice from the named stream with only the default stream installed
with fx.rng.seed(0):
    fx.random.choice(4, (2,), stream=augment)  # E: effax-unhandled

# case: counters read eagerly inside a compiled call after their entries exist
with counters.init({"augmented": jnp.int32(0)}) as cc:
    fx.jit(lambda: count("augmented", 5))()
print(cc.value)

# case: counting with the counters handler missing, inside a cond
fx.cond(jnp.bool_(True), lambda: count("yes"), lambda: count("no"))  # E: effax-unhandled

# case: metrics pushed through a generic buffer from the library
from b10lib.metrics import Buffer, Tracker, log_metric, smooth  # noqa: E402
from b10lib.effects import ema, step_count  # noqa: E402

with metrics.collect() as mc, step_count.init(jnp.int32(0)):
    Buffer[jax.Array]().push(jnp.float32(1.0))
print(mc.values)

# case: the generic buffer pushed at module level, the counter missing
with metrics.collect():
    Buffer[jax.Array]().push(jnp.float32(1.0))  # E: effax-unhandled

# case: the overloaded smoother with its cell, then without
with ema.init(jnp.float32(0)) as ec:
    smooth(1.0)
    smooth(jnp.float32(2.0))
print(ec.value)
smooth(3.0)  # E: effax-unhandled

# case: metrics logged through builtin map, materialised at once
with metrics.collect() as mc2:
    logged = list(map(log_metric, [jnp.float32(1), jnp.float32(2)]))
print(len(mc2.values))

# case: the same map with no collector
list(map(log_metric, [jnp.float32(1)]))  # E: effax-unhandled
