"""Compiled handled functions called inside other traced regions, under handler
environments their programs were not traced in (issue 39, items 1 and 2).

A compiled function's program is traced once per environment and reused; a function
called inside another region (an `fx.jit` in an `fx.scan` body, `fx.jit` inside
`fx.jit`) meets handlers that are tracers of the outer region. Those it did not plumb
are *stand-ins* while it traces: looking one up drops the trace and plumbs it in.
The user code that looked it up must meet a value of the kind it will get (a JAX
array, never a NumPy placeholder), and nothing cached may keep a tracer.
"""

import functools as ft

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_bitwise_equal

import effax as fx

scale = fx.Ask[jax.Array]("scale")
log = fx.Emit[jax.Array]("log")
total = fx.State[jax.Array]("total")
unused = fx.RandomKey("unused")

# The interceptor's function reads an Ask the model never reads, with JAX array
# methods (`.at`, indexing) that a NumPy stand-in lacks.
SCALED = fx.intercept(log, emit=lambda outer, v: outer.emit(v * scale.ask().at[0].set(3.0)))


def model(y):
    log.emit(y)
    return y * 2


def _nestings():
    """(name, make) where make(inner) builds a function of y calling `inner`; the
    outer function reads `scale` itself, so its region plumbs it in (a tracer)."""
    return [
        ("jit", lambda inner: fx.jit(lambda y: inner(y) * scale.ask())),
        ("jit(lambda: jit(model))", lambda inner: fx.jit(lambda y: fx.jit(model)(y) * scale.ask())),
        (
            "scan",
            lambda inner: (
                lambda y: fx.scan(
                    lambda c, x: (c + inner(c) * scale.ask(), None), y, None, length=3
                )[0]
            ),
        ),
        (
            "cond",
            lambda inner: (
                lambda y: fx.cond(
                    y[0] > 0, lambda v: inner(v) * scale.ask(), lambda v: model(v) - 1, y
                )
            ),
        ),
        (
            "while_loop",
            lambda inner: (
                lambda y: fx.while_loop(
                    lambda c: c[0] < 2, lambda c: (c[0] + 1, inner(c[1]) * scale.ask()), (0, y)
                )[1]
            ),
        ),
        ("vmap", lambda inner: fx.vmap(lambda y: inner(y) * scale.ask()[0])),
        ("checkpoint", lambda inner: fx.checkpoint(lambda y: inner(y) * scale.ask())),
    ]


# The while_loop's body may not emit (trip count unknown): its inner function
# updates a State instead, which the interceptor reinterprets.
SCALED_TOTAL = fx.intercept(
    total, set=lambda outer, v: outer.set(v * scale.ask().at[0].set(3.0)[0])
)


def counted(y):
    total.set(total.get() + y[1])
    return y * 2


@pytest.mark.parametrize("name, make", _nestings(), ids=[n for n, _ in _nestings()])
def test_a_program_traced_under_fewer_handlers_gives_the_eager_answer(name, make):
    # The inner function's row is learnt without the interceptor (it only emits, or
    # updates `total`); then it is called under the interceptor, whose function
    # reads `scale`, an Ask the inner function never reads.
    inner = counted if name == "while_loop" else model
    compiled, eager = make(fx.jit(inner)), make(inner)
    y = jnp.array([1.0, 2.0])
    with fx.handlers(log.collect(), total.init(jnp.float32(0)), scale.provide(jnp.ones(2))):
        compiled(y)

    def run(f):
        with fx.handlers(
            log.collect(),
            total.init(jnp.float32(0)),
            scale.provide(jnp.array([5.0, 6.0])),
            unused.seed(1),
            SCALED,
            SCALED_TOTAL,
        ) as hs:
            out = f(y)
        return out, hs[log], hs[total]

    assert_bitwise_equal(run(compiled), run(eager))


def test_an_inner_program_reused_under_an_outer_handler_it_never_saw():
    # The same inner program under two outer environments, the second with a
    # handler (the interceptor) that only the second one has.
    inner = fx.jit(model)
    outer = fx.jit(lambda y: inner(y) * scale.ask())
    y = jnp.array([1.0, 2.0])
    for interceptors in [(), (SCALED,), (), (SCALED,)]:
        results = []
        for f in (outer, lambda v: model(v) * scale.ask()):
            with fx.handlers(
                log.collect(), scale.provide(jnp.array([2.0, 3.0])), *interceptors
            ) as hs:
                results.append((f(y), hs[log]))
        assert_bitwise_equal(*results)


def _checkpointed_loop():
    def update(x):
        total.modify(lambda v: v + x)
        return x * 2

    inner = fx.checkpoint(update)

    def f(x):
        return fx.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, inner(c[1])), (0, x))[1]

    return f


@pytest.mark.uses_jit_cache  # (leak checking bypasses the cache that kept the tracer)
def test_no_tracer_survives_a_call_of_checkpoint_of_jit():
    # fx.checkpoint(fx.jit(f)), f's while_loop calling an fx.checkpoint-ed update,
    # an unused key stream installed: the narrower program replays the traced jaxpr
    # with zeros for the stream it leaves out, which were made under the checkpoint's
    # trace and kept (a `key<fry>` tracer on the second call).
    f = _checkpointed_loop()
    g = fx.checkpoint(fx.jit(f))
    x = jnp.float32(1.0)
    with fx.handlers(total.init(jnp.float32(0)), unused.seed(0)) as hs:
        got = [g(x), g(x)]
    with total.init(jnp.float32(0)) as want:
        expected = [f(x), f(x)]
    assert_bitwise_equal(got, expected)
    assert_bitwise_equal(hs[total], want.value)
    # the shared inner function, afterwards, without the stream
    with total.init(jnp.float32(0)) as cell:
        assert_bitwise_equal([g(x), fx.jit(f)(x)], expected)
    assert_bitwise_equal(cell.value, want.value)


@pytest.mark.parametrize(
    "wrap, x",
    [
        (fx.checkpoint, jnp.float32(1.0)),
        (fx.jit, jnp.float32(1.0)),
        (lambda f: fx.jit(fx.checkpoint(f)), jnp.float32(1.0)),
        (lambda f: fx.scan(lambda c, _: (f(c), None), jnp.float32(1.0), None, length=2)[0], None),
    ],
    ids=["checkpoint", "jit", "jit(checkpoint)", "scan"],
)
def test_replayed_programs_keep_no_tracer_under_any_outer_wrapper(wrap, x):
    f = _checkpointed_loop()
    if x is None:  # `wrap` runs the loop itself
        compiled = ft.partial(wrap, fx.jit(f))
        eager = ft.partial(wrap, f)
    else:
        compiled = ft.partial(wrap(fx.jit(f)), x)
        eager = ft.partial(f, x)
    results = []
    for h in (compiled, eager):
        with fx.handlers(total.init(jnp.float32(0)), unused.seed(0)) as hs:
            out = [h(), h()]
        results.append((out, hs[total]))
    assert_bitwise_equal(*results)


# --- a batched region's streams: only those its body draws from ---------------------

K1 = fx.RandomKey("k1")
K2 = fx.RandomKey("k2")


def _counters(fn, *args):
    with K1.seed(1) as k1, K2.seed(5) as k2:
        out = fn(*args)
    return out, int(k1.value.counter), int(k2.value.counter)


@pytest.mark.parametrize("keys", ["split", "shared"])
def test_a_vmap_leaves_streams_its_body_never_draws_from_whatever_was_traced_before(keys):
    # (found by the composition fuzzer run under a second environment: a program
    # traced under K1 alone was reused under K1 and K2, and K2 stayed where a first
    # trace under both advanced it: split advanced every installed stream)
    def f(x):
        return fx.vmap(lambda v: v * 2.0 + fx.random.normal(stream=K1), keys=keys)(x)

    xs = jnp.ones(3)
    eager = _counters(f, xs)
    first = _counters(fx.jit(lambda x: f(x)), xs)
    compiled = fx.jit(f)
    with K1.seed(0):
        compiled(xs)  # traced under K1 alone
    again = _counters(compiled, xs)
    assert_bitwise_equal(first, eager)
    assert_bitwise_equal(again, eager)
    # K1: one key split, or one draw shared by the batch; K2: never drawn from
    assert eager[1:] == (1, 0)


def test_a_vmap_whose_body_draws_nothing_changes_no_stream_eager_or_compiled():
    def f(x):
        return fx.vmap(lambda v: v * 2.0)(x)

    inner = fx.vmap(lambda v: v * 2.0)

    def mapped(x):
        return fx.map(lambda r: inner(r), x[None])

    for fn in (f, fx.jit(f), fx.jit(lambda x: fx.jit(f)(x)), mapped, fx.jit(mapped)):
        _, k1, k2 = _counters(fn, jnp.ones(3))
        assert (k1, k2) == (0, 0)
