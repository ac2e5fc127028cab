"""What a key draw costs a trace (issue 43 item 4): a draw whose counter is traced
records one equation (the fused hash, which adds the draw's offset to the counter
itself) instead of an add, a conversion and the hash, and its key is still
``fold_in(base, counter + j)`` bit for bit, eagerly and under every wrapper, the
counter crossing 2**31 (where int32 arithmetic wraps) included."""

import jax
import jax.numpy as jnp
import pytest

import effax as fx
from effax import _threefry
from tests.helpers import assert_bitwise_equal

SEEDS = {
    "threefry (typed)": lambda: jax.random.key(3),
    "threefry (raw uint32[2])": lambda: jax.random.PRNGKey(3),
    "rbg": lambda: jax.random.key(3, impl="rbg"),
}


def _draws(n):
    return lambda x: (x, tuple(fx.rng.next_key() for _ in range(n)))


def _equations(n):
    with fx.rng.seed(0):
        return len(fx.jit(_draws(n)).trace(jnp.float32(0)).jaxpr.eqns)


def test_a_draw_with_a_traced_counter_records_one_equation():
    # under effax.jit the counter is an input of the program, so it is traced
    assert _equations(5) - _equations(2) == 3


def test_the_one_equation_is_the_fused_hash():
    with fx.rng.seed(0):
        eqns = fx.jit(_draws(3)).trace(jnp.float32(0)).jaxpr.eqns
    assert [e.params.get("name") for e in eqns] == ["_fused"] * 3


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("start", [0, 2**31 - 2, 2**32 - 5])
@pytest.mark.parametrize(
    "wrapper", ["eager", "jit", "scan", "cond", "vmap-shared", "checkpoint", "jit-scan"]
)
def test_draws_past_a_traced_counter_are_fold_in_of_the_sum(wrapper, start, seed):
    base, draws = SEEDS[seed](), 3
    run = {
        "eager": lambda f: f(),
        "jit": lambda f: fx.jit(f)(),
        "scan": lambda f: jax.tree.map(
            lambda k: k[0], fx.scan(lambda c, _: (c, f()), 0, None, length=1)[1]
        ),
        "cond": lambda f: fx.cond(jnp.bool_(True), f, f),
        "vmap-shared": lambda f: jax.tree.map(
            lambda k: k[0], fx.vmap(lambda _: f(), keys="shared")(jnp.ones(1))
        ),
        "checkpoint": lambda f: fx.checkpoint(f)(),
        "jit-scan": lambda f: fx.jit(
            lambda: jax.tree.map(
                lambda k: k[0], fx.scan(lambda c, _: (c, f()), 0, None, length=1)[1]
            )
        )(),
    }[wrapper]
    with fx.rng.seed(base) as stream:
        stream.counter = start
        got = run(lambda: tuple(fx.rng.next_key() for _ in range(draws)))
    assert_bitwise_equal(got, tuple(jax.random.fold_in(base, start + j) for j in range(draws)))
    assert int(stream.counter) == start + draws


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("seed", SEEDS)
def test_fold_in_adds_the_offset_modulo_2_to_the_32(seed):
    base = SEEDS[seed]()
    cases = [(0, 0), (5, 3), (2**31 - 2, 4), (-3, 5), (-(2**31) + 7, 2**31 - 9)]
    for counter, offset in cases:
        want = jax.random.fold_in(base, (counter + offset) % 2**32)
        traced = jax.jit(lambda k, c, o=offset: _threefry.fold_in(k, c, o))
        assert_bitwise_equal(traced(base, jnp.int32(counter)), want)
        assert_bitwise_equal(_threefry.fold_in(base, jnp.int32(counter), offset), want)


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("counter", [2**31, 2**32 - 1])
def test_a_traced_key_takes_a_python_counter_past_int32(seed, counter):
    base = SEEDS[seed]()
    assert_bitwise_equal(
        jax.jit(lambda k: _threefry.fold_in(k, counter))(base),
        jax.random.fold_in(base, counter),
    )
