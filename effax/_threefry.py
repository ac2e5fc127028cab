"""`fold_in` for key streams inside compiled code, as fused arithmetic.

A key stream draws ``fold_in(base_key, counter)``. ``jax.random.fold_in`` of a
threefry key is one call of the threefry hash, which XLA on CPU compiles to a
small loop (five rounds of four mixes): at a few elements its overhead is the cost,
so a loop body drawing two keys pays for two such calls, one more than a
hand-written kernel that splits its key once. Here the same hash is written out
round by round on uint32 scalars, which XLA fuses into the surrounding code:
bitwise the key ``jax.random.fold_in`` returns, for a fraction of its cost. It is
used where it pays, under a trace; eagerly one ``jax.random.fold_in`` dispatch is
cheaper. Keys of other implementations (``rbg``, ``unsafe_rbg``) use
``jax.random.fold_in``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _trace

__all__ = ["fold_in"]

# Threefry-2x32 (Salmon et al. 2011), 20 rounds, as jax.random implements it.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def fold_in(key: jax.Array, data: int | jax.Array, offset: int = 0) -> jax.Array:
    """``jax.random.fold_in(key, data + offset)``, bitwise (the sum taken modulo
    2**32, as the uint32 that ``fold_in`` folds in); fused arithmetic under a trace
    for threefry keys (typed, or raw ``uint32[2]`` of the default threefry).

    Under a trace with a traced `data` this records one equation, the hash with the
    sum and its conversion inside: a key stream's draw j past a traced counter
    (``fold_in(base, counter + j)``) costs its trace no more than that.
    """
    if not (_trace.is_tracer(key) or _trace.is_tracer(data)) or not _is_threefry(key):
        return jax.random.fold_in(key, data + offset if offset else data)
    if isinstance(data, (int, np.integer)):  # a Python count: past int32 too
        count: Any = np.uint32((int(data) + offset) % _UINT32_END)
        folded: jax.Array = _fused(key, count, np.uint32(0))
    else:
        folded = _fused(key, data, np.uint32(offset % _UINT32_END))
    return folded


_UINT32_END = 2**32


@jax.jit
def _fused(key: jax.Array, data: jax.Array, offset: jax.Array) -> jax.Array:
    # One jitted function: a trace drawing many keys records one equation per
    # draw (its jaxpr is traced once per signature), which XLA inlines and fuses.
    # The count is `data + offset` in uint32 arithmetic, which wraps as the int32
    # sum converted to uint32 would.
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    bits = jax.random.key_data(key) if typed else key
    count = lax.convert_element_type(data, jnp.uint32) + offset
    # The barrier keeps XLA from fusing (and so recomputing) the hash into each
    # consumer of the key: at one draw per call, a step whose sampler reads the
    # key in several fusions cost twice the hand-written step's dispatch without
    # it (21.9 against 10.5 us on a 2-core Xeon, benchmarks case 1).
    folded: jax.Array = _barrier(_hash(bits[..., 0], bits[..., 1], count))
    if typed:
        wrapped: jax.Array = jax.random.wrap_key_data(folded, impl=jax.random.key_impl(key))
        return wrapped
    return folded


# (untyped in some JAX versions)
_barrier: Any = lax.optimization_barrier


# key dtype -> whether it is threefry's (typed keys; a raw key's depends on the config)
_THREEFRY_DTYPES: dict[Any, bool] = {}


def _is_threefry(key: jax.Array) -> bool:
    dtype = key.dtype
    known = _THREEFRY_DTYPES.get(dtype)
    if known is not None:
        return known
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        known = str(jax.random.key_impl(key)) == "threefry2x32"
        _THREEFRY_DTYPES[dtype] = known
        return known
    default = getattr(jax.config, "jax_default_prng_impl", None)
    return key.shape[-1:] == (2,) and default == "threefry2x32"


def _hash(k1: Any, k2: Any, data: Any) -> jax.Array:
    """The key data of ``fold_in``: the threefry hash of the count ``(0, data)``."""
    keys = (k1, k2, k1 ^ k2 ^ jnp.uint32(_PARITY))
    x0, x1 = jnp.zeros_like(data) + keys[0], data + keys[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotate_left(x1, r)
        x0 = x0 + keys[(i + 1) % 3]
        x1 = x1 + keys[(i + 2) % 3] + jnp.uint32(i + 1)
    return jnp.stack([x0, x1], axis=-1)


def _rotate_left(x: Any, r: int) -> Any:
    return lax.shift_left(x, jnp.uint32(r)) | lax.shift_right_logical(x, jnp.uint32(32 - r))
