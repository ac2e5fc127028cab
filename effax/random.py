"""Keyless versions of the `jax.random` samplers.

Each function takes the same parameters as its `jax.random` namesake minus the key,
and draws the key from `effax.rng` (or the stream given as `stream=`).

**Example:**

>>> import effax
>>> with effax.rng.seed(0):
...     x = effax.random.normal((3,))
>>> x.shape
(3,)

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from . import _trace
from ._discrete import (
    bernoulli as bernoulli,
    categorical as categorical,
    choice as choice,
    draw,
    permutation as permutation,
    randint as randint,
)
from ._random_key import RandomKey, checked_key, rng

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


@_trace.api_boundary
def key(*, stream: RandomKey = rng) -> jax.Array:
    """A fresh key drawn from `stream`: ``stream.next_key()``.

    Use it to call a `jax.random` function that has no keyless version here.

    **Arguments:**

    - `stream`: the key stream to draw from (default `effax.rng`).

    **Returns:** a new key; each call returns a different one.

    **Example:**

    >>> import jax, effax
    >>> with effax.rng.seed(0):
    ...     k0, k1 = effax.random.key(), effax.random.key()
    >>> jax.dtypes.issubdtype(k0.dtype, jax.dtypes.prng_key), k0.shape
    (True, ())
    >>> bool((jax.random.key_data(k0) != jax.random.key_data(k1)).any())
    True
    >>> jax.random.rademacher(k0, (3,)).shape
    (3,)

    """
    return checked_key(stream, "effax.random.key")


@_trace.api_boundary
def normal(shape: Shape = (), dtype: DType = float, *, stream: RandomKey = rng) -> jax.Array:
    """Standard normal samples.

    Calls `jax.random.normal` with the next key of `stream`.

    **Arguments:**

    - `shape`: the shape of the result (default: a scalar).
    - `dtype`: a floating-point dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     x = effax.random.normal((2, 3))
    >>> x.shape, x.dtype
    ((2, 3), dtype('float32'))
    >>> bool(jnp.isfinite(x).all())
    True

    """
    return draw("normal", stream, {"shape": shape, "dtype": dtype})


@_trace.api_boundary
def uniform(
    shape: Shape = (),
    dtype: DType = float,
    minval: ArrayLike = 0.0,
    maxval: ArrayLike = 1.0,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Uniform samples in ``[minval, maxval)``.

    Calls `jax.random.uniform` with the next key of `stream`.

    **Arguments:**

    - `shape`: the shape of the result (default: a scalar).
    - `dtype`: a floating-point dtype.
    - `minval`, `maxval`: the bounds, broadcastable to `shape`.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import effax
    >>> with effax.rng.seed(0):
    ...     x = effax.random.uniform((1000,), minval=-1.0, maxval=1.0)
    >>> x.shape
    (1000,)
    >>> bool((-1 <= x).all() & (x < 1).all())
    True
    >>> noise = effax.RandomKey("noise")  # a stream of its own, seeded separately
    >>> with noise.seed(1):
    ...     y = effax.random.uniform((3,), stream=noise)
    >>> bool((0 <= y).all() & (y < 1).all())
    True

    """
    arguments = {"shape": shape, "dtype": dtype, "minval": minval, "maxval": maxval}
    return draw("uniform", stream, arguments)


@_trace.api_boundary
def truncated_normal(
    lower: ArrayLike,
    upper: ArrayLike,
    shape: Shape | None = None,
    dtype: DType = float,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Standard normal samples truncated to ``[lower, upper]``.

    Calls `jax.random.truncated_normal` with the next key of `stream`.

    **Arguments:**

    - `lower`, `upper`: the bounds, broadcastable to `shape`.
    - `shape`: the shape of the result (default: the broadcast shape of the bounds).
    - `dtype`: a floating-point dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import effax
    >>> with effax.rng.seed(0):
    ...     x = effax.random.truncated_normal(-2.0, 2.0, (100,))
    >>> x.shape, x.dtype
    ((100,), dtype('float32'))
    >>> bool((-2 <= x).all() & (x <= 2).all())
    True

    """
    arguments = {"lower": lower, "upper": upper, "shape": shape, "dtype": dtype}
    return draw("truncated_normal", stream, arguments)


@_trace.api_boundary
def gumbel(shape: Shape = (), dtype: DType = float, *, stream: RandomKey = rng) -> jax.Array:
    """Standard Gumbel samples: `jax.random.gumbel` with the next key of `stream`
    (the arguments are `normal`'s).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     g = effax.random.gumbel((3, 4))
    >>> g.shape, g.dtype
    ((3, 4), dtype('float32'))
    >>> bool(jnp.isfinite(g).all())
    True

    """
    return draw("gumbel", stream, {"shape": shape, "dtype": dtype})


@_trace.api_boundary
def exponential(shape: Shape = (), dtype: DType = float, *, stream: RandomKey = rng) -> jax.Array:
    """Standard exponential samples: `jax.random.exponential` with the next key of
    `stream` (the arguments are `normal`'s).

    **Example:**

    >>> import effax
    >>> with effax.rng.seed(0):
    ...     waits = effax.random.exponential((100,))
    >>> waits.shape, bool((waits >= 0).all())
    ((100,), True)

    """
    return draw("exponential", stream, {"shape": shape, "dtype": dtype})


@_trace.api_boundary
def gamma(
    a: ArrayLike, shape: Shape | None = None, dtype: DType = float, *, stream: RandomKey = rng
) -> jax.Array:
    """Gamma samples with shape parameter `a` and unit scale.

    Calls `jax.random.gamma` with the next key of `stream`.

    **Arguments:**

    - `a`: the shape parameter (positive), broadcastable to `shape`.
    - `shape`: the shape of the result (default: the shape of `a`).
    - `dtype`: a floating-point dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     x = effax.random.gamma(2.0, (100,))
    ...     per_a = effax.random.gamma(jnp.array([1.0, 2.0, 5.0]))
    >>> x.shape, bool((x > 0).all())
    ((100,), True)
    >>> per_a.shape
    (3,)

    """
    return draw("gamma", stream, {"a": a, "shape": shape, "dtype": dtype})


@_trace.api_boundary
def beta(
    a: ArrayLike,
    b: ArrayLike,
    shape: Shape | None = None,
    dtype: DType = float,
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Beta samples in ``[0, 1]``.

    Calls `jax.random.beta` with the next key of `stream`.

    **Arguments:**

    - `a`, `b`: the two (positive) shape parameters, broadcastable to `shape`.
    - `shape`: the shape of the result (default: the broadcast shape of `a` and `b`).
    - `dtype`: a floating-point dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import effax
    >>> with effax.rng.seed(0):
    ...     x = effax.random.beta(2.0, 5.0, (100,))
    >>> x.shape
    (100,)
    >>> bool((0 <= x).all() & (x <= 1).all())
    True

    """
    return draw("beta", stream, {"a": a, "b": b, "shape": shape, "dtype": dtype})


@_trace.api_boundary
def dirichlet(
    alpha: ArrayLike, shape: Shape | None = None, dtype: DType = float, *, stream: RandomKey = rng
) -> jax.Array:
    """Points on the probability simplex.

    Calls `jax.random.dirichlet` with the next key of `stream`.

    **Arguments:**

    - `alpha`: the concentration parameters (positive), along the last axis.
    - `shape`: the batch shape (default: `alpha.shape[:-1]`); the result has shape
      ``shape + alpha.shape[-1:]``.
    - `dtype`: a floating-point dtype.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     p = effax.random.dirichlet(jnp.ones(3), (5,))
    >>> p.shape
    (5, 3)
    >>> bool((p >= 0).all()), bool(jnp.allclose(p.sum(axis=-1), 1.0))
    (True, True)

    """
    return draw("dirichlet", stream, {"alpha": alpha, "shape": shape, "dtype": dtype})


@_trace.api_boundary
def multivariate_normal(
    mean: ArrayLike,
    cov: ArrayLike,
    shape: Shape | None = None,
    dtype: DType = None,
    method: str = "cholesky",
    *,
    stream: RandomKey = rng,
) -> jax.Array:
    """Multivariate normal samples.

    Calls `jax.random.multivariate_normal` with the next key of `stream`.

    **Arguments:**

    - `mean`: the mean, of shape ``(..., n)``.
    - `cov`: the covariance, of shape ``(..., n, n)``, symmetric positive definite.
    - `shape`: the batch shape (default: the broadcast batch shape of `mean` and
      `cov`); the result has shape ``shape + (n,)``.
    - `dtype`: a floating-point dtype (default: that of `mean` and `cov`).
    - `method`: how `cov` is factorised: ``"cholesky"``, ``"eigh"`` or ``"svd"``.
    - `stream`: the key stream to draw from (default `effax.rng`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     x = effax.random.multivariate_normal(jnp.zeros(2), jnp.eye(2), (4,))
    >>> x.shape, x.dtype
    ((4, 2), dtype('float32'))

    """
    arguments = {"mean": mean, "cov": cov, "shape": shape, "dtype": dtype, "method": method}
    return draw("multivariate_normal", stream, arguments)
