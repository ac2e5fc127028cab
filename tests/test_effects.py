"""Eager semantics of Ask, State, RandomKey and Emit, and of `effax.handlers`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

temperature = fx.Ask[float]("temperature")
config = fx.Ask[tuple[int, str]]("config", static=True)
steps = fx.State[jax.Array]("steps")
params = fx.State[dict[str, jax.Array]]("params")
dropout = fx.RandomKey("dropout")
aux = fx.Emit[jax.Array]("aux")


def test_ask_returns_innermost_value():
    with temperature.provide(0.5):
        assert temperature.ask() == 0.5
        with temperature.provide(2.0):
            assert temperature.ask() == 2.0
        assert temperature.ask() == 0.5


def test_state_get_set_modify_and_cell_value():
    cell = steps.init(jnp.int32(3))
    with cell:
        assert int(steps.get()) == 3
        steps.set(steps.get() + 1)
        new = steps.modify(lambda n: n * 10)
        assert int(new) == 40
    assert int(cell.value) == 40
    # The cell keeps its value and can be installed again.
    with cell:
        steps.modify(lambda n: n + 1)
    assert int(cell.value) == 41


def test_state_holds_pytrees():
    with params.init({"w": jnp.ones(2), "b": jnp.zeros(())}) as cell:
        params.modify(lambda p: jax.tree.map(lambda x: x + 1, p))
    np.testing.assert_array_equal(cell.value["w"], 2 * np.ones(2))
    assert float(cell.value["b"]) == 1.0


@pytest.mark.parametrize(
    "seed",
    [0, np.int64(0), jax.random.key(0), jax.random.PRNGKey(0)],
    ids=["int", "numpy-int", "typed-key", "raw-key"],
)
def test_key_stream_is_fold_in_of_counter(seed):
    base = jax.random.key(0) if not hasattr(seed, "shape") or seed.shape == () else seed
    if isinstance(seed, (int, np.integer)):
        base = jax.random.key(int(seed))
    with dropout.seed(seed) as stream:
        keys = [dropout.next_key() for _ in range(3)]
    expected = [jax.random.fold_in(base, i) for i in range(3)]
    assert_bitwise_equal(keys, expected)
    assert stream.value.counter == 3
    # the stream hands out keys of the kind it was seeded with
    typed = jax.dtypes.issubdtype(keys[0].dtype, jax.dtypes.prng_key)
    assert typed == (not (hasattr(seed, "dtype") and seed.dtype == jnp.uint32))


@pytest.mark.parametrize(
    "bad",
    [
        1.5,
        "seed",
        jnp.zeros(3, jnp.uint32),
        jnp.zeros(2, jnp.float32),
        True,
        jax.random.split(jax.random.key(0), 2),
    ],
    ids=["float", "str", "uint32[3]", "float32[2]", "bool", "key-array"],
)
def test_seed_rejects_bad_keys(bad):
    with pytest.raises(TypeError, match=r"RandomKey\('dropout'\)\.seed"):
        dropout.seed(bad)


def test_emit_collects_in_order():
    with aux.collect() as collected:
        aux.emit(jnp.float32(1))
        aux.emit(jnp.float32(2))
    assert [float(v) for v in collected.values] == [1.0, 2.0]


def test_handlers_binds_final_states():
    with fx.handlers(
        temperature.provide(0.5), steps.init(jnp.int32(0)), dropout.seed(1), aux.collect()
    ) as hs:
        steps.modify(lambda n: n + 1)
        dropout.next_key()
        aux.emit(jnp.float32(temperature.ask()))
    assert int(hs[steps]) == 1
    assert hs[temperature] == 0.5
    assert [float(v) for v in hs[aux]] == [0.5]
    assert hs[dropout].counter == 1
    assert set(hs) == {temperature, steps, dropout, aux}
    assert len(hs) == 4
    with pytest.raises(KeyError, match="No handler for"):
        hs[config]


def test_innermost_handler_wins_and_outer_is_untouched():
    with steps.init(jnp.int32(0)) as outer, steps.init(jnp.int32(100)) as inner:
        steps.modify(lambda n: n + 1)
    assert int(outer.value) == 0
    assert int(inner.value) == 101


def test_effects_are_compared_by_identity():
    other = fx.State[jax.Array]("steps")  # same name, different effect
    with steps.init(jnp.int32(0)), pytest.raises(fx.UnhandledEffectError):
        other.get()


def test_handlers_rejects_non_handlers():
    with pytest.raises(TypeError, match="takes handlers"):
        fx.handlers(steps)


def test_static_ask_requires_hashable():
    assert config.provide((1, "a")).value == (1, "a")
    with pytest.raises(TypeError, match=r"Ask\('config'\) is static.*unhashable list"):
        config.provide([1, 2])  # type: ignore[arg-type]


SAMPLERS = [
    ("normal", (), {"shape": (2,)}),
    ("uniform", (), {"shape": (2,), "minval": -1.0, "maxval": 1.0}),
    ("bernoulli", (0.3,), {"shape": (4,)}),
    ("categorical", (jnp.zeros(5),), {"shape": (3,)}),
    ("randint", ((3,), 0, 10), {}),
    ("permutation", (5,), {}),
    ("choice", (5,), {"shape": (2,), "replace": False}),
    ("truncated_normal", (-1.0, 1.0), {"shape": (3,)}),
    ("gumbel", (), {"shape": (2,)}),
    ("exponential", (), {"shape": (2,)}),
    ("gamma", (2.0,), {"shape": (2,)}),
    ("beta", (2.0, 3.0), {"shape": (2,)}),
    ("dirichlet", (jnp.ones(3),), {}),
    ("multivariate_normal", (jnp.zeros(2), jnp.eye(2)), {}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_random_samplers_match_jax_random(name, args, kwargs):
    with fx.rng.seed(7):
        ours = getattr(fx.random, name)(*args, **kwargs)
    theirs = getattr(jax.random, name)(jax.random.fold_in(jax.random.key(7), 0), *args, **kwargs)
    assert_bitwise_equal(ours, theirs)
    with dropout.seed(7):
        from_stream = getattr(fx.random, name)(*args, stream=dropout, **kwargs)
    assert_bitwise_equal(from_stream, theirs)


def test_random_samplers_under_jit_match_eager():
    def draw():
        return fx.random.normal((3,)), fx.random.uniform((2,))

    with fx.rng.seed(3):
        eager = draw()
    with fx.rng.seed(3):
        compiled = fx.jit(draw)()
    assert_bitwise_equal(eager, compiled)
