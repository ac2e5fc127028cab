"""Keyless versions of the `jax.random` samplers.

Each function takes the same parameters as its `jax.random` namesake minus the key,
and draws the key from `effax.rng` (or the stream given as `stream=`).

**Example:**

```python
>>> import effax
>>> with effax.rng.seed(0):
...     x = effax.random.normal((3,))
>>> x.shape
(3,)

```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from ._effects import RandomKey, rng

__all__ = [
    "bernoulli",
    "beta",
    "categorical",
    "choice",
    "dirichlet",
    "exponential",
    "gamma",
    "gumbel",
    "key",
    "multivariate_normal",
    "normal",
    "permutation",
    "randint",
    "truncated_normal",
    "uniform",
]

Shape = Sequence[int]
DType = Any
ArrayLike = Any


def key(*, stream: RandomKey = rng) -> jax.Array:
    """A fresh key from `stream` (``stream.next_key()``)."""
    return stream.next_key()


def normal(shape: Shape = (), dtype: DType = float, *, stream: RandomKey = rng) -> jax.Array:
    """`jax.random.normal` with the key drawn from `stream`."""
    return jax.random.normal(stream.next_key(), shape, dtype)


def uniform(
    shape: Shape = (),
    dtype: DType = float,
    minval: ArrayLike = 0.0,
    maxval: ArrayLike = 1.0,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.uniform` with the key drawn from `stream`."""
    return jax.random.uniform(stream.next_key(), shape, dtype, minval, maxval)


def bernoulli(
    p: ArrayLike = 0.5, shape: Shape | None = None, *, stream: RandomKey = rng
) -> jax.Array:
    """`jax.random.bernoulli` with the key drawn from `stream`."""
    return jax.random.bernoulli(stream.next_key(), p, shape)


def categorical(
    logits: ArrayLike,
    axis: int = -1,
    shape: Shape | None = None,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.categorical` with the key drawn from `stream`."""
    return jax.random.categorical(stream.next_key(), logits, axis, shape)


def randint(
    shape: Shape,
    minval: ArrayLike,
    maxval: ArrayLike,
    dtype: DType = int,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.randint` with the key drawn from `stream`."""
    return jax.random.randint(stream.next_key(), shape, minval, maxval, dtype)


def permutation(
    x: int | ArrayLike, axis: int = 0, independent: bool = False, *, stream: RandomKey = rng
) -> jax.Array:
    """`jax.random.permutation` with the key drawn from `stream`."""
    return jax.random.permutation(stream.next_key(), x, axis, independent)


def choice(
    a: int | ArrayLike,
    shape: Shape = (),
    replace: bool = True,
    p: ArrayLike | None = None,
    axis: int = 0,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.choice` with the key drawn from `stream`."""
    return jax.random.choice(stream.next_key(), a, shape, replace, p, axis)


def truncated_normal(
    lower: ArrayLike,
    upper: ArrayLike,
    shape: Shape | None = None,
    dtype: DType = float,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.truncated_normal` with the key drawn from `stream`."""
    return jax.random.truncated_normal(stream.next_key(), lower, upper, shape, dtype)


def gumbel(shape: Shape = (), dtype: DType = float, *, stream: RandomKey = rng) -> jax.Array:
    """`jax.random.gumbel` with the key drawn from `stream`."""
    return jax.random.gumbel(stream.next_key(), shape, dtype)


def exponential(shape: Shape = (), dtype: DType = float, *, stream: RandomKey = rng) -> jax.Array:
    """`jax.random.exponential` with the key drawn from `stream`."""
    return jax.random.exponential(stream.next_key(), shape, dtype)


def gamma(
    a: ArrayLike, shape: Shape | None = None, dtype: DType = float, *, stream: RandomKey = rng
) -> jax.Array:
    """`jax.random.gamma` with the key drawn from `stream`."""
    return jax.random.gamma(stream.next_key(), a, shape, dtype)


def beta(
    a: ArrayLike,
    b: ArrayLike,
    shape: Shape | None = None,
    dtype: DType = float,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.beta` with the key drawn from `stream`."""
    return jax.random.beta(stream.next_key(), a, b, shape, dtype)


def dirichlet(
    alpha: ArrayLike, shape: Shape | None = None, dtype: DType = float, *, stream: RandomKey = rng
) -> jax.Array:
    """`jax.random.dirichlet` with the key drawn from `stream`."""
    return jax.random.dirichlet(stream.next_key(), alpha, shape, dtype)


def multivariate_normal(
    mean: ArrayLike,
    cov: ArrayLike,
    shape: Shape | None = None,
    dtype: DType = None,
    method: str = "cholesky",
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """`jax.random.multivariate_normal` with the key drawn from `stream`."""
    return jax.random.multivariate_normal(stream.next_key(), mean, cov, shape, dtype, method)
