"""Key draws inside compiled code (issue 16): fused, and still bit for bit
``fold_in(base, c + i*k + j)`` for draw j of step i, eagerly and compiled, for every
key implementation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx
from effax import _threefry
from tests.helpers import assert_bitwise_equal

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

SEEDS = {
    "threefry (typed)": lambda: jax.random.key(3),
    "threefry (raw uint32[2])": lambda: jax.random.PRNGKey(3),
    "rbg": lambda: jax.random.key(3, impl="rbg"),
    "unsafe_rbg": lambda: jax.random.key(3, impl="unsafe_rbg"),
}


def _expected(base, start, steps, per_step):
    return [
        [jax.random.fold_in(base, start + i * per_step + j) for j in range(per_step)]
        for i in range(steps)
    ]


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("start", [0, 5, 2**31 - 3, 2**32 - 7])
@pytest.mark.parametrize("seed", SEEDS)
def test_draws_in_a_compiled_loop_are_fold_in_of_the_counter(seed, start):
    steps, per_step = 3, 2
    base = SEEDS[seed]()

    def body(c, _):
        return c, tuple(fx.rng.next_key() for _ in range(per_step))

    with fx.rng.seed(base) as stream:
        stream.counter = start
        compiled = fx.jit(lambda: fx.scan(body, 0, None, length=steps)[1])()
    with fx.rng.seed(base) as stream:
        stream.counter = start
        eager = [[fx.rng.next_key() for _ in range(per_step)] for _ in range(steps)]
    want = _expected(base, start, steps, per_step)
    assert_bitwise_equal([[compiled[j][i] for j in range(per_step)] for i in range(steps)], want)
    assert_bitwise_equal(eager, want)


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("seed", SEEDS)
def test_the_fused_fold_in_is_jax_random_fold_in(seed):
    base = SEEDS[seed]()
    counters = [0, 1, 7, 2**31 - 1, 2**31, 2**32 - 1]
    folded = jax.jit(lambda c: _threefry.fold_in(base, c))
    fused = [folded(jnp.uint32(c)) for c in counters]
    assert_bitwise_equal(fused, [jax.random.fold_in(base, c) for c in counters])
    # a traced key, a Python counter
    assert_bitwise_equal(
        jax.jit(lambda k: _threefry.fold_in(k, 9))(base), jax.random.fold_in(base, 9)
    )


@pytest.mark.reuses_keys_on_purpose
def test_split_streams_under_vmap_draw_the_eager_keys():
    with fx.rng.seed(0):
        got = fx.jit(fx.vmap(lambda _: (fx.rng.next_key(), fx.rng.next_key()), keys="split"))(
            jnp.zeros(4)
        )
    k = jax.random.fold_in(jax.random.key(0), 0)
    for b in range(4):
        element = jax.random.fold_in(k, b)
        assert_bitwise_equal(
            (got[0][b], got[1][b]), tuple(jax.random.fold_in(element, j) for j in range(2))
        )


def test_a_compiled_draw_costs_no_threefry_call_of_its_own():
    """One scan step of two draws: the draws' hash is fused arithmetic, so the step
    runs the hash only for the samples (2), one fewer than splitting a key (3)."""

    def count(jaxpr):
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name in {
                "random_fold_in",
                "random_split",
                "random_bits",
                "threefry2x32",
            }
            for param in eqn.params.values():
                for sub in param if isinstance(param, (tuple, list)) else [param]:
                    if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        n += count(sub)
        return n

    def step(x):
        return x + fx.random.normal() + fx.random.uniform()

    jaxpr = jax.make_jaxpr(lambda x: fx.handle(step, fx.rng.seed(0))(x))(jnp.float32(0))
    assert count(jaxpr) == 2
    eager_jaxpr = jax.make_jaxpr(lambda x, k: x + jax.random.normal(jax.random.fold_in(k, 0)))(
        jnp.float32(0), jax.random.key(0)
    )
    assert count(eager_jaxpr) == 2  # what fold_in + a sample cost before


def test_eager_draws_use_one_fold_in_dispatch():
    with fx.rng.seed(0):
        key = fx.rng.next_key()
    assert np.array_equal(
        jax.random.key_data(key), jax.random.key_data(jax.random.fold_in(jax.random.key(0), 0))
    )
