"""Handler code runs where its handler is installed (issue 40, item 3; DESIGN §2c).

The effects an interceptor's function, an `Interceptor` subclass's method or a
handler's operation method performs are looked up from the handler's position in
the stack (the handlers installed outside it), not from the performer's: handlers
installed between the handler and the performer are not visible to it, and the
performer's effect row (`effax.uses`) does not apply to it. Each case runs eagerly
and under each wrapper, and the compiled answers (values, and keys bit for bit)
are compared with the eager ones.
"""

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_bitwise_equal, assert_transparent

import effax as fx
from effax import _context

draws = fx.State[jax.Array]("draws")
level = fx.Ask[jax.Array]("level")
inner_only = fx.Ask[jax.Array]("inner_only")
counts = fx.State[jax.Array]("counts")
acts = fx.Tap[jax.Array]("acts")
seen = fx.Tap[jax.Array]("seen")


def _counting():
    """The issue's interceptor: counts the keys drawn in `draws`, installed outside it."""
    return fx.intercept(fx.rng, next_key=lambda o: (draws.modify(lambda n: n + 1), o.next_key())[1])


@fx.uses(fx.rng)
def _noise(x):
    return x + jax.random.normal(fx.rng.next_key(), x.shape)


# Each wrapper around `_noise`, with the eager Python it must agree with.
def _jit(x):
    return fx.jit(_noise)(x)


def _scan(x):
    def body(c, _):
        return _noise(c), None

    return fx.scan(body, x, None, length=3)[0]


def _scan_eager(x):
    for _ in range(3):
        x = _noise(x)
    return x


def _cond(x):
    return fx.cond(x[0] > 0, _noise, lambda x: _noise(_noise(x)), x)


def _cond_eager(x):
    return _noise(x) if x[0] > 0 else _noise(_noise(x))


def _checkpoint(x):
    return fx.checkpoint(_noise)(x)


WRAPPERS = {
    "eager": (_noise, _noise),
    "jit": (_jit, _noise),
    "scan": (_scan, _scan_eager),
    "cond": (_cond, _cond_eager),
    "checkpoint": (_checkpoint, _noise),
}


def _run_counting(fn, x):
    with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(0)) as hs:
        with _counting():
            y = fn(x)
        after = fx.rng.next_key()
    return y, hs[draws], after


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_interceptor_performs_an_effect_outside_it_under_a_row(name):
    compiled, eager = WRAPPERS[name]
    x = jnp.arange(2.0)
    got = _run_counting(compiled, x)
    want = _run_counting(eager, x)
    assert int(got[1]) == int(want[1]) > 0
    assert_transparent(got, want)


def test_interceptor_under_a_row_vmap():
    x = jnp.arange(2.0)

    def shared(x):
        return fx.vmap(_noise, keys="shared")(jnp.stack([x, 2 * x]))

    def eager(x):
        # keys="shared": one draw, the key the unbatched function draws, for both
        # elements (counted once by the interceptor)
        with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(0)) as hs:
            with _counting():
                noise = jax.random.normal(fx.rng.next_key(), x.shape)
            after = fx.rng.next_key()
        return jnp.stack([x + noise, 2 * x + noise]), hs[draws], after

    got, want = _run_counting(shared, x), eager(x)
    assert int(got[1]) == int(want[1]) == 1
    assert_transparent(got, want)


def test_interceptor_under_a_row_grad():
    x = jnp.arange(2.0)

    def loss(x):
        return jnp.sum(_noise(x) ** 2)

    got = _run_counting(fx.jit(fx.grad(loss)), x)
    want = _run_counting(fx.grad(loss), x)
    assert int(got[1]) == int(want[1]) == 1
    assert_transparent(got, want)


# --- the taps recipe: values and gradients in one run, under @fx.uses(acts) ---------


def _block(x):
    return acts.tap("out", jnp.tanh(acts.tap("pre", 2.0 * x)))


def _prefixed(i):
    return fx.intercept(acts, tap=lambda outer, site, v: outer.tap(f"block{i}/{site}", v))


@fx.uses(acts)
def _network(x):
    for i in range(3):
        with _prefixed(i):
            x = _block(x)
    return jnp.sum(x)


@pytest.mark.parametrize("compiled", [False, True])
def test_taps_values_and_gradients_under_a_row(compiled):
    grad = fx.grad(_network)
    run = fx.jit(grad) if compiled else grad
    tee = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v)))
    with seen.record("*/out") as values, acts.gradients("*/out") as grads, tee:
        g = run(jnp.ones(2))
    assert sorted(values.value) == sorted(grads.value) == [f"block{i}/out" for i in range(3)]
    assert_transparent((g, values.value, grads.value), _taps_eager())


def _taps_eager():
    tee = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, seen.tap(site, v)))
    with seen.record("*/out") as values, acts.gradients("*/out") as grads, tee:
        g = fx.grad(_network)(jnp.ones(2))
    return g, values.value, grads.value


def test_taps_values_and_gradients_eager_answer():
    g, values, grads = _taps_eager()
    # the gradient at the last block's output is 1 (the sum); the first block's
    # value is tanh(2 * 1)
    assert_bitwise_equal(grads["block2/out"], jnp.ones(2))
    assert_transparent(values["block0/out"], jnp.tanh(2.0 * jnp.ones(2)))
    assert g.shape == (2,)


# --- adversarial cases --------------------------------------------------------------


def _jitted(fn):
    return fx.jit(fn)


RUNS = {"eager": lambda fn: fn, "jit": _jitted, "checkpoint": fx.checkpoint}


@pytest.mark.parametrize("run", list(RUNS))
def test_interceptor_performing_its_own_effect_reaches_the_one_outside(run):
    # the function answers `ask` by asking `level` itself: that reaches the provider
    # outside the interceptor (2.0), not the interceptor again (no recursion)
    twice = fx.intercept(level, ask=lambda outer: level.ask() + outer.ask())

    @fx.uses(level)
    def f(x):
        return x * level.ask()

    with level.provide(jnp.float32(2.0)), twice:
        y = RUNS[run](f)(jnp.float32(3.0))
    assert float(y) == 12.0


@pytest.mark.parametrize("run", list(RUNS))
def test_a_handler_installed_inside_the_interceptor_is_not_visible_to_it(run):
    # `inner_only` is provided between the interceptor and the performer: the
    # interceptor's function cannot see it, so it raises naming it
    peek = fx.intercept(level, ask=lambda outer: outer.ask() + inner_only.ask())

    def f(x):
        return x * level.ask()

    with level.provide(jnp.float32(2.0)), peek, inner_only.provide(jnp.float32(1.0)):
        assert float(inner_only.ask()) == 1.0  # visible to the performer
        with pytest.raises(fx.UnhandledEffectError, match=r"Ask\('inner_only'\) was performed"):
            RUNS[run](f)(jnp.float32(3.0))


@pytest.mark.parametrize("run", list(RUNS))
def test_an_effect_handled_only_inside_the_performer_is_unhandled_for_the_interceptor(run):
    peek = fx.intercept(level, ask=lambda outer: outer.ask() + inner_only.ask())

    def f(x):
        with inner_only.provide(jnp.float32(1.0)):
            return x * level.ask()

    with level.provide(jnp.float32(2.0)), peek:
        with pytest.raises(fx.UnhandledEffectError, match=r"Ask\('inner_only'\) was performed"):
            RUNS[run](f)(jnp.float32(3.0))


@pytest.mark.parametrize("run", list(RUNS))
def test_nested_interceptors_each_see_what_is_outside_them(run):
    # `counts` is installed outside both interceptors, `draws` between them: the
    # inner one sees both, the outer one only `counts`
    outer_icpt = fx.intercept(level, ask=lambda outer: outer.ask() + counts.get())
    inner_icpt = fx.intercept(level, ask=lambda outer: 10 * outer.ask() + draws.get())
    peeking = fx.intercept(level, ask=lambda outer: outer.ask() + draws.get())

    def f(x):
        return x + level.ask()

    with counts.init(jnp.float32(1.0)), level.provide(jnp.float32(0.0)), outer_icpt:
        with draws.init(jnp.float32(100.0)), inner_icpt:
            y = RUNS[run](f)(jnp.float32(0.0))
        # outer: 0 + 1; inner: 10 * 1 + 100
        assert float(y) == 110.0
        with peeking, draws.init(jnp.float32(100.0)), inner_icpt:
            with pytest.raises(fx.UnhandledEffectError, match=r"State\('draws'\) was performed"):
                RUNS[run](f)(jnp.float32(0.0))


def test_a_handler_shadowed_between_an_interceptor_and_the_performer():
    # `counts` installed outside the interceptor and again inside it: the
    # interceptor's code sees the outer one (eagerly); a compiled call plumbs only
    # the inner one (what the performer sees), so reaching the outer one from
    # inside it is refused, naming the effect, rather than answered differently
    icpt = fx.intercept(level, ask=lambda outer: outer.ask() + counts.get())

    def f(x):
        return x + level.ask() + counts.get()

    with counts.init(jnp.float32(1.0)), level.provide(jnp.float32(0.0)), icpt:
        with counts.init(jnp.float32(100.0)):
            assert float(f(jnp.float32(0.0))) == 101.0
            with pytest.raises(fx.EffectLeakError, match=r"State\('counts'\) was performed"):
                fx.jit(f)(jnp.float32(0.0))


@pytest.mark.parametrize("run", ["jit", "checkpoint"])
def test_an_exception_in_the_interceptor_leaves_handlers_and_states_as_before(run):
    def boom(outer):
        draws.modify(lambda n: n + 1)
        raise ValueError("boom in the interceptor")

    raising = fx.intercept(fx.rng, next_key=boom)

    @fx.uses(fx.rng)
    def f(x):
        return x + jax.random.normal(fx.rng.next_key(), x.shape)

    with fx.handlers(draws.init(jnp.int32(5)), fx.rng.seed(0)) as hs:
        before = _context.current_stack()
        with raising:
            with pytest.raises(ValueError, match="boom in the interceptor"):
                RUNS[run](f)(jnp.zeros(2))
        assert _context.current_stack() is before
        key = fx.rng.next_key()
    assert int(hs[draws]) == 5
    with fx.rng.seed(0):
        assert_bitwise_equal(key, fx.rng.next_key())


def test_an_exception_in_the_interceptor_eagerly_restores_the_stack():
    def boom(outer):
        raise ValueError("boom")

    with level.provide(jnp.float32(1.0)), fx.intercept(level, ask=boom):
        before = _context.current_stack()
        with pytest.raises(ValueError, match="boom"):
            level.ask()
        assert _context.current_stack() is before
        assert level.handler() is before[level][0]


# --- Interceptor subclasses and plain handlers --------------------------------------


class CountingStream(fx.Interceptor):
    """A forwarding handler of its own: counts every key drawn in `draws`."""

    def __init__(self):
        super().__init__(fx.rng, ())

    def next_key(self):
        draws.modify(lambda n: n + 1)
        return self.outer().next_key()


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_interceptor_subclass_method_performs_an_effect_outside_it(name):
    compiled, eager = WRAPPERS[name]

    def run(fn, x):
        with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(0)) as hs:
            with CountingStream():
                y = fn(x)
        return y, hs[draws]

    x = jnp.arange(2.0)
    got, want = run(compiled, x), run(eager, x)
    assert int(got[1]) == int(want[1]) > 0
    assert_transparent(got, want)


class Scaled(fx.Handler):
    """A plain handler of `level` whose `ask` performs `counts` (installed outside)."""

    def __init__(self):
        self.effect = level

    value = None

    @classmethod
    def rebuild(cls, effect, static, const, carry):
        return cls()

    def ask(self):
        counts.modify(lambda n: n + 1)
        return 2 * counts.get()


def test_plain_handler_operation_performs_an_effect_outside_it_under_a_row():
    @fx.uses(level)
    def f():
        return level.ask()

    with counts.init(jnp.float32(0.0)) as cell, Scaled():
        assert float(f()) == 2.0
        assert float(f()) == 4.0
    assert float(cell.value) == 2.0


def test_plain_handler_does_not_see_a_handler_installed_inside_it():
    with counts.init(jnp.float32(0.0)), Scaled(), counts.init(jnp.float32(50.0)) as inner:
        assert float(level.ask()) == 2.0
    assert float(inner.value) == 50.0


# One compiled function, called under the same handlers installed in two orders: its
# handler code sees different handlers in each, so a program traced under one order
# must not serve the other (found by the blind6 corpus: the compiled call reused the
# first program, wrote to the inner cell and raised nothing where eager raises).
def _peek(outer):
    return outer.ask() + draws.get()


def _peeking_interceptor():
    # (one function for every interceptor made: a new lambda would trace anew anyway)
    return fx.intercept(level, ask=_peek)


def _installed(kind, visible):
    """The handlers of `kind`'s case, the cell its handler code reads or writes
    installed outside the code's handler (`visible`) or inside it; and that cell."""
    code = _peeking_interceptor() if kind == "interceptor" else _CountingLevel(level, ())
    cell = draws.init(jnp.float32(5.0))
    handlers = [level.provide(jnp.float32(1.0)), code]
    return ([cell, *handlers] if visible else [*handlers, cell]), cell


class _CountingLevel(fx.Interceptor):
    """An `Interceptor` subclass whose method writes `draws` (a user's class: its
    method runs where it is installed, as a handler class's operation does)."""

    def ask(self):
        draws.modify(lambda n: n + 1)
        return self.outer().ask() + draws.get()


COMPILERS = {
    "jit": fx.jit,
    "handle": lambda f: fx.handle(f, transform=jax.jit),
    "scan": lambda f: lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=2)[0],
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("kind", ["interceptor", "subclass"])
@pytest.mark.parametrize("visible_first", [True, False])
def test_a_program_of_one_install_order_never_serves_another(kind, compiler, visible_first):
    def f(x):
        return x + level.ask()

    def eager(x):
        return f(f(x)) if compiler == "scan" else f(x)

    compiled = COMPILERS[compiler](f)
    for visible in (visible_first, not visible_first):
        handlers, cell = _installed(kind, visible)
        with fx.handlers(*handlers):
            if visible:  # the handler code sees the cell, installed outside it
                want = eager(jnp.float32(0.0))
            else:  # installed inside it: unhandled for the code
                with pytest.raises(fx.UnhandledEffectError):
                    eager(jnp.float32(0.0))
        want_cell = cell.value
        handlers, cell = _installed(kind, visible)
        with fx.handlers(*handlers):
            if visible:
                assert_bitwise_equal(compiled(jnp.float32(0.0)), want)
            else:  # compiled alike, and the cell out of the code's reach is untouched
                with pytest.raises(fx.UnhandledEffectError):
                    compiled(jnp.float32(0.0))
        assert_bitwise_equal(cell.value, want_cell)
