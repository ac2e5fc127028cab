"""Property-based transparency: random effect programs, eager against compiled.

Hypothesis generates programs: sequences of ask / get / set / modify / next_key /
emit, nested State handlers, and sub-programs nested in `effax.handle` (compiled
with jax.jit), `effax.scan`, `effax.cond` and `effax.vmap`. Each program runs twice
under the same handlers: once as plain Python (loops, if/else, a loop over the
batch with split keys), once compiled with `effax.jit` over the effax wrappers.
Outputs, final states, emitted values, key counters and the next key drawn must
agree (keys bit for bit).

Profiles: ``ci`` (default, 500 programs, derandomized so every run checks the same
ones), ``ci-small`` (100 programs, for the second JAX version in the test command)
and ``thorough`` (5,000 random programs): ``HYPOTHESIS_PROFILE=thorough``.
"""

import os

import jax
import jax.numpy as jnp
from helpers import assert_bitwise_equal, assert_transparent
from hypothesis import HealthCheck, given, settings, strategies as st

import effax as fx

settings.register_profile(
    "ci",
    max_examples=500,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci-small",
    max_examples=100,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

A = fx.Ask[jax.Array]("a")
S = fx.State[jax.Array]("s")
K = fx.RandomKey("k")
E = fx.Emit[jax.Array]("e")

COEFFICIENTS = st.sampled_from([0.5, -1.0, 1.5])
READS = [st.tuples(st.just("ask")), st.tuples(st.just("get")), st.tuples(st.just("key"))]
WRITES = [st.tuples(st.just("set"), COEFFICIENTS), st.tuples(st.just("modify"), COEFFICIENTS)]
EMIT = [st.tuples(st.just("emit"))]


def flat(*groups):
    """Short programs of leaf ops from the given groups."""
    return st.lists(st.one_of(*[op for group in groups for op in group]), min_size=1, max_size=3)


def extend(children):
    """Regions around sub-programs. Bodies avoid what effax defines as an error
    there: branches of a cond emitting different values, and writes of batched
    values into shared state inside vmap."""
    return st.one_of(
        st.tuples(st.just("handle"), children),
        st.tuples(st.just("scan"), st.integers(1, 3), children),
        st.tuples(st.just("with_state"), children),
        st.tuples(st.just("cond"), flat(READS, WRITES), flat(READS, WRITES)),
        st.tuples(st.just("vmap"), flat(READS)),
    )


OP = st.recursive(
    st.one_of(*READS, *WRITES, *EMIT),
    lambda children: extend(st.lists(children, min_size=1, max_size=4)),
    max_leaves=8,
)
PROGRAMS = st.lists(OP, min_size=1, max_size=6)


def run(ops, acc, compiled):
    for op in ops:
        kind = op[0]
        if kind == "ask":
            acc = acc + A.ask()
        elif kind == "get":
            acc = acc + S.get()
        elif kind == "set":
            S.set(acc * op[1])
        elif kind == "modify":
            S.modify(lambda s, c=op[1]: s * c + 1)
        elif kind == "key":
            acc = acc + jax.random.uniform(K.next_key())
        elif kind == "emit":
            E.emit(acc)
        elif kind == "handle":
            body = op[1]
            f = lambda a, body=body: run(body, a, compiled)
            acc = fx.handle(f, transform=jax.jit)(acc) if compiled else f(acc)
        elif kind == "scan":
            acc = run_scan(op[1], op[2], acc, compiled)
        elif kind == "with_state":
            with S.init(acc) as cell:
                acc = run(op[1], acc, compiled)
            acc = acc + cell.value
        elif kind == "cond":
            a, b = op[1], op[2]
            if compiled:
                acc = fx.cond(
                    acc > 0,
                    lambda c, a=a: run(a, c, compiled),
                    lambda c, b=b: run(b, c, compiled),
                    acc,
                )
            else:
                acc = run(a, acc, compiled) if acc > 0 else run(b, acc, compiled)
        elif kind == "vmap":
            acc = run_vmap(op[1], acc, compiled)
    return acc


def run_scan(n, body, acc, compiled):
    if compiled:
        acc, _ = fx.scan(lambda c, _: (run(body, c, compiled), None), acc, None, length=n)
        return acc
    # A Python loop; each emit site's values are stacked per step, as effax.scan does.
    with E.collect() as inner:
        for _ in range(n):
            acc = run(body, acc, compiled)
    per_step = len(inner.values) // n
    for site in range(per_step):
        E.emit(jnp.stack(inner.values[site::per_step]))
    return acc


def run_vmap(body, acc, compiled):
    xs = acc + jnp.arange(3.0)
    if compiled:
        return jnp.sum(fx.vmap(lambda x: run(body, x, compiled))(xs))
    # keys="split": one key from the stream; element b draws from fold_in(key, b).
    key = K.next_key()
    ys = []
    for b, x in enumerate(xs):
        with K.seed(jax.random.fold_in(key, b)):
            ys.append(run(body, x, compiled))
    return jnp.sum(jnp.stack(ys))


def outcome(ops, compiled):
    with fx.handlers(
        A.provide(jnp.float32(0.5)), S.init(jnp.float32(1)), K.seed(0), E.collect()
    ) as hs:
        f = lambda x: run(ops, x, compiled)
        out = fx.jit(f)(jnp.float32(0.25)) if compiled else f(jnp.float32(0.25))
        next_key = K.next_key()
    return out, hs[S], int(hs[K].counter), next_key, hs[E]


checked = []


@settings(settings.get_profile(PROFILE))
@given(PROGRAMS)
def test_compiled_program_matches_eager(ops):
    eager = outcome(ops, compiled=False)
    compiled = outcome(ops, compiled=True)
    assert compiled[2] == eager[2]
    assert_bitwise_equal(compiled[3], eager[3])
    assert_transparent(
        (compiled[0], compiled[1], compiled[4]), (eager[0], eager[1], eager[4]), rtol=1e-5
    )
    checked.append(ops)


def test_property_run_checked_enough_programs():
    """Pins the size of the run: the profile's number of programs were checked.

    In file order this runs after the property test; run on its own, it runs the
    property test first.
    """
    minimum = settings.get_profile(PROFILE).max_examples
    if not checked:
        test_compiled_program_matches_eager()
    assert len(checked) >= minimum, len(checked)
