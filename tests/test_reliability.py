"""Failure safety, escaped handlers, concurrency, and JAX-internals self-test."""

import asyncio
import threading

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import Tally, assert_bitwise_equal, events

import effax as fx
from effax import _trace

steps = fx.State[jax.Array]("steps")
stream = fx.RandomKey("stream")
log = fx.Emit[jax.Array]("log")
scale = fx.Ask[jax.Array]("scale")


def model(x):
    steps.set(steps.get() + 1)
    y = x * scale.ask() + jax.random.normal(stream.next_key())
    log.emit(y)
    return y


fast_model = fx.jit(model)


def snapshot(hs):
    return int(hs[steps]), hs[stream].counter, len(hs[log])


def handlers(seed=0):
    return fx.handlers(
        steps.init(jnp.int32(0)),
        stream.seed(seed),
        log.collect(),
        scale.provide(jnp.float32(2)),
    )


# --- failure safety -----------------------------------------------------------------


def test_exception_in_host_callback_at_run_time_leaves_handlers_untouched():
    def check(y):
        if y > 100:
            raise ValueError("too big")

    def fn(x):
        y = model(x)
        jax.debug.callback(check, y)
        return y

    fast = fx.jit(fn)
    with handlers() as hs:
        fast(jnp.float32(1))
        before = snapshot(hs)
        with pytest.raises(Exception, match="too big"):
            jax.block_until_ready(fast(jnp.float32(1000)))
        assert snapshot(hs) == before


def test_keyboard_interrupt_inside_handled_call_leaves_handlers_untouched():
    def fn(x):
        model(x)
        raise KeyboardInterrupt

    for wrap in [fx.handle, fx.jit]:
        with handlers() as hs:
            fast_model(jnp.float32(1))
            before = snapshot(hs)
            with pytest.raises(KeyboardInterrupt):
                wrap(fn)(jnp.float32(1))
            assert snapshot(hs) == before


@pytest.mark.leaks_on_purpose
def test_handler_escaping_its_trace_is_refused():
    escaped = []

    @jax.jit
    def f(x):
        cell = steps.init(x)
        escaped.append(cell)
        with cell:
            return steps.get() + 1

    f(jnp.int32(1))
    with pytest.raises(fx.EffectLeakError, match=r"State\('steps'\) was created under a JAX"):
        with escaped[0]:
            pass
    with pytest.raises(fx.EffectLeakError, match="escaped the transformation"):
        with fx.handlers(escaped[0]):
            pass


@attrs.define  # eq=True: not hashable
class HashlessTally(Tally):
    pass


@pytest.mark.leaks_on_purpose
def test_user_defined_handler_escaping_its_trace_is_refused():
    # the escaped-handler check applies to every handler, not only the built-in ones
    escaped = []

    @jax.jit
    def f(x):
        escaped.append(HashlessTally(events, x))
        return x

    f(jnp.int32(1))
    with pytest.raises(fx.EffectLeakError, match=r"Counter\('events'\) was created under a JAX"):
        with escaped[0]:
            pass
    with pytest.raises(fx.EffectLeakError, match="escaped the transformation"):
        fx.handle(events.tick, escaped[0], transform=jax.jit)()
    with HashlessTally(events, jnp.int32(0)) as fine:  # made here: installs and counts
        fx.jit(events.tick)()
    assert int(fine.value) == 1


def test_generator_outliving_its_handler_raises_unhandled():
    with steps.init(jnp.int32(0)):
        lazy = (steps.get() for _ in range(2))
    with pytest.raises(fx.UnhandledEffectError, match=r"State\('steps'\)"):
        next(lazy)


# --- concurrency --------------------------------------------------------------------


def run_alone(seed, n):
    with handlers(seed) as hs:
        ys = [fast_model(jnp.float32(seed)) for _ in range(n)]
    return ys, int(hs[steps]), hs[stream].counter, hs[log]


def test_threads_with_their_own_handlers_do_not_interfere():
    n_threads, n_calls = 8, 25
    alone = {seed: run_alone(seed, n_calls) for seed in range(n_threads)}
    results = {}
    barrier = threading.Barrier(n_threads)

    def worker(seed):
        barrier.wait()
        results[seed] = run_alone(seed, n_calls)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results) == set(alone)
    for seed in alone:
        assert_bitwise_equal(results[seed], alone[seed])
        assert results[seed][1] == results[seed][2] == n_calls


def test_asyncio_tasks_with_their_own_handlers_do_not_interfere():
    n_tasks, n_calls = 100, 3

    async def task(seed):
        with handlers(seed) as hs:
            ys = []
            for _ in range(n_calls):
                ys.append(fast_model(jnp.float32(seed)))
                await asyncio.sleep(0)  # interleave with every other task
        return ys, int(hs[steps]), hs[stream].counter, hs[log]

    async def main():
        return await asyncio.gather(*(task(s) for s in range(n_tasks)))

    results = asyncio.run(main())
    for seed in (0, 17, 99):
        assert_bitwise_equal(results[seed], run_alone(seed, n_calls))
    assert all(r[1] == n_calls for r in results)


def test_a_shared_handled_function_traced_from_many_threads():
    # The first calls race to trace; every thread must still get its own results.
    n_threads = 8
    fresh = fx.jit(lambda x: model(x) * 2)
    results = {}
    barrier = threading.Barrier(n_threads)

    def worker(seed):
        barrier.wait()
        with handlers(seed) as hs:
            results[seed] = fresh(jnp.float32(1)), hs[stream].counter

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for seed in range(n_threads):
        with handlers(seed):
            expected = model(jnp.float32(1)) * 2
        np.testing.assert_allclose(results[seed][0], expected, rtol=1e-6)
        assert results[seed][1] == 1


# --- JAX internals ------------------------------------------------------------------


def test_self_test_fails_loudly_when_staging_traces_change(monkeypatch):
    class NotTheStagingTrace:
        pass

    monkeypatch.setattr(_trace, "_Staging", NotTheStagingTrace)
    with pytest.raises(_trace.EffaxInternalsError, match=rf"jax {jax.__version__}.*0\.10\.x"):
        _trace._self_test()


def test_self_test_fails_loudly_when_parent_links_change(monkeypatch):
    monkeypatch.setattr(_trace, "_ancestors", lambda trace: iter(()))
    real = _trace.reachability

    def broken(set_ref):
        # as if traces no longer carried `parent_trace`: nothing but the current one
        return "ok" if _trace.current_trace_ref() is set_ref else "detached"

    monkeypatch.setattr(_trace, "reachability", broken)
    with pytest.raises(_trace.EffaxInternalsError, match="cannot classify JAX traces"):
        _trace._self_test()
    assert real is not broken


def test_self_test_passes_on_this_jax():
    _trace._self_test()
