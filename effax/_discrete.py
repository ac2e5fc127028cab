"""Keyless discrete draws (`bernoulli`, `categorical`, `randint`, `permutation`,
`choice`), re-exported by `effax.random` with the continuous samplers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from . import _trace
from ._random_key import RandomKey, checked_key, rng

__all__ = ["bernoulli", "categorical", "choice", "permutation", "randint"]

Shape = Sequence[int]
DType = Any
ArrayLike = Any


@_trace.api_boundary
def bernoulli(
    p: ArrayLike = 0.5, shape: Shape | None = None, *, stream: RandomKey = rng
) -> jax.Array:
    """Booleans that are true with probability `p`.

    Calls `jax.random.bernoulli` with the next key of `stream`.

    **Arguments:**

    - `p`: the probability of `True`, broadcastable to `shape`.
    - `shape`: the shape of the result (default: the shape of `p`).
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     mask = effax.random.bernoulli(0.9, (4, 5))
    ...     certain = effax.random.bernoulli(jnp.array([0.0, 1.0]))
    >>> mask.shape, mask.dtype
    ((4, 5), dtype('bool'))
    >>> certain.tolist()
    [False, True]

    """
    return jax.random.bernoulli(checked_key(stream, "effax.random.bernoulli", shape), p, shape)


@_trace.api_boundary
def categorical(
    logits: ArrayLike,
    axis: int = -1,
    shape: Shape | None = None,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Indices drawn with probabilities ``softmax(logits)``.

    Calls `jax.random.categorical` with the next key of `stream`.

    **Arguments:**

    - `logits`: unnormalised log-probabilities; ``-inf`` is never drawn.
    - `axis`: the axis of `logits` that holds the categories.
    - `shape`: the shape of the result (default: `logits.shape` without `axis`).
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     rows = effax.random.categorical(jnp.zeros((2, 3)))
    ...     only_one = effax.random.categorical(jnp.log(jnp.array([0.0, 1.0, 0.0])), shape=(4,))
    >>> rows.shape, bool(((0 <= rows) & (rows < 3)).all())
    ((2,), True)
    >>> only_one.tolist()
    [1, 1, 1, 1]

    """
    return jax.random.categorical(
        checked_key(stream, "effax.random.categorical", shape), logits, axis, shape
    )


@_trace.api_boundary
def randint(
    shape: Shape,
    minval: ArrayLike,
    maxval: ArrayLike,
    dtype: DType = int,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Integers in ``[minval, maxval)``.

    Calls `jax.random.randint` with the next key of `stream`.

    **Arguments:**

    - `shape`: the shape of the result.
    - `minval`, `maxval`: the bounds (`maxval` excluded), broadcastable to `shape`.
    - `dtype`: an integer dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import effax
    >>> with effax.rng.seed(0):
    ...     dice = effax.random.randint((100,), 1, 7)
    >>> dice.shape, dice.dtype
    ((100,), dtype('int32'))
    >>> bool((1 <= dice).all() & (dice < 7).all())
    True

    """
    return jax.random.randint(
        checked_key(stream, "effax.random.randint", shape), shape, minval, maxval, dtype
    )


@_trace.api_boundary
def permutation(
    x: int | ArrayLike, axis: int = 0, independent: bool = False, *, stream: RandomKey = rng
) -> jax.Array:
    """A random permutation of ``arange(x)`` (`x` an int) or of `x` along `axis`.

    Calls `jax.random.permutation` with the next key of `stream`.

    **Arguments:**

    - `x`: an int ``n`` (permute ``arange(n)``) or an array to shuffle along `axis`.
    - `axis`: the axis to shuffle.
    - `independent`: shuffle each slice along `axis` independently.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     order = effax.random.permutation(5)
    ...     rows = effax.random.permutation(jnp.arange(6).reshape(3, 2))
    >>> sorted(order.tolist())
    [0, 1, 2, 3, 4]
    >>> rows.shape, sorted(rows[:, 0].tolist())
    ((3, 2), [0, 2, 4])

    """
    return jax.random.permutation(
        checked_key(stream, "effax.random.permutation"), x, axis, independent
    )


@_trace.api_boundary
def choice(
    a: int | ArrayLike,
    shape: Shape = (),
    replace: bool = True,
    p: ArrayLike | None = None,
    axis: int = 0,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Random elements of `a` (an int ``n`` for ``arange(n)``, or an array).

    Calls `jax.random.choice` with the next key of `stream`.

    **Arguments:**

    - `a`: an int ``n`` (sample from ``arange(n)``) or an array to sample along `axis`.
    - `shape`: the shape of the result (default: a single sample).
    - `replace`: sample with replacement; without it, ``prod(shape)`` must not exceed
      the number of candidates.
    - `p`: the probability of each candidate (default: uniform).
    - `axis`: the axis of `a` to sample along.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     picks = effax.random.choice(10, (3,), replace=False)
    ...     weighted = effax.random.choice(
    ...         jnp.array([10, 20, 30]), (4,), p=jnp.array([0.0, 1.0, 0.0])
    ...     )
    >>> picks.shape, len(set(picks.tolist()))
    ((3,), 3)
    >>> weighted.tolist()
    [20, 20, 20, 20]

    """
    return jax.random.choice(
        checked_key(stream, "effax.random.choice", shape), a, shape, replace, p, axis
    )
