"""A cond with a batched predicate whose branches make the same State update is
fine under `effax.vmap` (docs/errors.md), wherever the vmap is: directly around the
cond, or around a jit, checkpoint, scan, map or grad that the cond is traced in
(issue 39, item 3). The predicate is batched only once the vmap batches the traced
region, so the cond cannot tell at trace time; the update every branch computes
alike is computed outside the branches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal

import effax as fx

hits = fx.State[jax.Array]("hits")
decay = fx.State[jax.Array]("decay")


def f(x):
    # both branches update `hits` and `decay` the same way, from the same inputs
    def up(v):
        hits.modify(lambda n: n + 1)
        decay.modify(lambda d: d * 0.5)
        return v * 2

    def down(v):
        hits.modify(lambda n: n + 1)
        decay.modify(lambda d: d * 0.5)
        return v - 1

    return fx.cond(x > 0, up, down, x)


def f_python(x):
    """The Python program: an `if`, and the updates once per call."""
    return x * 2 if x > 0 else x - 1


WRAPPED = {
    "vmap(f)": (lambda: fx.vmap(f), 1, lambda x: f_python(x)),
    "vmap(jit(f))": (lambda: fx.vmap(fx.jit(f)), 1, f_python),
    "vmap(checkpoint(f))": (lambda: fx.vmap(fx.checkpoint(f)), 1, f_python),
    "vmap(jit(checkpoint(f)))": (lambda: fx.vmap(fx.jit(fx.checkpoint(f))), 1, f_python),
    "vmap(scan)": (
        lambda: fx.vmap(lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=2)[0]),
        2,
        lambda x: f_python(f_python(x)),
    ),
    "vmap(fori_loop)": (
        lambda: fx.vmap(lambda x: fx.fori_loop(0, 3, lambda i, c: f(c), x)),
        3,
        lambda x: f_python(f_python(f_python(x))),
    ),
    "vmap(map)": (
        lambda: fx.vmap(lambda x: fx.map(f, jnp.stack([x, -x])).sum()),
        2,
        lambda x: f_python(x) + f_python(-x),
    ),
    "vmap(grad)": (
        lambda: fx.vmap(fx.grad(f)),
        1,
        lambda x: 2.0 if x > 0 else 1.0,
    ),
    "jit(vmap(jit(f)))": (lambda: fx.jit(fx.vmap(fx.jit(f))), 1, f_python),
    "vmap(vmap(jit(f)))": (lambda: fx.vmap(fx.vmap(fx.jit(f))), 1, f_python),
}


@pytest.mark.parametrize("name", list(WRAPPED))
def test_identical_updates_in_a_batched_cond_wherever_the_vmap_is(name):
    make, steps, python = WRAPPED[name]
    xs = jnp.array([1.0, -1.0, 2.0, -0.5])
    if name.startswith("vmap(vmap"):
        xs = jnp.stack([xs, -xs])
    with fx.handlers(hits.init(jnp.int32(0)), decay.init(jnp.float32(1.0))) as hs:
        out = make()(xs)
    expected = np.vectorize(python)(np.asarray(xs)).astype(np.float32)
    assert_bitwise_equal(out, expected)
    # shared state: one value across the batch, updated as one call of the Python
    # program updates it
    assert_bitwise_equal(hs[hits], jnp.int32(steps))
    assert_bitwise_equal(hs[decay], jnp.float32(0.5**steps))


def test_updates_that_differ_across_the_batch_are_still_refused_through_a_jit():
    def g(x):
        return fx.cond(
            x > 0,
            lambda v: (hits.modify(lambda n: n + 1), v)[1],
            lambda v: (hits.modify(lambda n: n + 2), v)[1],
            x,
        )

    for wrapped in (fx.vmap(g), fx.vmap(fx.jit(g)), fx.vmap(fx.checkpoint(g))):
        with hits.init(jnp.int32(0)) as cell:
            with pytest.raises(
                fx.EffectLeakError, match=r"State\('hits'\).*differs across the batch"
            ):
                wrapped(jnp.array([1.0, -1.0]))
        assert_bitwise_equal(cell.value, jnp.int32(0))  # nothing written
        # the batched policy takes it, per element, as the Python loop does
        with hits.init(jnp.zeros(2, jnp.int32)) as cell:
            fx.vmap(g, state="batched")(jnp.array([1.0, -1.0]))
        assert_bitwise_equal(cell.value, jnp.array([1, 2], jnp.int32))


def test_an_unbatched_traced_predicate_keeps_the_taken_branch():
    # the hoisting does not change what an ordinary compiled cond computes
    def g(x):
        return fx.cond(
            x > 0,
            lambda v: (hits.modify(lambda n: n + 1), v * 3)[1],
            lambda v: (hits.modify(lambda n: n + 1), v)[1],
            x,
        )

    for x in (1.0, -1.0):
        results = []
        for h in (g, fx.jit(g), fx.checkpoint(g)):
            with hits.init(jnp.int32(5)) as cell:
                results.append((h(jnp.float32(x)), cell.value))
        assert_bitwise_equal(results[0], results[1])
        assert_bitwise_equal(results[0], results[2])
