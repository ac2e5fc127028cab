"""The generated per-call path of a compiled handled function (effax/_warmpath.py).

After its first calls, `effax.handle(fn, transform=jax.jit)` runs generated code
that reads and writes the handlers' fields directly. These tests check that it
computes exactly what the general path (and eager code) computes, in every case
where it must hand back to the general path: a changed static export, a retrace
with another output layout, a retrace that performs another effect, another
handler stack or trace, handlers that override the protocol methods. They also
count general-path calls (the one internal this module looks at) to show the
fast path is really taken, and that stacks and handlers are not kept alive.
"""

import gc
import linecache
import threading
import weakref

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import Tally, assert_bitwise_equal, assert_transparent, events

import effax as fx
from effax import _callpath, _eager

scale = fx.Ask[jax.Array]("scale")
mode = fx.Ask[str]("mode", static=True)
total = fx.State[jax.Array]("total")
noise = fx.RandomKey("noise")
log = fx.Emit[jax.Array]("log")


def step(x):
    y = x * scale.ask() + jax.random.normal(noise.next_key(), x.shape)
    total.set(total.get() + jnp.sum(y))
    log.emit(jnp.max(y))
    return y


def handlers():
    return fx.handlers(
        scale.provide(jnp.float32(1.5)),
        total.init(jnp.float32(0)),
        noise.seed(0),
        log.collect(),
    )


def final(hs):
    stream = hs[noise]
    next_key = jax.random.fold_in(stream.base_key, stream.counter)
    return hs[total], hs[log], stream.counter, jax.random.key_data(next_key)


def run(fn, xs):
    with handlers() as hs:
        outs = [fn(x) for x in xs]
        return outs, final(hs)


@pytest.fixture
def general_calls(monkeypatch):
    """How many calls took `handle`'s general path (not counting the programs of
    eager control-flow calls, which `effax.scan` and the others compile)."""
    count = [0]
    original = _callpath.Handled.call

    def counted(self, args, kwargs):
        count[0] += not isinstance(self.fn, _eager._Again)
        return original(self, args, kwargs)

    monkeypatch.setattr(_callpath.Handled, "call", counted)
    return count


XS = [jnp.linspace(-1.0, 1.0, 4) * i for i in range(6)]


def test_fast_path_is_taken_and_computes_what_eager_does(general_calls):
    compiled = fx.jit(step)
    assert_transparent(run(compiled, XS), run(step, XS))
    # the first call learns the row, runs the program and binds the warm path
    assert general_calls[0] == 1
    ours = run(compiled, XS)  # a new stack of the same kinds: one general call
    assert general_calls[0] == 2
    assert_transparent(ours, run(step, XS))


def test_signatures_args_kwargs_defaults():
    def positional(a, b):
        return step(a) + b

    def generic(a, *rest, b=1.0, **extra):
        return step(a) + b + sum(rest) + sum(extra.values())

    def defaulted(a, b=2.0):
        return step(a) * b

    def builtin_names(tuple, _):  # parameters named like what generated code uses
        return step(tuple) + _

    cases = [
        (positional, lambda f, x: f(x, 1.0)),
        (positional, lambda f, x: f(b=1.0, a=x)),
        (generic, lambda f, x: f(x, 3.0, b=2.0, c=4.0)),
        (generic, lambda f, x: f(x)),
        (defaulted, lambda f, x: f(x)),
        (defaulted, lambda f, x: f(x, 3.0)),
        (builtin_names, lambda f, x: f(x, 1.0)),
    ]
    for fn, call in cases:
        compiled = fx.jit(fn)
        ours = run(lambda x, f=compiled, c=call: c(f, x), XS)
        theirs = run(lambda x, f=fn, c=call: c(f, x), XS)
        assert_transparent(ours, theirs)


def test_static_export_that_changes_is_seen():
    traces = []

    def fn(x):
        traces.append(mode.ask())
        return x * 2 if mode.ask() == "double" else x

    compiled = fx.jit(fn)
    provider = mode.provide("double")
    with provider:
        assert [float(compiled(1.0)) for _ in range(3)] == [2.0] * 3
        provider.provided = "same"  # a static export changed under a live fast path
        assert [float(compiled(1.0)) for _ in range(3)] == [1.0] * 3
        provider.provided = "double"  # back to a value seen before: no retrace
        assert float(compiled(1.0)) == 2.0
    assert traces == ["double", "same"]


def test_retrace_with_another_number_of_draws():
    # The number of keys drawn depends on the shape: each shape is its own trace
    # with its own output layout; alternating them must keep counting right.
    def draws(x):
        for _ in range(x.shape[0]):
            x = x + jax.random.uniform(noise.next_key())
        return x

    shapes = [jnp.ones(n) for n in (1, 2, 1, 3, 3, 2, 1)]
    assert_transparent(run(fx.jit(draws), shapes), run(draws, shapes))


def test_retrace_that_performs_another_effect():
    def sometimes(x):
        if x.shape[0] > 2:
            total.set(total.get() + 1)
        return x * scale.ask()

    xs = [jnp.ones(2), jnp.ones(2), jnp.ones(2), jnp.ones(3), jnp.ones(2), jnp.ones(3)]
    assert_transparent(run(fx.jit(sometimes), xs), run(sometimes, xs))


def test_stacks_alternate_and_a_with_block_per_call(general_calls):
    traces = []
    compiled = fx.jit(lambda x: (traces.append(x.shape), step(x))[1])

    def go(fn):
        out = []
        with handlers() as outer:
            cells = [outer.handler(e) for e in (scale, total, noise, log)]
            with handlers() as inner:
                for x in XS:
                    out.append(fn(x))  # the inner handlers
                    with fx.handlers(*cells):  # the outer ones again: a new stack per call
                        out.append(fn(x))
        return out, final(outer), final(inner)

    assert_transparent(go(compiled), go(step))
    # One general call per stack: the first call learns the row and binds the warm
    # path; each new stack binds its own; going back to a stack takes its warm
    # path at once. One trace in all.
    assert general_calls[0] == 1 + len(XS)
    assert traces == [XS[0].shape]


def test_under_effax_grad():
    def loss(w):
        return jnp.sum(fx.jit(step)(w) ** 2)

    def run_grad(f):
        with handlers() as hs:
            gs = [fx.grad(f)(x) for x in XS[:3]]
            return gs, final(hs)

    assert_transparent(run_grad(loss), run_grad(lambda w: jnp.sum(step(w) ** 2)))


def test_inside_effax_scan(general_calls):
    # The body calls the handled function three times: the first binds the warm
    # path, the next two run it, under the scan's trace.
    def loop(f):
        def go(c, x):
            for _ in range(3):
                c = c + jnp.sum(f(x))
            return c, c

        with handlers() as hs:
            out = fx.scan(go, jnp.float32(0), jnp.stack(XS[:4]))
        return out, final(hs)

    compiled = fx.jit(step)
    assert_transparent(loop(compiled), loop(step))
    assert general_calls[0] == 1  # the later calls inside the body took the warm path


def test_inside_effax_vmap():
    # Per element: an Ask, split keys and emits; the handled call runs three times.
    def per_example(f):
        def go(x):
            return f(x) + f(x) + f(x)

        return go

    def noisy(x):
        log.emit(jnp.max(x))
        return x * scale.ask() + jax.random.normal(noise.next_key(), x.shape)

    def run_vmap(f):
        with handlers() as hs:
            out = [fx.vmap(per_example(f))(jnp.stack(XS[:4])) for _ in range(2)]
        return out, final(hs)

    assert_transparent(run_vmap(fx.jit(noisy)), run_vmap(noisy))


@attrs.define(eq=False)
class LoudTally(Tally):
    """The same, with the protocol methods overridden: the generated code calls them."""

    calls: list = attrs.field(factory=list)

    def export(self):
        self.calls.append("export")
        return fx.Export(carry=self.count)

    def absorb(self, outcome, *, steps):
        self.calls.append("absorb")
        self.count = outcome.carry


@pytest.mark.parametrize("cls", [Tally, LoudTally])
def test_user_defined_handlers(cls):
    def fn(x):
        events.tick()
        return step(x)

    def go(f):
        with cls(events) as tally, handlers() as hs:
            outs = [f(x) for x in XS]
        return outs, final(hs), tally.value

    assert_transparent(go(fx.jit(fn)), go(fn))
    if cls is LoudTally:
        tally = cls(events)
        with tally, handlers():
            compiled = fx.jit(fn)
            for x in XS:
                compiled(x)
        # The first call under this new stack resolves its environment (one export)
        # and binds the warm path already generated for `fn`; every call then
        # exports and absorbs through the overridden methods.
        assert tally.calls == ["export"] + ["export", "absorb"] * len(XS)


def test_own_cells_count_while_compiled_once():
    traces = []

    def tick():
        traces.append(1)
        total.set(total.get() + 1)
        return total.get()

    counter = fx.handle(tick, total.init(jnp.float32(0)), transform=jax.jit)
    assert [float(counter()) for _ in range(5)] == [1, 2, 3, 4, 5]
    # its plan reads nothing from the stack: any stack takes the same path
    with handlers():
        assert [float(counter()) for _ in range(2)] == [6, 7]
    with scale.provide(jnp.float32(0)), handlers():
        assert float(counter()) == 8
    assert len(traces) == 1
    # but not any trace: under a raw jit its cell would become a stale constant
    with pytest.raises(fx.EffectLeakError, match=r"created outside the jax\.jit"):
        jax.jit(counter)()
    assert float(counter()) == 9


def test_a_call_that_raises_absorbs_nothing():
    def fn(x):
        total.set(total.get() + 1)
        jax.debug.callback(lambda v: _raise_if(v > 2), total.get())
        return x

    compiled = fx.jit(fn)
    with handlers() as hs:
        for _ in range(2):
            compiled(1.0)
        with pytest.raises(Exception, match="third"):
            jax.block_until_ready(compiled(1.0))
        assert float(hs[total]) == 2.0


def _raise_if(flag):
    if flag:
        raise ValueError("the third call raises")


def test_stack_and_handlers_are_not_kept_alive():
    compiled = fx.jit(step)
    with handlers() as hs:
        for x in XS[:3]:
            compiled(x)
        cell = weakref.ref(hs.handler(total))
    del hs
    gc.collect()
    assert cell() is None, "the handled function kept a finished stack's handlers"
    entry = weakref.ref(compiled)
    del compiled
    gc.collect()
    assert entry() is None, "a handled function was not freed"


def test_threads_with_their_own_stacks_race_on_one_function():
    compiled = fx.jit(step)
    expected = run(step, XS)
    results = {}
    barrier = threading.Barrier(4)

    def worker(i):
        barrier.wait()
        results[i] = run(compiled, XS)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for result in results.values():
        assert_transparent(result, expected)


def test_same_program_as_the_general_path_bitwise():
    # the fast path and the general path run the same compiled program
    compiled = fx.jit(step)
    with handlers():
        first = compiled(XS[1])  # general path
        compiled(XS[1])  # general path, installs
        for _ in range(3):
            compiled(XS[1])  # fast path
    with handlers():
        again = compiled(XS[1])  # a fresh stack, same state as the first call
    assert_bitwise_equal(again, first)
    assert np.all(np.isfinite(np.asarray(again)))


def test_generated_code_is_shared_not_accumulated():
    # Handled functions created in a loop (or inside traced bodies) share their
    # generated code: neither compiled code nor its linecache source piles up.
    def entries():
        return sum(1 for name in linecache.cache if "<effax.handle #" in name)

    def make(i):
        def fn(x):
            return step(x) * i

        return fx.jit(fn)

    make(0)  # the shapes of this test's code are compiled once
    with handlers():
        warm = [make(i) for i in range(3)]
        for compiled in warm:
            for x in XS[:3]:
                compiled(x)
    before = entries()
    with handlers():
        for i in range(50):
            compiled = make(i)
            for x in XS[:3]:
                compiled(x)
    assert entries() == before
