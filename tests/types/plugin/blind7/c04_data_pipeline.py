"""An image augmentation pipeline: random crops, flips and noise, keyed per example."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp

import effax as fx
from b7lib.effects import train_mode as training
from b7lib.layers import jitter, small_jitter


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    crop: int = 6
    flip: bool = True
    noise: float = 0.05
    channels: tuple[int, ...] = (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class LooseConfig:
    crop: int = 6
    channel_order: list[int] = dataclasses.field(default_factory=lambda: [2, 1, 0])


aug_key = fx.RandomKey("aug_key")
aug_config = fx.Ask[AugmentConfig]("aug_config", static=True)
loose_config = fx.Ask[LooseConfig]("loose_config", static=True)
mean_std = fx.Ask[tuple[jax.Array, jax.Array]]("mean_std")
seen = fx.State[jax.Array]("seen")
dropped = fx.Emit[jax.Array]("dropped")


@fx.uses(aug_key, aug_config)
def random_crop(img: jax.Array) -> jax.Array:
    size = aug_config.ask().crop
    h, w = img.shape[0], img.shape[1]
    i = jax.random.randint(aug_key.next_key(), (), 0, h - size + 1)
    j = jax.random.randint(aug_key.next_key(), (), 0, w - size + 1)
    return jax.lax.dynamic_slice(img, (i, j, 0), (size, size, img.shape[2]))


@fx.uses(aug_key, aug_config)
def random_flip(img: jax.Array) -> jax.Array:
    if not aug_config.ask().flip:
        return img
    flip = jax.random.bernoulli(aug_key.next_key())
    return jnp.where(flip, img[:, ::-1], img)


@fx.uses(mean_std)
def normalise(img: jax.Array) -> jax.Array:
    mean, std = mean_std.ask()
    return (img - mean) / std


AUG_ROW = (aug_key, aug_config, mean_std, fx.rng)


@fx.uses(*AUG_ROW)
def augment(img: jax.Array) -> jax.Array:
    img = normalise(random_flip(random_crop(img)))
    return jitter(img, aug_config.ask().noise)


@fx.uses(aug_key, aug_config, fx.rng)
def augment_unnormalised(img: jax.Array) -> jax.Array:
    img = random_flip(random_crop(img))
    return normalise(img)  # E: effax-undeclared


@fx.uses(*AUG_ROW, seen)
def augment_batch(batch: jax.Array) -> jax.Array:
    seen.modify(lambda n: n + batch.shape[0])
    return fx.vmap(augment, keys="split")(batch)


@fx.uses(*AUG_ROW)
def augment_batch_uncounted(batch: jax.Array) -> jax.Array:
    out = fx.vmap(augment)(batch)
    seen.modify(lambda n: n + batch.shape[0])  # E: effax-undeclared
    return out


def batches(images: jax.Array, size: int) -> Iterator[jax.Array]:
    for start in range(0, images.shape[0], size):
        yield augment_batch(images[start : start + size])


images = jax.random.uniform(jax.random.key(0), (8, 8, 8, 3))
stats_h = mean_std.provide((jnp.full(3, 0.5), jnp.full(3, 0.25)))
base = AugmentConfig()

# case: one image through the whole pipeline
with aug_key.seed(0), fx.rng.seed(1), aug_config.provide(base), stats_h:
    out = augment(images[0])

# case: the pipeline without the default stream that jitter draws from
with aug_key.seed(0), aug_config.provide(base), stats_h:
    augment(images[0])  # E: effax-unhandled

# case: cropping with no configuration
with aug_key.seed(0):
    random_crop(images[0])  # E: effax-unhandled

# case: a pipeline row that forgets the normalisation statistics (provided outside)
with aug_key.seed(0), fx.rng.seed(1), aug_config.provide(base), stats_h:
    augment_unnormalised(images[0])

# case: batches from a generator, each vmapped with split keys
with fx.handlers(aug_key.seed(2), fx.rng.seed(3), aug_config.provide(base), stats_h, seen.init(jnp.int32(0))) as hs:
    shapes = [b.shape for b in batches(images, 4)]
    n_seen = hs[seen]

# case: a batch with its counter missing from the row (a counter outside)
with fx.handlers(aug_key.seed(2), fx.rng.seed(3), aug_config.provide(base), stats_h, seen.init(jnp.int32(0))):
    augment_batch_uncounted(images[:2])

# case: a batch with no counter installed at all
with fx.handlers(aug_key.seed(2), fx.rng.seed(3), aug_config.provide(base), stats_h):
    augment_batch(images[:2])  # E: effax-unhandled

# case: a compiled batch with shared keys
with fx.handlers(aug_key.seed(2), fx.rng.seed(3), aug_config.provide(base), stats_h, seen.init(jnp.int32(0))):
    same = fx.jit(fx.vmap(augment, keys="shared"))(images[:2])

# case: the augmentation mapped over images with fx.map, keys drawn per step
with fx.handlers(aug_key.seed(4), fx.rng.seed(5), aug_config.provide(base), stats_h):
    mapped = fx.map(augment, images[:3])

# case: fx.map with the config given but no statistics
with aug_key.seed(4), fx.rng.seed(5), aug_config.provide(base):
    fx.map(augment, images[:3])  # E: effax-unhandled

# case: a comprehension of flips at module level, configured
with aug_key.seed(6), aug_config.provide(dataclasses.replace(base, flip=False)):
    flipped = [random_flip(img) for img in images[:2]]

# case: a comprehension of flips with no key stream
with aug_config.provide(base):
    flipped = [random_flip(img) for img in images[:2]]  # E: effax-unhandled

# case: the static config is a frozen dataclass holding a tuple: hashable
with aug_config.provide(AugmentConfig(channels=(2, 1, 0))):
    channels = aug_config.ask().channels

# case: a frozen dataclass holding a list is not hashable
with loose_config.provide(LooseConfig(channel_order=[0, 1, 2])):  # E: effax-handler-type
    order = loose_config.ask().channel_order

# case: a loose config from a variable, made with the default list
default_loose = LooseConfig()
loose_h = loose_config.provide(default_loose)  # E: effax-handler-type

# case: a partial of a jitter with a row, keyed
with fx.rng.seed(7):
    tiny = small_jitter(images[0])
    crop_flip = functools.partial(jitter, scale=0.5)(images[0])

# case: the imported partial of jitter called with no stream
small_jitter(images[0])  # E: effax-unhandled


@fx.uses(training, aug_key, aug_config, mean_std, fx.rng, dropped)
def maybe_augment(img: jax.Array) -> jax.Array:
    if training.ask():
        return augment(img)
    dropped.emit(jnp.float32(1.0))
    return img


@fx.uses(training, aug_key, aug_config, mean_std, fx.rng)
def maybe_augment_silent(img: jax.Array) -> jax.Array:
    if training.ask():
        return augment(img)
    dropped.emit(jnp.float32(1.0))  # E: effax-undeclared
    return img


# case: evaluation mode by the static default, with a sink for dropped images
with dropped.collect() as dropped_log:
    kept = maybe_augment(images[0])  # E: effax-unhandled

# case: evaluation mode with no collector for dropped images
maybe_augment(images[0])  # E: effax-unhandled

# case: training mode through an early return, collector outside a narrower row
with training.provide(False), dropped.collect():
    maybe_augment_silent(images[0])  # E: effax-unhandled

# case: training mode on, the whole pipeline installed
with fx.handlers(training.provide(True), aug_key.seed(8), fx.rng.seed(9), aug_config.provide(base), stats_h):
    trained = maybe_augment(images[1])  # E: effax-unhandled

# case: normalisation under its statistics, then without them
with stats_h:
    normed = normalise(images[0])
normalise(images[0])  # E: effax-unhandled
