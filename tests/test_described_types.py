"""One helper compares and describes a pytree's structure, shapes and dtypes
(`effax._boundary.signature`): a carry that changed type across a traced
boundary, the values the branches of a cond emit, and a snapshot restored into
its handlers are compared and named alike (issue 40 item 5: there were three
near-duplicate `_signature` helpers, describing the same leaves differently)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx
from effax import _boundary

total = fx.State[jnp.ndarray]("total")
log = fx.Emit[jnp.ndarray]("log")

# how each error describes a tree of one int32 scalar and one of one float32[3]
INT = r"PyTreeDef\(\*\) with leaves \[int32\[\]\]"
FLOATS = r"PyTreeDef\(\*\) with leaves \[float32\[3\]\]"
# (what a cond's branch emits is the tuple of its emitted values)
EMITTED_INT = r"PyTreeDef\(\(\*,\)\) with leaves \[int32\[\]\]"
EMITTED_FLOATS = r"PyTreeDef\(\(\*,\)\) with leaves \[float32\[3\]\]"


@pytest.mark.parametrize("wrapper", ["eager", "jit", "scan", "vmap"])
def test_branches_emitting_different_types_are_described_as_carries_are(wrapper):
    def run(x):
        return fx.cond(
            True,
            lambda y: log.emit(jnp.int32(1)) or y,
            lambda y: log.emit(jnp.ones(3)) or y,
            x,
        )

    call = {
        "eager": lambda: run(1.0),
        "jit": lambda: fx.jit(run)(1.0),
        "scan": lambda: fx.scan(lambda c, _: (run(c), None), 1.0, None, length=1),
        "vmap": lambda: fx.vmap(run)(jnp.ones(2)),
    }[wrapper]
    with log.collect() as collector:
        with pytest.raises(
            fx.EffectUsageError,
            match=rf"Emit\('log'\) emitted different numbers or kinds of values in the "
            rf"branches of effax.cond \(branch 0: {EMITTED_INT}; branch 1: {EMITTED_FLOATS}\)",
        ):
            call()
    assert collector.values == []


@pytest.mark.parametrize("wrapper", ["jit", "scan", "checkpoint"])
def test_a_carry_changing_type_is_described_by_the_same_helper(wrapper):
    body = lambda: total.set(jnp.ones(3))
    call = {
        "jit": lambda: fx.jit(body)(),
        "scan": lambda: fx.scan(lambda c, _: (body(), c)[1], 0.0, None, length=1),
        "checkpoint": lambda: fx.checkpoint(lambda x: (body(), x)[1])(1.0),
    }[wrapper]
    with total.init(jnp.int32(0)) as cell:
        with pytest.raises(
            fx.StateTypeError,
            match=rf"State\('total'\) changed its type across a traced boundary: it entered "
            rf"as {INT} and left as {FLOATS}",
        ):
            call()
        assert int(cell.value) == 0
    with total.init(jnp.int32(0)) as cell:  # the eager answer: the state takes the value
        body()
        assert cell.value.shape == (3,)


def test_a_snapshot_that_does_not_fit_is_described_by_the_same_helper():
    with total.init(jnp.int32(0)) as cell:
        with pytest.raises(
            fx.StateTypeError,
            match=rf"The snapshot of State\('total'\) does not fit its handler: it holds "
            rf"{FLOATS}, the handler {INT}\.",
        ):
            fx.restore({"total": np.ones(3, np.float32)}, cell)
        assert int(cell.value) == 0


def test_the_signature_of_a_tree():
    """Structure, shapes and dtypes; JAX's dtype of a Python or 64-bit NumPy number
    unless `exact` (a saved snapshot keeps its own); a leaf with no dtype named by
    its type."""
    tree = {"a": 1.0, "b": np.zeros(2, np.float64), "c": "text"}
    treedef, leaves = _boundary.signature(tree)
    assert treedef == jax.tree.structure(tree)
    assert leaves == (((), jnp.dtype("float32")), ((2,), jnp.dtype("float32")), ((), str))
    _, exact = _boundary.signature(tree, exact=True)
    assert exact == (((), np.dtype("float64")), ((2,), np.dtype("float64")), ((), np.dtype("<U4")))
    described = _boundary.describe_signature(_boundary.signature(tree))
    assert described.endswith("with leaves [float32[], float32[2], str[]]")


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
@pytest.mark.parametrize("traced", [False, True])
def test_zeros_of_a_key_type_keep_its_implementation(impl, traced):
    """`_boundary.zeros_like` (stand-ins for values nothing reads) of a key type:
    zero key data of the same implementation, through public JAX only."""
    key = jax.random.split(jax.random.key(1, impl=impl), 3)
    aval = jax.typeof(key)
    if traced:
        out = jax.jit(lambda: jax.random.key_data(_boundary.zeros_like(aval, traced=True)))()
        assert out.shape == jax.random.key_data(key).shape
        assert not np.asarray(out).any()
        return
    zeros = _boundary.zeros_like(aval)
    assert zeros.dtype == key.dtype and zeros.shape == (3,)
    assert jax.random.key_impl(zeros) == jax.random.key_impl(key)
    assert not np.asarray(jax.random.key_data(zeros)).any()
