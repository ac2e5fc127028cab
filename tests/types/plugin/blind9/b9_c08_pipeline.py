"""A data-loading and metrics pipeline: shuffling, batching, metric collectors, handlers in variables."""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import DATA_ROW, metrics, noise, steps, verbose
from b9lib.layers import count

shuffle_key = fx.RandomKey("shuffle")
batch_size = fx.Ask[int]("batch_size", static=True)
seen_examples = fx.State[jax.Array]("seen_examples")
accuracy = fx.Emit[jax.Array]("accuracy")

features = jnp.arange(40.0).reshape(20, 2)
labels = (jnp.arange(20) % 2).astype(jnp.int32)

# case: shuffled batches from a key stream


@fx.uses(shuffle_key, batch_size)
def batches(xs: jax.Array, ys: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
    perm = jax.random.permutation(shuffle_key.next_key(), xs.shape[0])
    b = batch_size.ask()
    return [(xs[perm[i : i + b]], ys[perm[i : i + b]]) for i in range(0, xs.shape[0] - b + 1, b)]


with shuffle_key.seed(0), batch_size.provide(5):
    epoch = batches(features, labels)

# case: batching with no batch size

with shuffle_key.seed(0):
    batches(features, labels)  # E: effax-unhandled

# case: metrics per batch with the shared data row


@fx.uses(*DATA_ROW)
def augment_and_measure(xb: jax.Array) -> jax.Array:
    xb = xb + 0.01 * jax.random.normal(noise.next_key(), xb.shape)
    metrics.emit(jnp.mean(xb))
    return xb


with noise.seed(1), metrics.collect() as mc:
    for xb, _ in epoch:
        augment_and_measure(xb)

# case: shared row, collector discarded for evaluation

with noise.seed(1), metrics.discard():
    augment_and_measure(epoch[0][0])

# case: shared row, only the stream installed

with noise.seed(1):
    augment_and_measure(epoch[0][0])  # E: effax-unhandled

# case: accuracy and counting in one evaluation step


@fx.uses(accuracy, seen_examples)
def evaluate_batch(xb: jax.Array, yb: jax.Array) -> jax.Array:
    pred = (xb[:, 0] > 10).astype(jnp.int32)
    acc = jnp.mean(pred == yb)
    accuracy.emit(acc)
    seen_examples.modify(lambda n: n + xb.shape[0])
    return acc


eval_cells = (accuracy.collect(), seen_examples.init(jnp.int32(0)))
with fx.handlers(*eval_cells) as eh:
    for xb, yb in epoch:
        evaluate_batch(xb, yb)

# case: handlers tuple-unpacked into variables

h_acc, h_seen = accuracy.collect(), seen_examples.init(jnp.int32(0))
with h_acc, h_seen:
    evaluate_batch(*epoch[0])
with h_acc:
    evaluate_batch(*epoch[0])  # E: effax-unhandled

# case: a handler variable rebound before the with

eval_handler = seen_examples.init(jnp.int32(0))
eval_handler = accuracy.collect()  # E: assignment
with eval_handler:
    evaluate_batch(*epoch[1])  # E: effax-unhandled

# case: a walrus-bound bundle

with (bundle := fx.handlers(accuracy.collect(), seen_examples.init(jnp.int32(0)))):
    evaluate_batch(*epoch[1])
final_seen = bundle[seen_examples]

# case: a conditional handler that handles different effects

use_counter = False
with seen_examples.init(jnp.int32(0)) if use_counter else accuracy.collect():
    evaluate_batch(*epoch[2])  # E: effax-unhandled

# case: a conditional handler of the same effect either way

quiet = True
with accuracy.discard() if quiet else accuracy.collect(), seen_examples.init(jnp.int32(0)):
    evaluate_batch(*epoch[2])

# case: handle kept in a variable with a spread

counted_eval = fx.handle(evaluate_batch, *eval_cells)
acc0 = counted_eval(*epoch[0])
acc1 = counted_eval(*epoch[1])

# case: handle with one of two cells, called later

partly = fx.handle(evaluate_batch, seen_examples.init(jnp.int32(0)))
with accuracy.collect():
    partly(*epoch[0])
partly(*epoch[1])  # E: effax-unhandled

# case: handle compiled and kept, the collector around the call

fast_partly = fx.handle(evaluate_batch, seen_examples.init(jnp.int32(0)), transform=jax.jit)
with accuracy.collect() as fac:
    fast_partly(*epoch[0])

# case: an optional metric in try/except


@fx.jit
def maybe_measure(xb: jax.Array) -> jax.Array:
    try:
        metrics.emit(jnp.max(xb))
    except fx.UnhandledEffectError:
        pass
    return xb * 2


maybe_measure(features)
with metrics.collect():
    maybe_measure(features)

# case: optional counter with contextlib.suppress

with contextlib.suppress(fx.UnhandledEffectError):
    count()

# case: optional counter guarded by the wrong exception

try:
    count()  # E: effax-unhandled
except ValueError:
    pass

# case: optional effect inside a rowed function with try/except


@fx.uses(accuracy)
def maybe_count(xb: jax.Array) -> jax.Array:
    try:
        seen_examples.modify(lambda n: n + xb.shape[0])
    except fx.UndeclaredEffectError:
        pass
    accuracy.emit(jnp.mean(xb))
    return xb


with accuracy.collect(), seen_examples.init(jnp.int32(0)):
    maybe_count(features)

# case: optional effect in a rowed function guarded too narrowly


@fx.uses(accuracy)
def maybe_count_narrow(xb: jax.Array) -> jax.Array:
    try:
        seen_examples.modify(lambda n: n + xb.shape[0])  # E: effax-undeclared
    except fx.UnhandledEffectError:
        pass
    return xb


with accuracy.collect(), seen_examples.init(jnp.int32(0)):
    maybe_count_narrow(features)

# case: LookupError catches both kinds

with contextlib.suppress(LookupError):
    seen_examples.get()

# case: handlers entered by hand with an ExitStack

with contextlib.ExitStack() as stack:
    stack.enter_context(accuracy.collect())
    stack.enter_context(seen_examples.init(jnp.int32(0)))
    evaluate_batch(*epoch[0])

# case: an ExitStack that forgets one handler

with contextlib.ExitStack() as stack:
    stack.enter_context(accuracy.collect())
    evaluate_batch(*epoch[0])  # limit: handlers entered by hand hide what the rest of the block installs

# case: pipeline stage of an empty row that installs what it needs


@fx.uses()
def run_pipeline(seed: int) -> dict[str, Any]:
    with fx.handlers(shuffle_key.seed(seed), batch_size.provide(4), noise.seed(seed), metrics.collect(), accuracy.collect(), seen_examples.init(jnp.int32(0))) as ph:
        for xb, yb in batches(features, labels):
            evaluate_batch(augment_and_measure(xb), yb)
    return {"seen": ph[seen_examples], "acc": ph[accuracy]}


summary = run_pipeline(3)

# case: pipeline stage that forgets to seed shuffling


@fx.uses()
def run_pipeline_unseeded() -> None:
    with fx.handlers(batch_size.provide(4), accuracy.collect(), seen_examples.init(jnp.int32(0))):
        for xb, yb in batches(features, labels):  # E: effax-undeclared
            evaluate_batch(xb, yb)


with shuffle_key.seed(0):
    run_pipeline_unseeded()

# case: verbose pipeline asks a default inside an empty row


@fx.uses()
def log_epoch(n: int) -> None:
    if verbose.ask():  # E: effax-undeclared
        print("epoch", n)


log_epoch(1)

# case: steps counted per batch in a compiled loop over batches


@fx.uses(steps, accuracy, seen_examples)
def evaluate_all(xs: jax.Array, ys: jax.Array) -> jax.Array:
    def body(c: jax.Array, xy: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        count()
        return c, evaluate_batch(xy[0], xy[1])

    return fx.scan(body, jnp.float32(0), (xs, ys))[1]


stacked_x = features.reshape(4, 5, 2)
stacked_y = labels.reshape(4, 5)
with fx.handlers(steps.init(jnp.int32(0)), accuracy.collect(), seen_examples.init(jnp.int32(0))) as sh:
    per_batch = fx.jit(evaluate_all)(stacked_x, stacked_y)
snap = fx.snapshot(sh)
