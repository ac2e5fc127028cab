"""Shared test utilities: comparing pytrees the way transparency promises."""

import jax
import numpy as np


def as_bits(leaf):
    """A NumPy array of `leaf`'s exact bits (typed keys compared by key data)."""
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.atleast_1d(np.asarray(leaf))


def _compare(a, b, *, float_rtol):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b, f"{tree_a} != {tree_b}"
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = as_bits(x), as_bits(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
        if float_rtol and np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=float_rtol, atol=float_rtol)
        else:
            np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


def assert_bitwise_equal(a, b):
    """Same structure, dtypes and shapes, and bit-identical leaves (keys included)."""
    _compare(a, b, float_rtol=0.0)


def assert_transparent(compiled, eager, *, rtol=1e-6):
    """What a compiled run must share with the eager run of the same program.

    Keys, integers and booleans bit for bit. Floating-point leaves to within a few
    ulps: XLA fuses a compiled program's arithmetic (e.g. a reduction) differently
    from op-by-op eager dispatch, which no effect system can change; the same
    program compiled two ways (nested handles, effax vs hand-plumbed) is compared
    bitwise with `assert_bitwise_equal`.
    """
    _compare(compiled, eager, float_rtol=rtol)
