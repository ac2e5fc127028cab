"""effax.scan / fori_loop / while_loop / cond / switch / map against eager Python."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent

import effax as fx

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
        with pytest.raises(ValueError, match=r"Emit\('log'\) emitted values inside effax"):
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
