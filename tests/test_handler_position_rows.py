"""Handler code under a traced region inside a function with a row (DESIGN §2c).

An interceptor installed outside a function with a row runs where it is installed:
the effects its function performs are looked up there, and the row, which binds the
function's own code, does not hide them. A loop, branch, transformation or compiled
call inside that function must compute what the unrolled eager code computes (found
open after issue 40: the region did not plumb the handlers the row hid, so the
interceptor's code raised `UndeclaredEffectError` inside `effax.scan` where the
Python loop ran). The row still binds the function's own code inside the region, and
an interceptor installed inside the function still sees the row.
"""

import contextlib
import threading

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_transparent, count_compiles

import effax as fx

draws = fx.State[jax.Array]("draws")
level = fx.Ask[jax.Array]("level")


def _count(outer):
    draws.modify(lambda n: n + 1)
    return outer.next_key()


def _counting():
    return fx.intercept(fx.rng, next_key=_count)


@fx.uses(fx.rng)
def _noise(x):
    return x + jax.random.normal(fx.rng.next_key(), x.shape)


# (loop bodies defined once, at module level, as effax's docs ask: a new lambda per
# call is a new function, traced again)
def _noise_step(c, _):
    return _noise(c), None


def _scan(x):
    return fx.scan(_noise_step, x, None, length=3)[0]


def _unrolled(x):
    for _ in range(3):
        x = _noise(x)
    return x


def _fori(x):
    return fx.fori_loop(0, 2, lambda i, c: _noise(c), x)


def _cond(x):
    return fx.cond(x[1] > 0, _noise, lambda x: _noise(_noise(x)), x)


def _cond_eager(x):
    return _noise(x) if x[1] > 0 else _noise(_noise(x))


def _scan_step(c, _):
    return _scan(c), None


def _scans(x):
    return fx.scan(_scan_step, x, None, length=2)[0]


_jit_scans = fx.jit(_scans)


def _nested(x):  # a loop in a loop in a compiled call
    return _jit_scans(x)


# (the wrapper's code, the eager code it must agree with), each called inside a
# function whose row is `rng` alone: `draws` is outside the row.
WRAPPERS = {
    "jit": (lambda x: fx.jit(_noise)(x), _noise),
    "handle": (lambda x: fx.handle(_noise, transform=jax.jit)(x), _noise),
    "scan": (_scan, _unrolled),
    "fori_loop": (_fori, lambda x: _noise(_noise(x))),
    "cond": (_cond, _cond_eager),
    "checkpoint": (lambda x: fx.checkpoint(_noise)(x), _noise),
    "map": (lambda x: fx.map(_noise, x[None])[0], _noise),
    "nested": (_nested, lambda x: _unrolled(_unrolled(x))),
}


def _under_a_row(fn):
    @fx.uses(fx.rng)
    def entry(x):
        return fn(x)

    return entry


def _run(fn, x):
    with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(0)) as hs:
        with _counting():
            y = fn(x)
        after = fx.rng.next_key()
    return y, hs[draws], after


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_interceptor_outside_a_row_performs_what_the_row_hides(name):
    compiled, eager = WRAPPERS[name]
    x = jnp.arange(2.0)
    want = _run(_under_a_row(eager), x)
    got = _run(_under_a_row(compiled), x)
    assert int(got[1]) == int(want[1]) > 0
    assert_transparent(got, want)


def test_interceptor_outside_a_row_under_vmap_and_grad():
    x = jnp.arange(2.0)

    def loss(x):
        return jnp.sum(_noise(x) ** 2)

    want = _run(_under_a_row(fx.grad(loss)), x)
    got = _run(_under_a_row(fx.jit(fx.grad(loss))), x)
    assert int(got[1]) == int(want[1]) == 1
    assert_transparent(got, want)
    batched = _run(_under_a_row(lambda x: fx.vmap(_noise, keys="shared")(jnp.stack([x, x]))), x)
    assert int(batched[1]) == 1  # one shared draw, counted once


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_the_row_still_binds_the_functions_own_code_inside_the_region(name):
    compiled, eager = WRAPPERS[name]

    def sneaky(x):  # the function's own code performs `draws`, outside its row
        draws.modify(lambda n: n + 1)
        return x

    for fn in (eager, compiled):
        with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(0)) as hs, _counting():
            with pytest.raises(fx.UndeclaredEffectError, match="draws"):
                _under_a_row(lambda x, fn=fn: fn(sneaky(x)))(jnp.arange(2.0))
            with pytest.raises(fx.UndeclaredEffectError, match="draws"):
                _under_a_row(lambda x, fn=fn: fn(x) + _under_a_row(sneaky)(x))(jnp.arange(2.0))
        # the first call raised before any draw; the second after the draws of
        # `fn(x)`, which the interceptor counted (the state kept as it was then)
        assert int(hs[draws]) >= 1


@pytest.mark.parametrize("name", ["jit", "scan", "cond", "nested"])
def test_an_interceptor_installed_inside_the_row_sees_the_row(name):
    compiled, eager = WRAPPERS[name]
    for fn in (eager, compiled):

        @fx.uses(fx.rng)
        def entry(x, fn=fn):
            with _counting():  # installed inside: its code runs under the row
                return fn(x)

        with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(0)) as hs:
            key = fx.rng.next_key()
            with pytest.raises(fx.UndeclaredEffectError, match="draws"):
                entry(jnp.arange(2.0))
            # the failed call left the stream and the state as they were
            assert int(hs[draws]) == 0
            assert not jnp.array_equal(fx.rng.next_key(), key)


def test_one_compiled_function_under_a_row_and_outside_it():
    compiled = fx.jit(_noise)
    x = jnp.arange(2.0)
    got = [_run(_under_a_row(compiled), x), _run(compiled, x), _run(_under_a_row(compiled), x)]
    want = _run(_noise, x)
    for result in got:
        assert int(result[1]) == 1
        assert_transparent(result, want)


def test_without_handler_code_what_the_row_hides_is_not_plumbed():
    """No interceptor: the handlers a row hides are not inputs of the compiled call,
    so changing their shape traces nothing again."""
    compiled = fx.jit(_noise)
    entry = _under_a_row(compiled)

    def calls():
        for n in range(1, 4):
            with fx.handlers(draws.init(jnp.zeros(n)), fx.rng.seed(0)):
                entry(jnp.arange(2.0))

    calls()  # compiled once here
    assert count_compiles(calls) == 0


# --- random nestings: rows, the counting interceptor and the wrappers, at any depth --
# An op: ("noise",), or a wrapper around a body (a tuple of ops): ("jit", body),
# ("checkpoint", body), ("scan", n, body), ("cond", body, body), ("row", body) (a
# function whose row is `rng` alone), ("count", body) (the counting interceptor
# installed around it). The eager reference is the same program with Python loops
# and `if` in place of the wrappers (rows and interceptors kept): what the compiled
# one must compute. A counting interceptor installed inside a row draws a key under
# that row: `UndeclaredEffectError`, eagerly where that code runs, and compiled where
# it is traced (both branches of a cond are traced, as JAX traces them).


def _program(rng, depth, in_row=False):
    ops = []
    for _ in range(rng.randint(1, 2)):
        kind = rng.choice(["noise"] if depth == 0 else ["noise", "jit", "checkpoint", "scan",
                                                        "cond", "row", "row", "count"])  # fmt: skip
        if kind == "count" and in_row and rng.random() < 0.8:
            kind = "jit"  # (mostly programs that run: an interceptor under a row refuses)
        inner = in_row or kind == "row"
        if kind == "noise":
            ops.append(("noise",))
        elif kind == "scan":
            ops.append(("scan", rng.randint(1, 2), _program(rng, depth - 1, inner)))
        elif kind == "cond":
            ops.append(("cond", _program(rng, depth - 1, inner), _program(rng, depth - 1, inner)))
        else:
            ops.append((kind, _program(rng, depth - 1, inner)))
    return tuple(ops)


def _counted_in_a_row(ops, in_row=False):
    """Whether a counting interceptor is installed inside a row anywhere in `ops`."""
    for op in ops:
        if op[0] == "count" and in_row:
            return True
        bodies = op[1:] if op[0] == "cond" else op[-1:] if op[0] != "noise" else ()
        if any(_counted_in_a_row(b, in_row or op[0] == "row") for b in bodies):
            return True
    return False


def _build(ops, compiled):
    """The function of `ops` (x -> x), with effax's wrappers or as Python."""

    def leaf(op):
        kind = op[0]
        if kind == "noise":
            return _noise
        body = _build(op[-1], compiled)
        if kind == "row":
            return fx.uses(fx.rng)(body)
        if kind == "count":

            def counted(x, body=body):
                with _counting():
                    return body(x)

            return counted
        if kind == "jit":
            return fx.jit(body) if compiled else body
        if kind == "checkpoint":
            return fx.checkpoint(body) if compiled else body
        if kind == "scan":
            n = op[1]
            if compiled:
                return lambda x: fx.scan(lambda c, _: (body(c), None), x, None, length=n)[0]
            return lambda x: [x := body(x) for _ in range(n)][-1]
        on_true, on_false = _build(op[1], compiled), _build(op[2], compiled)
        if compiled:
            return lambda x: fx.cond(x[1] > x[0], on_true, on_false, x)
        return lambda x: on_true(x) if x[1] > x[0] else on_false(x)

    steps = [leaf(op) for op in ops]

    def run(x):
        for step in steps:
            x = step(x)
        return x

    return run


def _outcome(fn, x, outside):
    """What `fn(x)` computes (its result, the interceptors' count, the stream's next
    key), with the counting interceptor installed around it if `outside`; or the
    class of the `UndeclaredEffectError` it raised."""
    try:
        with fx.handlers(draws.init(jnp.int32(0)), fx.rng.seed(3)) as hs:
            if outside:
                with _counting():
                    y = fn(x)
            else:
                y = fn(x)
            return y, hs[draws], fx.rng.next_key()
    except fx.UndeclaredEffectError as error:
        return type(error)


@pytest.mark.parametrize("seed", range(40))
def test_random_nestings_of_rows_interceptors_and_wrappers(seed):
    import random

    rng = random.Random(seed)
    top = rng.random() < 0.5  # a function with a row around it all
    ops = _program(rng, 4, in_row=top)
    ops = (("row", ops),) if top else ops
    outside = rng.random() < 0.7
    x = jnp.array([0.3, 0.9])
    want = _outcome(_build(ops, compiled=False), x, outside)
    got = _outcome(_build(ops, compiled=True), x, outside)
    if _counted_in_a_row(ops):
        assert got is fx.UndeclaredEffectError, ops
    else:
        assert not isinstance(want, type), ops
        assert not isinstance(got, type), (ops, got)
        assert_transparent(got, want)


# --- a user-defined effect: its handler classes' operations run where installed -----
# (found by the blind9 corpus's author: an `fx.Interceptor` subclass of a user's
# effect, whose method performs `steps`, raised `UndeclaredEffectError` under the
# performer's row, eagerly too: the effect's operation called the method in place)


class Meter(fx.Effect["Gauge"]):
    operations = ("add", "read")

    def add(self, amount):
        self.handler().add(amount)

    def read(self):
        return self.handler().read()


class Gauge(fx.Handler[Meter]):
    fields = fx.Fields(carry="total")

    def __init__(self, effect, total=None):
        self.effect = effect
        self.total = jnp.float32(0) if total is None else total

    def add(self, amount):
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    def read(self):
        return self.total

    @property
    def value(self):
        return self.total

    @classmethod
    def rebuild(cls, effect, static, const, carry):
        return cls(effect, carry)


class CountingGauge(Gauge):
    """A handler whose own operation performs another effect (`draws`)."""

    def add(self, amount):
        draws.modify(lambda n: n + 1)
        super().add(amount)


class CountingMeter(fx.Interceptor[Meter]):
    """An interceptor subclass whose method performs another effect (`draws`)."""

    def add(self, amount):
        draws.modify(lambda n: n + 1)
        self.outer().add(2 * amount)


energy = Meter("energy")


@fx.uses(energy)
def _move(x):
    energy.add(x)
    return x + energy.read()


USER_WRAPPERS = {
    "eager": _move,
    "jit": fx.jit(_move),
    "scan": lambda x: fx.scan(lambda c, _: (_move(c), None), x, None, length=2)[0],
    "in a row": fx.uses(energy)(lambda x: fx.cond(x > 0, _move, _move, x)),
}


def _metered(fn, handlers):
    with fx.handlers(draws.init(jnp.int32(0)), *handlers) as hs:
        y = fn(jnp.float32(1.5))
        y = fn(y)
    return y, hs[draws], hs[energy]


@pytest.mark.parametrize("name", list(USER_WRAPPERS))
@pytest.mark.parametrize("kind", ["handler", "interceptor"])
def test_a_user_effects_handler_code_runs_where_it_is_installed(name, kind):
    def handlers():
        if kind == "handler":
            return [CountingGauge(energy)]
        return [Gauge(energy), CountingMeter(energy, ())]

    def eager(x):
        return _move(_move(x)) if name == "scan" else _move(x)

    want = _metered(eager, handlers())
    got = _metered(USER_WRAPPERS[name], handlers())
    assert int(want[1]) == (4 if name == "scan" else 2)
    assert_transparent(got, want)


def test_a_user_effects_handler_code_installed_inside_a_row_sees_the_row():
    @fx.uses(energy)
    def inside(x):
        with CountingMeter(energy, ()):
            return _move(x)

    for fn in (inside, fx.jit(inside)):
        with fx.handlers(draws.init(jnp.int32(0)), Gauge(energy)) as hs:
            with pytest.raises(fx.UndeclaredEffectError, match="draws"):
                fn(jnp.float32(1.0))
            assert float(hs[energy]) == 0.0 and int(hs[draws]) == 0


# --- what a careless or clever user tries around it ---------------------------------


def test_raw_jax_grad_around_a_row_with_a_loop_and_the_interceptor_outside():
    def loss(fn):
        return lambda x: jnp.sum(_under_a_row(fn)(x) ** 2)

    want = _run(jax.grad(loss(_unrolled)), jnp.arange(2.0))
    got = _run(jax.grad(loss(_scan)), jnp.arange(2.0))
    assert int(got[1]) == int(want[1]) == 3
    assert_transparent(got, want)


def test_raw_jax_vmap_around_it_refuses_as_the_eager_code_does():
    # a key stream cannot give each batch element its own key through a raw vmap:
    # the same named error eagerly and through the loop
    for fn in (_unrolled, _scan):
        with pytest.raises(fx.EffectLeakError, match="rng"):
            _run(jax.vmap(_under_a_row(fn)), jnp.ones((2, 2)))


def test_from_two_threads_each_with_its_own_handlers():
    x = jnp.arange(2.0)
    want = _run(_under_a_row(_unrolled), x)
    results = {}

    def work(name):
        results[name] = _run(_under_a_row(_scan), x)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2
    for got in results.values():
        assert_transparent(got, want)


def _maybe_count(outer):  # the optional-effect idiom, in handler code
    with contextlib.suppress(fx.UnhandledEffectError):
        draws.modify(lambda n: n + 1)
    return outer.next_key()


def test_handler_code_with_an_optional_effect_no_handler_of_it_anywhere():
    def run(fn):
        with fx.rng.seed(0), fx.intercept(fx.rng, next_key=_maybe_count):
            return _under_a_row(fn)(jnp.arange(2.0)), fx.rng.next_key()

    assert_transparent(run(_scan), run(_unrolled))


def test_unused_handlers_of_odd_kinds_and_none_values_around_it():
    odd = fx.State[None]("odd")
    names = fx.StateDict[jax.Array]("names")
    acts = fx.Tap[jax.Array]("acts")

    def run(fn):
        with fx.handlers(odd.init(None), names.init(), acts.record()):
            return _run(_under_a_row(fn), jnp.arange(2.0))

    got, want = run(_scan), run(_unrolled)
    assert int(got[1]) == int(want[1]) == 3
    assert_transparent(got, want)


def test_compiled_once_per_environment_with_the_interceptor_outside():
    """The loop and the compiled call inside the row, under fresh handlers of the same
    kinds (the counting interceptor's function is one module-level function): traced
    and compiled on the first call only."""
    fns = [_under_a_row(_scan), _under_a_row(WRAPPERS["jit"][0]), _under_a_row(_nested)]

    def calls():
        for fn in fns:
            _run(fn, jnp.arange(2.0))

    calls()
    assert count_compiles(calls) == 0
