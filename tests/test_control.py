"""effax.scan / fori_loop / while_loop / cond / switch / map against eager Python."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

scale = fx.Ask[jax.Array]("scale")
total = fx.State[jax.Array]("total")
stream = fx.RandomKey("stream")
log = fx.Emit[jax.Array]("log")


def handlers():
    return fx.handlers(
        scale.provide(jnp.float32(2)),
        total.init(jnp.float32(0)),
        stream.seed(jax.random.key(3)),
        log.collect(),
    )


def step(carry, x):
    """A loop body performing every kind of effect; draws two keys per step."""
    noise = jax.random.normal(stream.next_key())
    total.set(total.get() + x * scale.ask())
    log.emit(x + noise)
    k = stream.next_key()
    return carry + x, (noise, k)


def final(hs):
    """Handler states after a run, plus the next key the stream would draw."""
    return hs[total], hs[stream].counter, stream.next_key()


XS = jnp.arange(4.0)


def eager_scan():
    with handlers() as hs:
        carry, ys = 0.0, []
        for x in XS:
            carry, y = step(carry, x)
            ys.append(y)
        ys = jax.tree.map(lambda *leaves: jnp.stack(leaves), *ys)
        after = final(hs)
    return carry, ys, after, [jnp.stack(hs[log])]


def effax_scan(wrap=lambda f: f):
    with handlers() as hs:
        carry, ys = wrap(lambda: fx.scan(step, jnp.float32(0), XS))()
        after = final(hs)
    return carry, ys, after, hs[log]


@pytest.mark.parametrize("wrap", [lambda f: f, fx.jit], ids=["eager", "in-jit"])
def test_scan_matches_python_loop(wrap):
    ours = effax_scan(wrap)
    theirs = eager_scan()
    assert_transparent(ours, theirs)
    assert ours[2][1] == 2 * len(XS)  # the counter stayed a Python int


def test_scan_reverse_matches_reversed_loop():
    with handlers() as hs:
        _, keys = fx.scan(lambda c, x: (c, stream.next_key()), 0, XS, reverse=True)
        counter = hs[stream].counter
    with handlers():
        eager = [stream.next_key() for _ in XS][::-1]
    assert_bitwise_equal(keys, jnp.stack(eager))
    assert counter == len(XS)


def test_scan_with_length_and_no_xs():
    with handlers() as hs:
        _, keys = fx.scan(lambda c, _: (c, stream.next_key()), 0, length=3)
    with handlers():
        eager = jnp.stack([stream.next_key() for _ in range(3)])
    assert_bitwise_equal(keys, eager)
    assert hs[stream].counter == 3


def test_map_matches_python_loop():
    def f(x):
        return x * scale.ask() + jax.random.normal(stream.next_key())

    with handlers():
        ours = fx.map(f, XS)
    with handlers():
        theirs = jnp.stack([f(x) for x in XS])
    assert_transparent(ours, theirs)
    with pytest.raises(NotImplementedError, match="batch_size"):
        fx.map(f, XS, batch_size=2)


def body(i, value):
    total.set(total.get() + i)
    return value + jax.random.uniform(stream.next_key())


@pytest.mark.parametrize("bounds", ["python", "traced"])
def test_fori_loop_matches_python_loop(bounds):
    def run(lo, hi):
        return fx.fori_loop(lo, hi, body, jnp.float32(0))

    with handlers() as hs:
        ours = run(1, 5) if bounds == "python" else fx.jit(run)(1, 5)
        ours = ours, final(hs)
    with handlers() as hs:
        value = jnp.float32(0)
        for i in range(1, 5):
            value = body(jnp.int32(i), value)
        theirs = value, final(hs)
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])  # the next key after the loop
    assert int(ours[1][1]) == theirs[1][1] == 4
    assert float(ours[1][0]) == float(theirs[1][0]) == 10.0


def test_while_loop_matches_python_loop():
    def cond_fun(x):
        return x < scale.ask() * 3

    def body_fun(x):
        return x + jax.random.uniform(stream.next_key())

    for wrap in [lambda f: f, fx.jit]:
        with handlers() as hs:
            ours = wrap(lambda: fx.while_loop(cond_fun, body_fun, jnp.float32(0)))()
            ours_after = final(hs)
        with handlers() as hs:
            x = jnp.float32(0)
            while cond_fun(x):
                x = body_fun(x)
            theirs_after = final(hs)
        assert_transparent(ours, x)
        # the counter is traced now, and later draws still agree
        assert isinstance(ours_after[1], jax.Array)
        assert int(ours_after[1]) == theirs_after[1]
        assert_bitwise_equal(ours_after[2], theirs_after[2])


def test_while_loop_rejects_emit_and_cond_updates():
    with handlers():
        with pytest.raises(
            ValueError,
            match=r"Emit\('log'\) sent out values \(emitted, or recorded taps\) inside effax",
        ):
            fx.while_loop(lambda x: x < 3, lambda x: (log.emit(x), x + 1)[1], 0)
        with pytest.raises(ValueError, match=r"State\('total'\) was changed inside effax"):
            fx.while_loop(lambda x: (total.set(x * 1.0), x < 3)[1], lambda x: x + 1, 0)
        with pytest.raises(ValueError, match=r"RandomKey\('stream'\) was changed"):
            fx.while_loop(lambda x: (stream.next_key(), x < 3)[1], lambda x: x + 1, 0)


def branch_same(x):
    total.set(total.get() + x)
    return x + jax.random.normal(stream.next_key())


def branch_other(x):
    log.emit(x)  # replaced below where emits must match
    return x - jax.random.normal(stream.next_key())


def branch_two_keys(x):
    return x * jax.random.normal(stream.next_key()) + jax.random.normal(stream.next_key())


@pytest.mark.parametrize("pred", [True, False])
@pytest.mark.parametrize("wrap", [lambda f: f, fx.jit], ids=["eager", "in-jit"])
def test_cond_matches_if_else(pred, wrap):
    def true_fun(x):
        log.emit(x)
        return branch_same(x)

    def false_fun(x):
        log.emit(-x)
        return branch_two_keys(x)

    with handlers() as hs:
        ours = wrap(lambda p, x: fx.cond(p, true_fun, false_fun, x))(pred, jnp.float32(1.5))
        ours = ours, final(hs), hs[log]
    with handlers() as hs:
        x = jnp.float32(1.5)
        theirs = true_fun(x) if pred else false_fun(x)
        theirs = theirs, final(hs), hs[log]
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])  # later draws agree
    assert int(ours[1][1]) == theirs[1][1]
    assert float(ours[1][0]) == float(theirs[1][0])
    assert_transparent(ours[2], theirs[2])


def test_cond_with_equal_draws_keeps_python_counter():
    with handlers() as hs:
        fx.cond(True, branch_same, lambda x: x + jax.random.normal(stream.next_key()), 1.0)
        assert hs[stream].counter == 1
        assert isinstance(hs[stream].counter, int)


def test_cond_rejects_mismatched_emits():
    with handlers():
        with pytest.raises(ValueError, match=r"Emit\('log'\) emitted different numbers"):
            fx.cond(True, branch_other, branch_same, jnp.float32(1))


@pytest.mark.parametrize("index", [0, 1, 2])
def test_switch_matches_python_indexing(index):
    branches = [branch_same, branch_two_keys, lambda x: x * scale.ask()]
    with handlers() as hs:
        ours = fx.jit(lambda i, x: fx.switch(i, branches, x))(index, jnp.float32(2))
        ours = ours, final(hs)
    with handlers() as hs:
        theirs = branches[index](jnp.float32(2)), final(hs)
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])
    assert float(ours[1][0]) == float(theirs[1][0])


def test_cond_inside_scan_matches_python():
    def body(c, x):
        y = fx.cond(x > 1, branch_same, branch_two_keys, x)
        return c + y, y

    def eager_body(c, x):
        y = branch_same(x) if x > 1 else branch_two_keys(x)
        return c + y, y

    with handlers() as hs:
        ours = fx.jit(lambda: fx.scan(body, jnp.float32(0), XS))(), final(hs)
    with handlers() as hs:
        c, ys = jnp.float32(0), []
        for x in XS:
            c, y = eager_body(c, x)
            ys.append(y)
        theirs = (c, jnp.stack(ys)), final(hs)
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])
    assert int(ours[1][1]) == theirs[1][1]


def test_handle_inside_scan_and_scan_inside_handle():
    own = fx.State[jax.Array]("own")

    def inner(x):
        own.set(own.get() + 1)
        return step(jnp.float32(0), x)[1]

    def body(c, x):
        return c, fx.handle(inner, own.init(jnp.int32(0)))(x)

    with handlers() as hs:
        ours = fx.jit(lambda: fx.scan(body, 0.0, XS))()[1], final(hs), hs[log]
    with handlers() as hs:
        ys = [inner_eager(x) for x in XS]
        theirs = jax.tree.map(lambda *v: jnp.stack(v), *ys), final(hs), [jnp.stack(hs[log])]
    assert_transparent(ours, theirs)


def inner_eager(x):
    return step(jnp.float32(0), x)[1]


def test_scan_plumbs_only_declared_row_and_reads_nothing_else():
    # An unrelated handler installed outside a raw jax.jit is not reachable: a
    # scan inside that jit must not trip over it unless the body performs it.
    def fn(x):
        with stream.seed(0):
            _, keys = fx.scan(lambda c, _: (c, stream.next_key()), 0, length=2)
        return x, keys

    with scale.provide(jnp.float32(1)):
        _x, keys = jax.jit(fn)(1.0)
    assert keys.shape == (2,)


def test_unhandled_and_leaks_inside_scan():
    with pytest.raises(fx.UnhandledEffectError, match=r"Ask\('scale'\)"):
        fx.scan(lambda c, x: (c, scale.ask()), 0, XS)
    with scale.provide(jnp.float32(1)):
        with pytest.raises(fx.EffectLeakError, match="inside scan"):
            fx.scan(lambda c, x: (c, jax.lax.scan(lambda a, b: (a, scale.ask()), 0, XS)), 0, XS)


def test_state_type_change_in_scan():
    with total.init(jnp.float32(0)):
        with pytest.raises(fx.StateTypeError, match=r"State\('total'\) changed its type"):
            fx.scan(lambda c, x: (total.set(jnp.int32(1)), (c, x))[1], 0, XS)


def test_scan_exception_leaves_handlers_untouched():
    def body(c, x):
        total.set(total.get() + 1)
        stream.next_key()
        raise RuntimeError("boom")

    with handlers() as hs:
        with pytest.raises(RuntimeError, match="boom"):
            fx.scan(body, 0, XS)
        assert float(hs[total]) == 0.0
        assert hs[stream].counter == 0
        assert hs[log] == []
    np.testing.assert_array_equal(XS, np.arange(4.0))


@pytest.mark.parametrize("wrap", ["eager", "jit"])
@pytest.mark.parametrize("grad", ["grad", "value_and_grad"])
def test_a_fori_loop_with_python_int_bounds_is_reverse_differentiable(wrap, grad):
    """fx.fori_loop(0, 3, ...) under fx.grad, as jax.lax.fori_loop (static bounds
    lower to a scan), reading and writing a State inside: the gradient of the
    hand-plumbed loop, and the state's final value."""
    s = fx.State[jax.Array]("s")

    def f(x):
        def body(i, c):
            s.set(s.get() + 1.0)
            return c * x + s.get()

        return fx.fori_loop(0, 3, body, x)

    def by_hand(x, s0):
        return jax.lax.fori_loop(
            0, 3, lambda i, cs: (cs[0] * x + cs[1] + 1.0, cs[1] + 1.0), (x, s0)
        )[0]

    transformed = getattr(fx, grad)(f)
    if wrap == "jit":
        transformed = fx.jit(transformed)
    with s.init(jnp.float32(0.5)) as cell:
        got = transformed(jnp.float32(1.5))
    want = getattr(jax, grad)(by_hand)(jnp.float32(1.5), jnp.float32(0.5))
    np.testing.assert_allclose(
        np.asarray(jax.tree.leaves(got)), np.asarray(jax.tree.leaves(want)), rtol=1e-6
    )
    assert float(cell.value) == 3.5


# --- eager calls trace their body once per handler environment ----------------------


def _counted(fn, traces):
    def counted(*args):
        traces.append(None)
        return fn(*args)

    return counted


def _wrappers(traces, bump=lambda v: v):
    """Each wrapper called eagerly with bodies that count their traces, perform
    every kind of effect and pass one value through `bump`: name -> a function
    running it once."""
    scan_body = _counted(lambda c, x: step(bump(c), x), traces)
    fori_body = _counted(lambda i, c: step(bump(c), i.astype(jnp.float32))[0], traces)
    map_body = _counted(lambda x: step(0.0, bump(x))[1], traces)
    cond_body = _counted(lambda c: c < scale.ask() * 3, traces)
    while_body = _counted(lambda c: bump(c) + jax.random.uniform(stream.next_key()), traces)
    high = _counted(lambda x: (total.set(bump(total.get()) + x), stream.next_key())[1], traces)
    low = _counted(lambda x: (total.set(bump(total.get()) - x), stream.next_key())[1], traces)
    return {
        "scan": lambda: fx.scan(scan_body, jnp.float32(0), XS),
        "fori_loop": lambda: fx.fori_loop(0, 3, fori_body, jnp.float32(0)),
        "map": lambda: fx.map(map_body, XS),
        "while_loop": lambda: fx.while_loop(cond_body, while_body, jnp.float32(0)),
        "cond": lambda: fx.cond(total.get() > 1, high, low, jnp.float32(1.5)),
        "switch": lambda: fx.switch(1, [low, high, low], jnp.float32(1.5)),
    }


WRAPPERS = ["scan", "fori_loop", "map", "while_loop", "cond", "switch"]
# bodies traced per call: a switch traces each of its three branches
TRACED_FUNCTIONS = {"while_loop": 2, "cond": 2, "switch": 3}


@pytest.mark.parametrize("name", WRAPPERS)
def test_an_eager_wrapper_called_again_traces_its_bodies_once(name):
    """Ten eager calls with the same bodies under the same handlers trace each body
    once (as jax.lax's own do), and compute what ten calls traced afresh compute:
    the same outputs, states, key counters, keys and emits, call by call."""
    traces = []
    run = _wrappers(traces)[name]
    with handlers() as hs:
        got = [(run(), *final(hs)) for _ in range(10)]
        emitted = hs[log]
    assert len(traces) == TRACED_FUNCTIONS.get(name, 1)

    fresh_traces = []
    want = []
    with handlers() as hs:
        for _ in range(10):  # new body objects every call: traced every call
            want.append((_wrappers(fresh_traces)[name](), *final(hs)))
        fresh_emitted = hs[log]
    assert len(fresh_traces) == 10 * TRACED_FUNCTIONS.get(name, 1)
    assert_bitwise_equal(got, want)
    assert_bitwise_equal(emitted, fresh_emitted)


@pytest.mark.parametrize("name", WRAPPERS)
def test_an_eager_wrapper_traces_again_for_a_new_handler_environment(name):
    """A static Ask read in the body is part of the program's key: a new static
    value retraces and is seen; going back to the first reuses its program; under
    a new set of handlers of the same kinds (a fresh `with`), nothing retraces."""
    offset = fx.Ask[int]("offset", static=True)
    traces = []
    run = _wrappers(traces, bump=lambda v: v + offset.ask())[name]
    results = {}
    for value in [1, 2, 1, 2]:
        with handlers() as hs, offset.provide(value):
            results.setdefault(value, []).append((run(), *final(hs)))
    assert len(traces) == 2 * TRACED_FUNCTIONS.get(name, 1)
    for value in (1, 2):
        assert_bitwise_equal(results[value][0], results[value][1])
    differs = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), results[1][0], results[2][0])
    assert any(jax.tree.leaves(differs))  # the new value was seen


def test_an_eager_scan_called_again_sees_new_handler_values_and_python_state():
    """The cached program takes every handler value as an input: a new traced Ask
    value, a restored state and a reseeded stream are seen without retracing, and a
    Python side effect of the body runs once (at its one trace), as in lax.scan."""
    traces = []
    body = _counted(step, traces)
    out = []
    for seed, value in [(3, 2.0), (4, 5.0), (3, 2.0)]:
        with fx.handlers(
            scale.provide(jnp.float32(value)),
            total.init(jnp.float32(value)),
            stream.seed(jax.random.key(seed)),
            log.collect(),
        ) as hs:
            carry, ys = fx.scan(body, jnp.float32(0), XS)
            out.append((carry, ys, *final(hs), hs[log]))
    assert len(traces) == 1
    assert_bitwise_equal(out[0], out[2])
    assert float(out[1][2]) == 5.0 + 5.0 * float(XS.sum())  # total: init + Σ x·scale
    assert not bool(jnp.all(out[0][1][0] == out[1][1][0]))  # other seed, other noise


def test_an_eager_scan_whose_body_fails_fails_again_and_changes_nothing():
    """A body that raises while tracing leaves no program behind: the next call
    traces and raises again, and the handlers keep their values."""
    traces = []

    def body(c, x):
        traces.append(None)
        total.set(total.get() + x)
        raise ValueError("bad body")

    with handlers() as hs:
        for _ in range(2):
            with pytest.raises(ValueError, match="bad body"):
                fx.scan(body, 0.0, XS)
        assert float(hs[total]) == 0.0 and hs[stream].counter == 0
    assert len(traces) == 2


def test_an_eager_scan_holds_its_body_weakly():
    """A cached program does not keep its body alive (nor what the body closes
    over): it dies with it."""
    import gc
    import weakref

    from effax import _eager

    big = jnp.zeros(1000)

    def make():
        def body(c, x):
            return c + big[0] + x * total.get(), None

        return body

    body = make()
    with handlers():
        fx.scan(body, 0.0, XS)
    ref = weakref.ref(body)
    count = len(_eager._PROGRAMS)
    del body
    gc.collect()
    assert ref() is None
    assert len(_eager._PROGRAMS) == count - 1


def test_an_eager_scan_under_disable_jit_runs_python_steps():
    """Under jax.disable_jit the body runs step by step on concrete values (a Python
    loop), with the same results as the compiled eager scan."""
    seen = []

    def body(c, x):
        seen.append(type(x))
        return step(c, x)

    with handlers() as hs:
        compiled = (fx.scan(body, jnp.float32(0), XS), *final(hs))
    with handlers() as hs, jax.disable_jit():
        stepped = (fx.scan(body, jnp.float32(0), XS), *final(hs))
    assert len(seen) == 1 + len(XS)  # one trace, then one call per step
    assert_transparent(stepped, compiled)


@pytest.mark.parametrize("start", [jnp.float32(7), 7.0], ids=["array", "python_float"])
@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_a_while_loop_beside_a_state_it_never_reads_traces_once(wrap, start):
    """A while_loop carries every plumbed handler through (JAX cannot prune a
    while_loop's carry), so a compiled call that learns its row from one trace
    must replay that trace without the unread state's input: the first call traces
    the bodies once, and the state keeps its very value (also a weakly typed one)."""
    traces = []
    cond_fun = _counted(lambda c: c < 3.0, traces)
    body_fun = _counted(lambda c: c + jax.random.uniform(stream.next_key()), traces)

    def run():
        return fx.while_loop(cond_fun, body_fun, jnp.float32(0))

    if wrap == "jit":
        run = fx.jit(run)
    with total.init(start) as cell, stream.seed(jax.random.key(3)) as keys:
        got = [(run(), keys.value.counter) for _ in range(3)]
        assert cell.value is start
    assert len(traces) == 2  # cond_fun and body_fun, once each

    key, c, counter, want = jax.random.key(3), 0.0, 0, []
    for _ in range(3):
        c = jnp.float32(0)
        while c < 3.0:
            c = c + jax.random.uniform(jax.random.fold_in(key, counter))
            counter += 1
        want.append((c, jnp.int32(counter)))
    assert_transparent(got, want)
