"""A refused call changes nothing (issue 39, item 5).

Every `effax.random` sampler checks all its arguments (dtype, bounds, `p`,
`logits`, `axis`, sizes without replacement, None, shapes that do not broadcast)
before it draws a key: a call that `jax.random` would refuse raises a named effax
error that names the sampler, the stream and the argument, and the stream's counter
stays where it was, so the next draw is the one a fresh stream makes first; eagerly
and compiled alike. Good arguments draw the keys they always drew.
"""

import jax
import jax.numpy as jnp
import pytest

import effax as fx
from tests.helpers import assert_bitwise_equal, assert_transparent

R = fx.random
noise = fx.RandomKey("noise")
TWO = jnp.array(2)  # made outside the calls: a concrete array, under fx.jit too

# (id, call, error, fragments of the message). Each call is refused by jax.random.
BAD = [
    ("normal-int-dtype", lambda: R.normal((2,), jnp.int32), fx.EffectUsageError, "`dtype`"),
    ("normal-bool-dtype", lambda: R.normal((2,), bool), fx.EffectUsageError, "`dtype`"),
    ("uniform-int-dtype", lambda: R.uniform((2,), jnp.int32), fx.EffectUsageError, "`dtype`"),
    (
        "uniform-minval-shape",
        lambda: R.uniform((2,), minval=jnp.zeros(3)),
        fx.EffectTypeError,
        "`minval`",
    ),
    ("uniform-minval-none", lambda: R.uniform((2,), minval=None), fx.EffectUsageError, "`minval`"),
    ("uniform-maxval-str", lambda: R.uniform((2,), maxval="a"), fx.EffectTypeError, "`maxval`"),
    (
        "uniform-complex-dtype",
        lambda: R.uniform((2,), jnp.complex64),
        fx.EffectUsageError,
        "dtype=complex64",
    ),
    (
        "truncated_normal-lower-shape",
        lambda: R.truncated_normal(jnp.zeros(3), 1.0, (2,)),
        fx.EffectUsageError,
        "Incompatible shapes",
    ),
    (
        "truncated_normal-none",
        lambda: R.truncated_normal(None, 1.0, (2,)),
        fx.EffectUsageError,
        "lower=None",
    ),
    (
        "truncated_normal-int-dtype",
        lambda: R.truncated_normal(-1.0, 1.0, (2,), jnp.int32),
        fx.EffectUsageError,
        "`dtype`",
    ),
    ("gumbel-int-dtype", lambda: R.gumbel((2,), jnp.int32), fx.EffectUsageError, "`dtype`"),
    (
        "exponential-int-dtype",
        lambda: R.exponential((2,), jnp.int32),
        fx.EffectUsageError,
        "`dtype`",
    ),
    ("gamma-int-dtype", lambda: R.gamma(1.0, (2,), jnp.int32), fx.EffectUsageError, "`dtype`"),
    ("gamma-a-shape", lambda: R.gamma(jnp.ones(3), (2,)), fx.EffectUsageError, "`shape`"),
    ("gamma-none", lambda: R.gamma(None, (2,)), fx.EffectUsageError, "a=None"),
    ("beta-int-dtype", lambda: R.beta(1.0, 1.0, (2,), jnp.int32), fx.EffectUsageError, "`dtype`"),
    ("beta-a-shape", lambda: R.beta(jnp.ones(3), 1.0, (2,)), fx.EffectUsageError, "`shape`"),
    ("beta-none", lambda: R.beta(None, 1.0, (2,)), fx.EffectUsageError, "a=None"),
    (
        "dirichlet-int-dtype",
        lambda: R.dirichlet(jnp.ones(3), (2,), jnp.int32),
        fx.EffectUsageError,
        "`dtype`",
    ),
    ("dirichlet-scalar", lambda: R.dirichlet(1.0, (2,)), fx.EffectUsageError, "alpha.ndim"),
    ("dirichlet-shape", lambda: R.dirichlet(jnp.ones((3, 2)), (2,)), fx.EffectUsageError, "shape"),
    ("dirichlet-none", lambda: R.dirichlet(None), fx.EffectUsageError, "alpha=None"),
    (
        "multivariate_normal-int-dtype",
        lambda: R.multivariate_normal(jnp.zeros(2), jnp.eye(2), (2,), jnp.int32),
        fx.EffectUsageError,
        "`dtype`",
    ),
    (
        "multivariate_normal-cov-shape",
        lambda: R.multivariate_normal(jnp.zeros(2), jnp.eye(3)),
        fx.EffectUsageError,
        "cov.shape",
    ),
    (
        "multivariate_normal-method",
        lambda: R.multivariate_normal(jnp.zeros(2), jnp.eye(2), method="qr"),
        fx.EffectUsageError,
        "`method`",
    ),
    (
        "multivariate_normal-none",
        lambda: R.multivariate_normal(None, jnp.eye(2)),
        fx.EffectUsageError,
        "mean=None",
    ),
    (
        "bernoulli-p-shape",
        lambda: R.bernoulli(jnp.full(3, 0.5), (2,)),
        fx.EffectUsageError,
        "`p`",
    ),
    ("bernoulli-p-none", lambda: R.bernoulli(None, (2,)), fx.EffectUsageError, "`p`"),
    ("bernoulli-p-int", lambda: R.bernoulli(1, (2,)), fx.EffectTypeError, "`p`"),
    ("bernoulli-p-str", lambda: R.bernoulli("abc", (2,)), fx.EffectTypeError, "`p`"),
    (
        "categorical-axis",
        lambda: R.categorical(jnp.zeros(3), axis=2),
        fx.EffectUsageError,
        "`axis`",
    ),
    (
        "categorical-shape",
        lambda: R.categorical(jnp.zeros((2, 3)), shape=(4,)),
        fx.EffectUsageError,
        "`shape`",
    ),
    ("categorical-none", lambda: R.categorical(None), fx.EffectTypeError, "logits=None"),
    (
        "categorical-int-logits",
        lambda: R.categorical(jnp.zeros(3, jnp.int32)),
        fx.EffectUsageError,
        "logits=int32[3]",
    ),
    (
        "randint-float-dtype",
        lambda: R.randint((2,), 0, 5, jnp.float32),
        fx.EffectTypeError,
        "`dtype`",
    ),
    (
        "randint-minval-shape",
        lambda: R.randint((2,), jnp.zeros(3, jnp.int32), 5),
        fx.EffectUsageError,
        "Incompatible shapes",
    ),
    ("randint-none", lambda: R.randint((2,), None, 5), fx.EffectTypeError, "minval=None"),
    ("randint-overflow", lambda: R.randint((2,), 0, 2**40), fx.EffectUsageError, "maxval"),
    (
        "permutation-axis",
        lambda: R.permutation(jnp.arange(3), axis=1),
        fx.EffectUsageError,
        "`axis`",
    ),
    ("permutation-none", lambda: R.permutation(None), fx.EffectTypeError, "x=None"),
    ("permutation-float", lambda: R.permutation(3.5), fx.EffectTypeError, "x=3.5"),
    (
        "choice-without-replacement",
        lambda: R.choice(3, (5,), replace=False),
        fx.EffectUsageError,
        "larger sample",
    ),
    (
        "choice-without-replacement-array",
        lambda: R.choice(TWO, (3,), replace=False),
        fx.EffectUsageError,
        "larger sample",
    ),
    ("choice-p-shape", lambda: R.choice(3, (2,), p=jnp.ones(4) / 4), fx.EffectUsageError, "`p`"),
    ("choice-axis", lambda: R.choice(jnp.arange(3), (2,), axis=1), fx.EffectUsageError, "`axis`"),
    ("choice-none", lambda: R.choice(None, (2,)), fx.EffectTypeError, "a=None"),
    ("choice-empty", lambda: R.choice(0, (2,)), fx.EffectUsageError, "greater than 0"),
]
SAMPLERS_COVERED = {case[0].split("-")[0] for case in BAD}


def test_every_sampler_has_bad_argument_cases():
    assert set(fx.random.__all__) - {"key"} == SAMPLERS_COVERED


def _first_key():
    """The first key a fresh stream seeded with 0 draws."""
    return jax.random.fold_in(jax.random.key(0), 0)


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_a_refused_call_draws_nothing_eagerly(case):
    name, call, error, fragment = case
    sampler = name.split("-")[0]
    with fx.rng.seed(0) as stream:
        with pytest.raises(error, match=rf"effax\.random\.{sampler}\(") as info:
            call()
        assert stream.counter == 0
        assert_bitwise_equal(fx.random.key(), _first_key())
    message = str(info.value)
    assert fragment in message, message
    assert "RandomKey('rng')" in message and "counter" in message, message
    assert isinstance(info.value.__cause__, Exception)  # JAX's error, chained


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_a_refused_call_draws_nothing_compiled(case):
    name, call, error, fragment = case
    sampler = name.split("-")[0]
    with fx.rng.seed(0) as stream:
        with pytest.raises(error, match=rf"effax\.random\.{sampler}\(") as info:
            fx.jit(call)()
        assert stream.counter == 0
        assert_bitwise_equal(fx.jit(fx.random.key)(), _first_key())
    assert fragment in str(info.value), str(info.value)


def test_a_refused_call_names_its_own_stream():
    with fx.handlers(fx.rng.seed(0), noise.seed(1)) as hs:
        with pytest.raises(
            fx.EffectUsageError, match=r"Nothing was drawn from RandomKey\('noise'\)"
        ):
            fx.random.normal((2,), jnp.int32, stream=noise)
        assert hs[noise].counter == 0 and hs[fx.rng].counter == 0


def test_a_refused_call_in_a_scan_body_draws_nothing():
    def body(c, _):
        return c, fx.random.bernoulli(jnp.full(3, 0.5), (2,))

    with fx.rng.seed(0) as stream:
        fx.random.normal()  # counter 1
        with pytest.raises(fx.EffectUsageError, match=r"effax\.random\.bernoulli\(.*`p`"):
            fx.scan(body, 0, None, length=3)
        with pytest.raises(fx.EffectUsageError, match=r"effax\.random\.bernoulli\(.*`p`"):
            fx.jit(lambda: fx.scan(body, 0, None, length=3))()
        assert stream.counter == 1
        assert_bitwise_equal(fx.random.key(), jax.random.fold_in(jax.random.key(0), 1))


def test_a_refused_call_under_vmap_sees_each_element():
    # p holds 3 probabilities per element: JAX refuses shape=(2,) for each one
    def draw(p):
        return fx.random.bernoulli(p, (2,))

    with fx.rng.seed(0) as stream:
        with pytest.raises(fx.EffectUsageError, match=r"effax\.random\.bernoulli\(p=f.*\[3\]"):
            fx.vmap(draw)(jnp.full((4, 3), 0.5))
        with pytest.raises(fx.EffectUsageError, match=r"effax\.random\.bernoulli\("):
            fx.jit(fx.vmap(draw))(jnp.full((4, 3), 0.5))
        assert stream.counter == 0
        # the same p per element with a shape it fits is accepted
        ok = fx.vmap(lambda p: fx.random.bernoulli(p, (3,)))(jnp.full((4, 3), 0.5))
        assert ok.shape == (4, 3) and stream.counter == 1


def test_values_jax_reads_are_checked_per_value():
    """`choice`'s population and `randint`'s bounds are read by value: a call that
    was accepted does not let a later one with another value through."""
    with fx.rng.seed(0) as stream:
        assert R.choice(jnp.array(5), (3,), replace=False).shape == (3,)
        with pytest.raises(fx.EffectUsageError, match="larger sample"):
            R.choice(jnp.array(2), (3,), replace=False)
        assert R.choice(5, (3,), replace=False).shape == (3,)
        with pytest.raises(fx.EffectUsageError, match="larger sample"):
            R.choice(2, (3,), replace=False)
        assert R.randint((2,), 0, 2**31 - 1).shape == (2,)
        with pytest.raises(fx.EffectUsageError, match="overflow"):
            R.randint((2,), 0, 2**40)
        assert R.permutation(3).shape == (3,)
        assert stream.counter == 4


@pytest.mark.leaks_on_purpose
def test_a_leaked_tracer_argument_is_refused_before_a_draw():
    saved = []
    jax.jit(lambda x: saved.append(x) or x)(jnp.ones(3))
    with fx.rng.seed(0) as stream:
        with pytest.raises(fx.EffectLeakError, match=r"effax\.random\.uniform"):
            R.uniform((3,), minval=saved[0])
        assert stream.counter == 0


# Good arguments: the key is fold_in(base, counter), exactly as before.
GOOD = {
    "normal": ((2,), jnp.float32),
    "uniform": ((2,), jnp.float32, -1.0, 2.0),
    "truncated_normal": (-1.0, 1.0, (2,)),
    "gumbel": ((2,),),
    "exponential": ((2,),),
    "gamma": (jnp.array([1.0, 2.0]),),
    "beta": (2.0, 3.0, (2,)),
    "dirichlet": (jnp.ones(3), (2,)),
    "multivariate_normal": (jnp.zeros(2), jnp.eye(2), (3,)),
    "bernoulli": (jnp.array([0.2, 0.7]),),
    "categorical": (jnp.zeros((2, 3)),),
    "randint": ((4,), 0, 9),
    "permutation": (jnp.arange(5),),
    "choice": (10, (3,), False),
}


def test_every_sampler_has_a_good_case():
    assert set(GOOD) == set(fx.random.__all__) - {"key"}


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_arguments_draw_the_keys_they_always_drew(name):
    args = GOOD[name]
    base = jax.random.key(7)
    want = [getattr(jax.random, name)(jax.random.fold_in(base, c), *args) for c in (0, 1, 2)]
    sampler = getattr(fx.random, name)
    with fx.rng.seed(base) as stream:
        eager = sampler(*args)
        compiled = fx.jit(lambda: sampler(*args))()
        in_scan = fx.scan(lambda c, _: (c, sampler(*args)), 0, None, length=1)[1][0]
        assert stream.counter == 3
    assert_bitwise_equal(eager, want[0])
    # compiled: the same keys; XLA may fuse a sampler's float arithmetic differently
    assert_transparent([compiled, in_scan], want[1:])
