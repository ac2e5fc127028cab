"""A data pipeline: batches from a generator, random augmentation from a key stream,
running statistics kept by name in a StateDict, counters and drop logs, handlers
entered by an ExitStack, optional metrics guarded by try/except."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp

import effax as fx
from b8lib.effects import running
from b8lib.layers import normalise

augment_keys = fx.RandomKey("augment_keys")
seen = fx.State[jax.Array]("seen")
dropped = fx.Emit[jax.Array]("dropped")
pipeline_metrics = fx.Emit[jax.Array]("pipeline_metrics")
jitter = fx.Ask[float]("jitter", default=0.05)
pipeline_cfg = fx.Ask[dict[str, int]]("pipeline_cfg", static=True)
clip_at = fx.Ask[jax.Array]("clip_at")

DATA = jnp.arange(48.0).reshape(12, 4) / 10.0


def batches(data: jax.Array, size: int) -> Iterator[jax.Array]:
    """Plain batching, no effects."""
    for start in range(0, data.shape[0], size):
        yield data[start : start + size]


# case: augmentation draws noise from its own stream; the jitter has a default
@fx.uses(augment_keys, jitter)
def augment(batch: jax.Array) -> jax.Array:
    return batch + jitter.ask() * fx.random.normal(batch.shape, stream=augment_keys)


with augment_keys.seed(0) as keys:
    out = [augment(b) for b in batches(DATA, 4)]
print("augmented", len(out), "batches,", keys.value.counter, "keys")


# case: preprocessing normalises with running means kept by name
@fx.uses(augment_keys, jitter, running, seen)
def preprocess(batch: jax.Array) -> jax.Array:
    seen.modify(lambda n: n + batch.shape[0])
    return normalise("input", augment(batch))


with fx.handlers(augment_keys.seed(1), running.init(), seen.init(jnp.int32(0))) as hs:
    for b in batches(DATA, 4):
        preprocess(b)
print("seen", int(hs[seen]), "entries", sorted(hs[running]))


# case: a preprocessing step that normalises but does not declare the running statistics
@fx.uses(augment_keys, jitter)
def preprocess_quick(batch: jax.Array) -> jax.Array:
    return normalise("quick", augment(batch))  # E: effax-undeclared


with augment_keys.seed(2), running.init():
    preprocess_quick(DATA[:4])


# case: reading a running count straight from the StateDict, outside the row
@fx.uses(seen)
def count_batches(batch: jax.Array) -> jax.Array:
    n = running.get("batches", init=lambda: jnp.float32(0))  # E: effax-undeclared
    seen.modify(lambda c: c + 1)
    return batch + 0 * n


with seen.init(jnp.int32(0)), running.init():
    count_batches(DATA[:4])


# case: a compiled epoch: the entries created by one eager call, then an effax.scan
@fx.uses(augment_keys, jitter, running, seen)
def epoch(data: jax.Array) -> jax.Array:
    stacked = data.reshape(3, 4, 4)
    _, normed = fx.scan(lambda c, b: (c, preprocess(b)), None, stacked)
    return normed


with fx.handlers(augment_keys.seed(3), running.init(), seen.init(jnp.int32(0))) as hs:
    preprocess(DATA[:4])
    normed = fx.jit(epoch)(DATA)
print("epoch", normed.shape, "seen", int(hs[seen]))


# case: handlers entered through an ExitStack, all of them present
with contextlib.ExitStack() as stack:
    stack.enter_context(augment_keys.seed(4))
    stack.enter_context(running.init())
    counter = stack.enter_context(seen.init(jnp.int32(0)))
    preprocess(DATA[:4])
print("ExitStack run saw", int(counter.value))


# case: an ExitStack that forgets the counter: the plugin does not follow enter_context
with contextlib.ExitStack() as stack:
    stack.enter_context(augment_keys.seed(5))
    stack.enter_context(running.init())
    preprocess(DATA[:4])  # limit: handlers entered by hand (ExitStack.enter_context)


# case: an optional metric inside a function with a row, guarded by LookupError
@fx.uses(augment_keys, jitter)
def augment_and_maybe_report(batch: jax.Array) -> jax.Array:
    out = augment(batch)
    try:
        pipeline_metrics.emit(jnp.mean(out))
    except LookupError:
        pass
    return out


with augment_keys.seed(6), pipeline_metrics.collect() as got:
    augment_and_maybe_report(DATA[:4])
print("metrics reported", len(got.values))


# case: an optional read at module level guarded by the wrong exception
try:
    total_seen = seen.get()  # E: effax-unhandled
except ValueError:
    total_seen = jnp.int32(0)


# case: the same optional read with contextlib.suppress of the right error
total_seen = jnp.int32(-1)
with contextlib.suppress(fx.UnhandledEffectError):
    total_seen = seen.get()


# case: a comprehension over batches at module level with no key stream
aug_all = [augment(b) for b in batches(DATA, 6)]  # E: effax-unhandled


# case: functools.partial binding the batch, called under its handlers
first_batch = functools.partial(preprocess, DATA[:4])
with fx.handlers(augment_keys.seed(7), running.init(), seen.init(jnp.int32(0))):
    first_batch()


# case: batches sorted by a scoring function that performs the clip threshold
@fx.uses(clip_at)
def score(batch: jax.Array) -> float:
    return float(jnp.sum(jnp.minimum(batch, clip_at.ask())))


ordered = sorted(batches(DATA, 4), key=score)  # E: effax-unhandled


# case: the same sort with the threshold provided
with clip_at.provide(jnp.float32(2.0)):
    ordered = sorted(batches(DATA, 4), key=score)


# case: list(map(...)) over an effectful function, nothing seeded
aug_mapped = list(map(augment, batches(DATA, 4)))  # E: effax-unhandled


# case: jax.tree.map of the clip over a dict of batches, with the threshold provided
@fx.uses(clip_at)
def clip(x: jax.Array) -> jax.Array:
    return jnp.minimum(x, clip_at.ask())


with clip_at.provide(jnp.float32(3.0)):
    clipped = jax.tree.map(clip, {"a": DATA[:2], "b": DATA[2:4]})


# case: a static configuration given as a dict
with pipeline_cfg.provide({"batch": 4, "shuffle": 1}):  # E: effax-handler-type
    print(pipeline_cfg.ask())


# case: a handler variable rebound before the with: it holds the later handler
metrics_cell = pipeline_metrics.collect()
metrics_cell = seen.init(jnp.int32(0))  # type: ignore[assignment]
with metrics_cell:
    pipeline_metrics.emit(jnp.float32(1.0))  # E: effax-unhandled


# case: a walrus-bound key stream and a drop log, filtered in a generator consumer
def keep_mask(batch: jax.Array) -> jax.Array:
    return jnp.sum(batch, axis=1) < 6.0


with (seed_cell := augment_keys.seed(8)), dropped.collect() as drops:
    kept: list[jax.Array] = []
    for b in batches(DATA, 4):
        mask = keep_mask(b)
        dropped.emit(jnp.sum(~mask))
        kept.append(augment(b[mask]) if bool(mask.any()) else b[:0])
print("dropped per batch", [int(d) for d in drops.values], "keys", seed_cell.value.counter)


# case: a pipeline class whose __init__ has a row: constructing it draws a permutation
class ShuffledLoader:
    @fx.uses(augment_keys)
    def __init__(self, data: jax.Array, size: int) -> None:
        self.order = fx.random.permutation(data.shape[0], stream=augment_keys)
        self.data = data
        self.size = size

    def __iter__(self) -> Iterator[jax.Array]:
        return batches(self.data[self.order], self.size)


loader = ShuffledLoader(DATA, 4)  # E: effax-unhandled


# case: the loader built under its stream
with augment_keys.seed(9):
    loader = ShuffledLoader(DATA, 4)
print("shuffled first rows", [int(r) for r in loader.order[:4]])


# case: a drop counter guarded inside a function with a row by catching the wrong error
@fx.uses(augment_keys, jitter)
def augment_and_count_drops(batch: jax.Array) -> jax.Array:
    try:
        dropped.emit(jnp.sum(batch < 0))  # E: effax-undeclared
    except fx.UnhandledEffectError:
        pass
    return augment(batch)


with augment_keys.seed(10), dropped.collect():
    augment_and_count_drops(DATA[:4])


# case: preprocessing at module level with only the key stream seeded
with augment_keys.seed(11):
    preprocess(DATA[:4])  # E: effax-unhandled
