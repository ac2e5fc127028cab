"""Compiled calls are keyed on their whole trace environment and compiled once.

A compiled handled function is reused exactly while every lookup its trace made
(including lookups that found no handler) would find the same: the same kind of
handler with the same static value (compared as `jax.jit` compares static
arguments), the same tree structure, shapes, dtypes and None-ness. Each test runs
the same calls eagerly and compiled, under the same handlers, and compares them;
compile counts come from `jax.monitoring`'s backend-compile events.
"""

import functools as ft
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import Counter, Tally, assert_bitwise_equal, assert_transparent, count_compiles
from jax import lax

import effax as fx

scale = fx.Ask[jax.Array]("scale")
maybe = fx.Ask[jax.Array | None]("maybe")
level = fx.Ask[int | float | bool]("level", static=True)
total = fx.State[jax.Array | None]("total")
noise = fx.RandomKey("noise")
log = fx.Emit[jax.Array]("log")

# --- optional effects -------------------------------------------------------------


def optional_scale(x):
    try:
        s = scale.ask()
    except fx.UnhandledEffectError:
        s = 1.0
    return x * s * 3.0


def optional_emit(x):
    try:  # noqa: SIM105 - the pattern users write
        log.emit(x * 2)
    except fx.UnhandledEffectError:
        pass
    return x + 1


def bare_except_scale(x):
    try:
        s = scale.ask()
    except:  # noqa: E722 - swallowing everything is what the test is about
        s = 1.0
    return x * s * 3.0


@pytest.mark.parametrize("fn", [optional_scale, bare_except_scale], ids=["except", "bare"])
def test_optional_ask_sees_a_handler_installed_later(fn):
    def calls(f):
        out = [f(jnp.float32(1))]  # no handler: the fallback
        with scale.provide(jnp.float32(10)):
            out += [f(jnp.float32(1)), f(jnp.float32(2))]
        out.append(f(jnp.float32(1)))  # gone again
        return out

    ours, theirs = calls(fx.jit(fn)), calls(fn)
    assert [float(v) for v in theirs] == [3.0, 30.0, 60.0, 3.0]
    assert_bitwise_equal(ours, theirs)


def test_optional_emit_collects_once_a_collector_is_installed():
    def calls(f):
        f(jnp.float32(1))
        with log.collect() as collector:
            f(jnp.float32(2))
            f(jnp.float32(3))
        f(jnp.float32(4))
        return collector.values

    ours, theirs = calls(fx.jit(optional_emit)), calls(optional_emit)
    assert [float(v) for v in theirs] == [4.0, 6.0]
    assert_bitwise_equal(ours, theirs)


def test_optional_ask_inside_scan_inside_jit():
    def body(c, x):
        return c + optional_scale(x), None

    def fn(xs):
        return fx.scan(body, jnp.float32(0), xs)[0]

    def calls(f):
        xs = jnp.arange(3.0)
        out = [f(xs)]
        with scale.provide(jnp.float32(2)):
            out.append(f(xs))
        return out

    assert_bitwise_equal(calls(fx.jit(fn)), calls(fn))


def test_an_internal_retrace_is_invisible_to_user_code():
    # The user's own handlers of every exception see nothing of effax's control
    # flow: an effect performed only for some shapes is plumbed in without any
    # exception passing through the function.
    seen = []

    def fn(x):
        try:
            if x.shape == (2,):
                x = x * scale.ask()
            return x + 1
        except BaseException as e:
            seen.append(type(e).__name__)
            raise

    fast = fx.jit(fn)
    with scale.provide(jnp.float32(4)), total.init(jnp.float32(0)):
        assert float(fast(jnp.ones(1))[0]) == 2.0
        np.testing.assert_array_equal(fast(jnp.ones(2)), [5.0, 5.0])
        assert float(fast(jnp.ones(1))[0]) == 2.0
    assert seen == []


# --- None values --------------------------------------------------------------------


def test_none_valued_state_that_later_holds_an_array():
    def fn(x):
        value = total.get()
        total.set(x if value is None else value + x)
        return x if value is None else value

    def calls(f):
        cell = total.init(None)
        with cell:
            out = [f(jnp.float32(1)), f(jnp.float32(2))]
        # the state holds an array now; run again from None, then from an array
        cell.value = None
        with cell:
            out.append(f(jnp.float32(5)))
            out.append(f(jnp.float32(1)))
        return out, cell.value

    assert_bitwise_equal(calls(fx.jit(fn)), calls(fn))


def test_none_valued_ask_that_later_holds_an_array():
    def fn(x):
        m = maybe.ask()
        return x if m is None else x * m

    def calls(f):
        out = []
        for value in [None, None, jnp.float32(3), None, jnp.float32(4)]:
            with maybe.provide(value):
                out.append(f(jnp.float32(2)))
        return out

    ours, theirs = calls(fx.jit(fn)), calls(fn)
    assert [float(v) for v in theirs] == [2.0, 2.0, 6.0, 2.0, 8.0]
    assert_bitwise_equal(ours, theirs)


# --- static values -------------------------------------------------------------------


def test_static_asks_of_equal_values_and_different_types_stay_apart():
    def fn():
        return jnp.asarray(level.ask())

    def calls(f):
        out = []
        for value in [1, 1.0, True, 1]:
            with level.provide(value):
                out.append(f())
        return out

    ours, theirs = calls(fx.jit(fn)), calls(fn)
    assert [v.dtype for v in theirs] == [jnp.int32, jnp.float32, jnp.bool_, jnp.int32]
    assert_bitwise_equal(ours, theirs)


def test_static_value_changed_on_a_live_provider_is_seen_with_its_type():
    fast = fx.jit(lambda: jnp.asarray(level.ask()))
    provider = level.provide(1)
    with provider:
        assert fast().dtype == jnp.int32
        assert fast().dtype == jnp.int32  # warm
        provider.provided = 1.0  # equal, but another type: another program
        assert fast().dtype == jnp.float32
        provider.provided = True
        assert fast().dtype == jnp.bool_


# --- effects performed for some shapes only --------------------------------------------


def test_effects_performed_only_for_some_shapes():
    def fn(x):
        if x.shape[0] > 1:
            total.set(total.get() + jnp.sum(x))
            log.emit(jax.random.normal(noise.next_key(), x.shape))
        return x * 2

    def calls(f):
        with fx.handlers(total.init(jnp.float32(0)), noise.seed(0), log.collect()) as hs:
            out = [f(jnp.ones(n)) for n in (1, 3, 1, 3, 2)]
            return out, hs[total], hs[log], hs[noise].counter

    assert_transparent(calls(fx.jit(fn)), calls(fn))


# --- compiled once -----------------------------------------------------------------------


@pytest.mark.uses_jit_cache
@pytest.mark.parametrize("n_unrelated", [0, 1, 100])
def test_one_trace_and_one_compile_however_many_unrelated_handlers(n_unrelated):
    unrelated = [fx.State[jax.Array](f"unrelated{i}") for i in range(n_unrelated)]
    traces = []

    def step(x):
        traces.append(x.shape)
        total.set(total.get() + jnp.sum(x))
        return x * scale.ask() + jax.random.normal(noise.next_key(), x.shape)

    fast = fx.jit(step)

    def three_calls(f=fast):
        handlers = [s.init(jnp.zeros(2)) for s in unrelated]
        with fx.handlers(
            *handlers, scale.provide(jnp.float32(2)), total.init(jnp.float32(0)), noise.seed(0)
        ):
            for _ in range(3):
                f(jnp.ones(4)).block_until_ready()

    three_calls(lambda x: x)  # the eager operations around the calls compile here
    assert count_compiles(three_calls) == 1
    assert traces == [(4,)]
    # the same handled function under other unrelated handlers: nothing new
    assert count_compiles(three_calls) == 0
    assert traces == [(4,)]


@pytest.mark.uses_jit_cache
def test_compiles_as_often_as_plain_jit():
    def step(x):
        return jnp.sin(x) * scale.ask()

    def hand_plumbed(x, s):
        return jnp.sin(x) * s

    def ours(compile=fx.jit):
        fast = compile(step)
        with fx.handlers(scale.provide(jnp.float32(2)), total.init(jnp.float32(0))):
            for _ in range(3):
                fast(jnp.ones(3)).block_until_ready()

    def theirs(compile=jax.jit):
        fast = compile(hand_plumbed)
        for _ in range(3):
            fast(jnp.ones(3), jnp.float32(2)).block_until_ready()

    ours(lambda f: f), theirs(lambda f: f)  # the eager operations compile here
    assert count_compiles(ours) == count_compiles(theirs) == 1


def test_inline_effax_jit_in_a_loop_traces_once():
    traces = []

    def step(x):
        traces.append(None)
        total.set(total.get() + x)
        return x * scale.ask()

    def run(compile_inline):
        with fx.handlers(scale.provide(jnp.float32(3)), total.init(jnp.float32(0))) as hs:
            out = [compile_inline(step)(jnp.float32(i)) for i in range(10)]
        return out, hs[total]

    theirs = run(lambda f: f)
    ours = run(fx.jit)
    assert len(traces) == 10 + 1  # ten eager calls, one trace
    assert_bitwise_equal(ours, theirs)
    run(lambda f: fx.handle(f, transform=jax.jit))  # the same transformation
    run(lambda f: fx.jit(f, static_argnums=()))  # options equal to the defaults
    assert len(traces) == 10 + 1 + 1  # jit with options is another program


def test_a_new_function_each_time_is_a_new_program():
    traces = []
    with scale.provide(jnp.float32(3)):
        for _ in range(3):
            fx.jit(lambda x: (traces.append(None), x * scale.ask())[1])(1.0)
    assert len(traces) == 3


# --- under raw JAX transformations ----------------------------------------------------


def perform(x):
    return x * scale.ask() + jnp.sum(jax.random.normal(noise.next_key(), (2,)))


RAW = {
    "jit": lambda f, x: jax.jit(f)(x),
    "make_jaxpr": lambda f, x: jax.make_jaxpr(f)(x),
    "eval_shape": lambda f, x: jax.eval_shape(f, x),
    "scan": lambda f, x: lax.scan(lambda c, _: (f(c), None), x, None, length=2)[0],
    "checkpoint": lambda f, x: jax.checkpoint(f)(x),
}


@pytest.mark.parametrize("raw", RAW.values(), ids=RAW.keys())
def test_first_call_under_a_raw_staging_transformation(raw):
    # Handlers outside the raw transformation: the eager function cannot read them
    # there, and neither can the compiled one; both raise the same public error.
    for f in (perform, fx.jit(perform)):
        with scale.provide(jnp.float32(2)), noise.seed(0):
            with pytest.raises(fx.EffectLeakError, match=r"Ask\('scale'\) was performed"):
                raw(f, jnp.float32(1))


@pytest.mark.parametrize("raw", RAW.values(), ids=RAW.keys())
def test_first_call_under_a_raw_transformation_with_handlers_inside(raw):
    def inside(f):
        def g(x):
            with scale.provide(jnp.float32(2)), noise.seed(0):
                return f(x)

        return g

    ours = raw(inside(fx.jit(perform)), jnp.float32(1))
    theirs = raw(inside(perform), jnp.float32(1))
    if isinstance(theirs, jax.ShapeDtypeStruct):
        assert ours == theirs
    elif hasattr(theirs, "eqns"):  # a jaxpr: one pjit equation in ours
        assert ours.out_avals == theirs.out_avals
    else:
        assert_transparent(ours, theirs)


def test_optional_effect_under_raw_jit_gives_the_eager_answer():
    def outer(x):
        return fx.jit(optional_scale)(x)

    assert float(jax.jit(outer)(jnp.float32(2))) == 6.0
    assert float(jax.jit(optional_scale)(jnp.float32(2))) == 6.0
    # A handler outside the raw jit cannot be read inside (for a function that raw
    # jax.jit traces anew: a cached trace is JAX's, as with any Python condition).
    with scale.provide(jnp.float32(10)):
        with pytest.raises(fx.EffectLeakError, match="scale"):
            jax.jit(lambda x: optional_scale(x))(jnp.float32(2))
        with pytest.raises(fx.EffectLeakError, match="scale"):
            jax.jit(lambda x: outer(x))(jnp.float32(2))


# --- jax.eval_shape as the transformation ----------------------------------------------


def test_handle_with_eval_shape_returns_shapes_and_changes_nothing():
    def step(x):
        total.set(total.get() + jnp.sum(x))
        log.emit(x)
        return jnp.outer(x, x) * scale.ask() + jax.random.normal(noise.next_key(), ())

    def hand_plumbed(x, s, t, key):
        return jnp.outer(x, x) * s + jax.random.normal(jax.random.fold_in(key, 0), ())

    shapes = fx.handle(step, transform=jax.eval_shape)
    with fx.handlers(
        scale.provide(jnp.float32(2)), total.init(jnp.float32(0)), noise.seed(0), log.collect()
    ) as hs:
        out = shapes(jnp.ones(3))
        again = shapes(jnp.ones(4))
    assert out == jax.eval_shape(hand_plumbed, jnp.ones(3), 2.0, 0.0, jax.random.key(0))
    assert again.shape == (4, 4)
    assert float(hs[total]) == 0.0 and hs[log] == [] and hs[noise].counter == 0


# --- the environment keyed also across nested compiled calls ---------------------------


def test_nested_compiled_call_with_an_optional_effect():
    inner = fx.jit(optional_scale)

    def outer(x):
        return inner(x) + 1

    def calls(f):
        out = [f(jnp.float32(1))]
        with scale.provide(jnp.float32(5)):
            out.append(f(jnp.float32(1)))
        out.append(f(jnp.float32(1)))
        return out

    ours = calls(fx.jit(outer))
    theirs = calls(lambda x: optional_scale(x) + 1)
    assert [float(v) for v in theirs] == [4.0, 16.0, 4.0]
    assert_bitwise_equal(ours, theirs)


def test_effax_uses_row_with_an_undeclared_optional_effect():
    @fx.uses(total)
    def fn(x):
        try:
            s = scale.ask()
        except fx.UndeclaredEffectError:
            s = 7.0
        total.set(total.get() + x)
        return x * s

    def calls(f):
        with fx.handlers(scale.provide(jnp.float32(2)), total.init(jnp.float32(0))) as hs:
            out = [f(jnp.float32(1)), f(jnp.float32(2))]
        return out, hs[total]

    ours, theirs = calls(fx.jit(fn)), calls(fn)
    assert [float(v) for v in theirs[0]] == [7.0, 14.0]
    assert_bitwise_equal(ours, theirs)


def test_partial_jit_options_are_shared_by_value():
    traces = []

    def fn(n, x):
        traces.append(n)
        return x * n * scale.ask()

    with scale.provide(jnp.float32(1)):
        for _ in range(3):
            fx.handle(fn, transform=ft.partial(jax.jit, static_argnums=0))(2, 1.0)
            fx.jit(fn, static_argnums=0)(2, 1.0)
    assert traces == [2]


# --- what a careless or clever user would try -------------------------------------------


def test_shared_programs_do_not_keep_the_function_alive():
    import gc
    import weakref

    def make():
        def fn(x):
            return x * scale.ask()

        return fn

    fn = make()
    ref = weakref.ref(fn)
    with scale.provide(jnp.float32(2)):
        assert float(fx.jit(fn)(1.0)) == 2.0
        assert float(fx.jit(fn)(1.0)) == 2.0
    del fn
    gc.collect()
    assert ref() is None


def test_threads_with_different_environments_share_one_function():
    import threading

    fast = fx.jit(optional_scale)
    results = {}
    errors = []

    def worker(i):
        try:
            for _ in range(20):
                if i % 2:
                    with scale.provide(jnp.float32(i)):
                        results.setdefault(i, set()).add(float(fast(jnp.float32(1))))
                else:
                    results.setdefault(i, set()).add(float(fast(jnp.float32(1))))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {0: {3.0}, 1: {3.0}, 2: {3.0}, 3: {9.0}}


def test_asyncio_tasks_with_different_environments():
    import asyncio

    fast = fx.jit(optional_scale)

    async def task(i):
        if i % 2:
            with scale.provide(jnp.float32(i)):
                await asyncio.sleep(0)
                return float(fast(jnp.float32(1)))
        await asyncio.sleep(0)
        return float(fast(jnp.float32(1)))

    async def main():
        return await asyncio.gather(*(task(i) for i in range(6)))

    assert asyncio.run(main()) == [3.0, 3.0, 3.0, 9.0, 3.0, 15.0]


def test_a_user_transformation_without_stages_learns_its_row():
    calls = []

    def counting_jit(f):
        jitted = jax.jit(f)

        def call(*args, **kwargs):
            calls.append(None)
            return jitted(*args, **kwargs)

        return call

    def calls_of(f):
        out = []
        with fx.handlers(
            *(fx.Ask[jax.Array](f"other{i}").provide(jnp.float32(i)) for i in range(3))
        ):
            out.append(f(jnp.float32(1)))
            with scale.provide(jnp.float32(4)):
                out += [f(jnp.float32(1)), f(jnp.float32(2))]
        return out

    ours = calls_of(fx.handle(optional_scale, transform=counting_jit))
    assert_bitwise_equal(ours, calls_of(optional_scale))
    assert len(calls) == 3  # one call of the transformed function per call


def test_an_unhashable_transformation_option_still_works():
    # a partial with a list option cannot key the shared cache: nothing is shared,
    # and the call still works
    transform = ft.partial(jax.jit, static_argnames=["n"])

    def fn(x, n):
        return x * n * scale.ask()

    with scale.provide(jnp.float32(2)):
        assert float(fx.handle(fn, transform=transform)(1.0, n=3)) == 6.0


def test_an_unrelated_handler_of_an_odd_type_does_not_break_a_compiled_call():
    mode = fx.Ask[str]("mode")  # a traced Ask holding a string: no compiled input
    registry = fx.State[object]("registry")
    fast = fx.jit(lambda x: x * scale.ask())
    with mode.provide("train"), registry.init(object()), scale.provide(jnp.float32(2)):
        assert [float(fast(jnp.float32(i))) for i in range(3)] == [0.0, 2.0, 4.0]


def test_a_handler_whose_value_cannot_be_an_input_is_named():
    mode = fx.Ask[str]("mode")

    def fn(x):
        return x * 2 if mode.ask() == "train" else x

    with mode.provide("train"):
        assert float(fn(jnp.float32(1))) == 2.0  # eagerly it is a Python value
        with pytest.raises(fx.EffectTypeError, match=r"Ask\('mode'\) holds a str.*static=True"):
            fx.jit(fn)(jnp.float32(1))
    static_mode = fx.Ask[str]("mode", static=True)
    with static_mode.provide("train"):
        assert float(fx.jit(lambda x: x * 2 if static_mode.ask() == "train" else x)(1.0)) == 2.0


# --- each handler is asked for its export once per call ------------------------------


class CountedTally(Tally):
    """A `Tally` that counts how often it is asked for its export."""

    exports: ClassVar[list[int]] = []

    def export(self):
        CountedTally.exports.append(id(self))
        return super().export()


@pytest.mark.parametrize("transform", ["jit", "checkpoint"])
def test_each_handler_exports_once_per_first_call(transform):
    """The first call resolves every reachable handler (to trace with all of them
    plumbed in), then the narrower environment of its row: each handler's
    `export()` runs once for the call, used or not, plumbable or not."""
    used, unused, odd = Counter("used"), Counter("unused"), Counter("odd")

    def step(x):
        used.tick()
        return x + 1

    wrap = fx.jit if transform == "jit" else ft.partial(fx.handle, transform=jax.checkpoint)
    handlers = [CountedTally(used), CountedTally(unused), CountedTally(odd, count="not an array")]
    CountedTally.exports.clear()
    handled = wrap(step)
    with fx.handlers(*handlers):
        out = handled(jnp.float32(1))
        first = list(CountedTally.exports)
        CountedTally.exports.clear()
        out2 = handled(jnp.float32(1))
        later = list(CountedTally.exports)
    assert float(out) == float(out2) == 2.0
    assert int(handlers[0].count) == 2
    assert sorted(first) == sorted(id(h) for h in handlers)
    if transform == "jit":  # warm: a handler overriding export is asked, once
        assert later == [id(handlers[0])]
    # (jax.checkpoint traces again on every call: the handlers the function does
    # not use are rebuilt inside as stand-ins, from their exports)


# --- Python numbers cross jax.jit as they are, and come back with their type ------------


def test_a_counter_that_became_traced_does_not_retrace():
    """A key counter crosses jax.jit as a Python int (weakly typed) while it is
    known; after a while_loop it comes back traced, weakly typed as it went in
    (eagerly too), so the next calls reuse the program."""
    traces = []

    def draw_until(n):
        traces.append(1)
        body = lambda c: (c[0] + 1, c[1] + fx.random.uniform())
        return fx.while_loop(lambda c: c[0] < n, body, (0, jnp.float32(0)))[1]

    def calls(f):
        with fx.rng.seed(4) as stream:
            out = [f(n) for n in (1, 3, 2, 4)]
            out.append(fx.rng.next_key())
        return out, stream.counter

    ours = calls(fx.jit(draw_until))
    assert len(traces) == 1
    theirs = calls(draw_until)
    assert_transparent(ours[0][:4], theirs[0][:4])
    assert_bitwise_equal(ours[0][4], theirs[0][4])
    assert_bitwise_equal(ours[1], theirs[1])
    assert ours[1].weak_type and theirs[1].weak_type  # the same type, eager and compiled


def test_a_python_number_state_keeps_the_type_eager_code_gives_it():
    """A State holding a Python float crosses as one (weakly typed); set to a
    float32 array, it comes back a float32 array (not weakly typed), as eagerly,
    so later arithmetic promotes as it would eagerly: the second call compiles once
    more for it, and the calls after that reuse the program."""
    acc = fx.State[float]("acc")
    traces = []

    def add(x):
        traces.append(1)
        acc.set(acc.get() + x)
        return acc.get()

    def run(f):
        with acc.init(0.5) as cell:
            outs = [f(jnp.float32(i)) for i in range(4)]
        return outs, cell.value

    ours, theirs = run(fx.jit(add)), run(add)
    assert len(traces) == 2 + 4  # two compiled traces, then the eager run's four calls
    assert_bitwise_equal(ours, theirs)
    assert not ours[1].weak_type
    assert (ours[1] * jnp.ones(1, jnp.bfloat16)).dtype == jnp.float32


@pytest.mark.parametrize("transform", [jax.checkpoint, jax.jit], ids=["checkpoint", "jit"])
def test_a_lookup_that_found_nothing_is_redone_under_a_new_handler(transform):
    """An optional effect (try/except) read by a function handled with a
    transformation without stages: the first call ran before the row was known,
    and its warm path must still check the stack (it served every later call with
    the first answer, under jax.checkpoint)."""
    opt = fx.Ask[jax.Array]("opt")

    def f(x):
        try:
            return x * opt.ask()
        except fx.UnhandledEffectError:
            return x * 2

    g = fx.handle(f, transform=transform)
    assert float(g(jnp.float32(1))) == 2.0
    with opt.provide(jnp.float32(3)):
        assert float(g(jnp.float32(1))) == 3.0
    assert float(g(jnp.float32(1))) == 2.0
