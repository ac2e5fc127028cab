"""Bad input is refused where it enters, by name (issue 39, items 7 and 8).

Each test refuses one kind of bad input eagerly and under the wrappers that can
reach the entry point (effax.jit, effax.scan, effax.vmap), checks the named error
and its message, and that the handlers are as they were before the refused call.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import Mode, ModeHandler

import effax as fx

steps = fx.State[jax.Array]("steps")
value = fx.State[jax.Array]("value")
named = fx.StateDict[jax.Array]("named")
log = fx.Emit[jax.Array]("log")
acts = fx.Tap[jax.Array]("acts")
temperature = fx.Ask[float]("temperature")
label = fx.Ask[object]("label")
tag = fx.State[object]("tag")


def leaked_tracer(value=1.0):
    """A tracer (of `value`) saved out of a ``jax.jit`` that has finished."""
    saved = []

    @jax.jit
    def f(x):
        saved.append(x)
        return x

    f(jnp.asarray(value))
    return saved[0]


def in_jit(fn):
    return lambda: fx.jit(fn)()


def in_scan(fn):
    return lambda: fx.scan(lambda c, _: (c, fn()), 0.0, None, length=2)[1]


def in_vmap(fn):
    return lambda: fx.vmap(lambda _: fn())(jnp.zeros(2))


def eager(fn):
    """Run eagerly as a handled call (which changes nothing if it raises)."""
    return fx.handle(fn)


WRAPPERS = [eager, in_jit, in_scan, in_vmap]
WRAPPER_IDS = ["eager", "jit", "scan", "vmap"]


def bump_then(fn):
    """A function that first changes `steps` (so that a refusal after it shows
    whether the handled call changed anything), then calls `fn`."""

    def run():
        steps.set(steps.get() + 1)
        return fn()

    return run


# --- item 7: a leaked tracer is refused where it enters -----------------------------


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_replace_refuses_a_leaked_tracer_in_its_values_and_where(wrap):
    bad, bad_mask = leaked_tracer(), leaked_tracer(True)
    good = jnp.float32(0.0)
    with steps.init(jnp.int32(0)) as cell:
        for make in (
            lambda: acts.replace({"a": bad}),
            lambda: acts.replace({"a": good}, where={"a": bad_mask}),
        ):
            with pytest.raises(fx.EffectLeakError, match=r"Tap\('acts'\)\.replace\(\.\.\.\)"):
                wrap(bump_then(make))()
            assert int(cell.value) == 0


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_state_set_refuses_a_leaked_tracer(wrap):
    bad = leaked_tracer()
    state = value
    with steps.init(jnp.int32(0)) as counter, state.init(jnp.float32(3)) as cell:
        with pytest.raises(
            fx.EffectLeakError, match=r"State\('value'\)\.set\(\.\.\.\).*has finished"
        ):
            wrap(bump_then(lambda: state.set(bad)))()
        assert float(cell.value) == 3.0 and int(counter.value) == 0
        with pytest.raises(fx.EffectLeakError, match=r"State\('value'\)\.set\(\.\.\.\)"):
            wrap(bump_then(lambda: state.modify(lambda _: bad)))()
        assert float(cell.value) == 3.0 and int(counter.value) == 0


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_state_dict_set_refuses_a_leaked_tracer(wrap):
    bad = leaked_tracer()
    with steps.init(jnp.int32(0)) as counter, named.init({"a": jnp.float32(2)}) as cell:
        with pytest.raises(fx.EffectLeakError, match=r"StateDict\('named'\)\.set\(\.\.\.\)"):
            wrap(bump_then(lambda: named.set("a", bad)))()
        assert float(cell.value["a"]) == 2.0 and set(cell.value) == {"a"}
        assert int(counter.value) == 0
    with named.init() as cell:  # creating an entry from a leaked init value
        with pytest.raises(fx.EffectLeakError, match=r"StateDict\('named'\)\.get\(\.\.\.\)"):
            named.get("b", init=bad)
        assert cell.value == {}


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_emit_refuses_a_leaked_tracer(wrap):
    bad = leaked_tracer()
    with steps.init(jnp.int32(0)) as counter, log.collect() as collected:
        with pytest.raises(fx.EffectLeakError, match=r"Emit\('log'\)\.emit\(\.\.\.\)"):
            wrap(bump_then(lambda: log.emit(bad)))()
        assert collected.values == [] and int(counter.value) == 0


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_a_recorded_tap_refuses_a_leaked_tracer(wrap):
    bad = leaked_tracer()
    with steps.init(jnp.int32(0)) as counter, acts.record() as recorder:
        with pytest.raises(fx.EffectLeakError, match=r"Tap\('acts'\)\.tap\(\.\.\.\)"):
            wrap(bump_then(lambda: acts.tap("a", bad)))()
        assert recorder.value == {} and int(counter.value) == 0
    with acts.ignore():  # switched off, a tap stores nothing: no refusal
        assert acts.tap("a", bad) is bad


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_grad_and_vmap_refuse_a_leaked_argument_as_jit_does(wrap):
    bad, bad_batch = leaked_tracer(), leaked_tracer(np.ones(2, np.float32))

    def f(x):
        steps.set(steps.get() + 1)
        return x * 2.0

    calls = {
        "effax.jit": lambda: fx.jit(f)(bad),
        "effax.grad": lambda: fx.grad(f)(bad),
        "effax.value_and_grad": lambda: fx.value_and_grad(f)(bad),
        "effax.vmap": lambda: fx.vmap(f)(bad_batch),
    }
    with steps.init(jnp.int32(0)) as counter:
        for name, call in calls.items():
            match = rf"{'compiled .f.' if name == 'effax.jit' else name}.*has finished"
            with pytest.raises(fx.EffectLeakError, match=match):
                wrap(bump_then(call))()
            assert int(counter.value) == 0
        # a good argument is differentiated and mapped as before
        assert float(fx.grad(f)(jnp.float32(1))) == 2.0
        assert fx.vmap(f)(jnp.ones(3)).tolist() == [2.0] * 3
        assert int(counter.value) == 2


@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
@pytest.mark.parametrize(
    "bounds", [(2**32, 2**32 + 3), (0, 2**31), (-(2**31) - 1, 0), (2**40, 2**40 + 2)]
)
def test_fori_loop_bounds_outside_int32_raise_instead_of_wrapping(wrap, bounds):
    lower, upper = bounds
    with pytest.raises(OverflowError):  # what JAX does
        jax.lax.fori_loop(lower, upper, lambda i, c: c + 1, 0)

    def body(i, c):
        steps.set(steps.get() + 1)
        return c + 1

    with steps.init(jnp.int32(0)) as counter:
        with pytest.raises(fx.EffectTypeError, match=r"effax\.fori_loop.*int32.*wrap"):
            wrap(bump_then(lambda: fx.fori_loop(lower, upper, body, 0)))()
        assert int(counter.value) == 0
        # bounds inside int32 count as they always did, like JAX's
        lo, hi = 2**31 - 4, 2**31 - 1
        out = wrap(lambda: fx.fori_loop(lo, hi, body, 0))()
        expected = jax.lax.fori_loop(lo, hi, lambda i, c: c + 1, 0)
        assert np.asarray(out).ravel()[-1] == expected == 3


@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
@pytest.mark.parametrize("returned", [{"x": 1.0}, (1.0,), "one"], ids=["dict", "tuple", "str"])
def test_replace_fn_returning_a_non_array_is_a_type_error_naming_the_site(wrap, returned):
    def f():
        steps.set(steps.get() + 1)
        return acts.tap("block0/mlp", jnp.float32(1))

    kind = type(returned).__name__
    with steps.init(jnp.int32(0)) as counter, acts.replace(lambda site, v: returned):
        with pytest.raises(
            fx.EffectTypeError,
            match=rf"'block0/mlp'.*replace\(fn\) returned a value of type {kind} ",
        ):
            wrap(f)()
        assert int(counter.value) == 0


@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_a_site_recorded_with_two_dtypes_is_the_error_it_is_in_a_cond(wrap):
    def taps():
        acts.tap("a", jnp.float32(1.5))
        acts.tap("a", jnp.int32(1))
        return 0.0

    def in_cond():
        return fx.cond(
            jnp.bool_(True),
            lambda: acts.tap("a", jnp.float32(1.5)),
            lambda: acts.tap("a", jnp.int32(1)).astype(jnp.float32),
        )

    message = r"Tap site 'a' was tapped with values of dtype float32 and int32"
    with acts.record() as recorder:
        with pytest.raises(fx.EffectUsageError, match=message):
            wrap(in_cond)()
        assert recorder.value == {}
    with acts.record() as recorder:
        # refused when the taps are stacked: by the loop that stacks them, or when
        # the recording is read
        try:
            wrap(taps)()
        except fx.EffectUsageError as error:
            assert re.search(message, str(error)), error
            assert wrap is in_scan or wrap is in_vmap, error
            assert recorder.value == {}
        else:
            with pytest.raises(fx.EffectUsageError, match=message):
                _ = recorder.value
    with acts.record() as recorder:  # one dtype stacks as before
        wrap(lambda: (acts.tap("a", jnp.float32(1)), acts.tap("a", jnp.float32(2)))[0])()
        assert recorder.value["a"].dtype == jnp.float32


def test_stacked_of_mixed_ranks_is_a_usage_error():
    for wrap in (eager, in_jit):
        with log.collect() as collected:
            wrap(lambda: (log.emit(jnp.float32(1)), log.emit(jnp.ones(3)))[0])()
            with pytest.raises(
                fx.EffectUsageError, match=r"Emit\('log'\) collected values of shapes"
            ):
                collected.stacked()
            assert [np.shape(v) for v in collected.values] == [(), (3,)]
    with log.collect() as collected:  # mixed shapes of one rank
        log.emit(jnp.ones(2))
        log.emit(jnp.ones(3))
        with pytest.raises(fx.EffectUsageError, match=r"\(2,\) and \(3,\)"):
            collected.stacked()
    with log.collect() as collected:  # one shape stacks as before
        log.emit(jnp.ones(2))
        log.emit(jnp.zeros(2))
        assert collected.stacked().shape == (2, 2)


@pytest.mark.parametrize("wrap", [eager, in_jit], ids=["eager", "jit"])
@pytest.mark.parametrize("seed", [2**64, 2**63, -(2**63) - 1, np.uint64(2**64 - 1)])
def test_a_seed_outside_int64_is_a_type_error(wrap, seed):
    with steps.init(jnp.int32(0)) as counter:
        with pytest.raises(fx.EffectTypeError, match=r"RandomKey\('rng'\)\.seed.*int64"):
            wrap(bump_then(lambda: fx.rng.seed(seed)))()
        assert int(counter.value) == 0
    for good in (2**63 - 1, -(2**63)):  # the ends of the range seed as jax.random.key does
        expected = jax.random.key_data(jax.random.key(good))
        assert (jax.random.key_data(fx.rng.seed(good).base_key) == expected).all()


# --- item 8: messages ---------------------------------------------------------------


# (module-level functions, not bound methods: a bound method made afresh for each
# effax.jit is another function object each time)
def ask_temperature():
    return temperature.ask()


def get_steps():
    return steps.get()


@pytest.mark.parametrize("wrap", WRAPPERS, ids=WRAPPER_IDS)
def test_an_interceptor_that_calls_no_operation_of_outer_needs_no_outer_handler(wrap):
    with fx.intercept(temperature, ask=lambda outer: 5.0):
        assert np.all(np.asarray(wrap(ask_temperature)()) == 5.0)
    with fx.intercept(temperature, ask=lambda outer: 2 * outer.ask()):
        with pytest.raises(
            fx.UnhandledEffectError,
            match=r"calls outer\.ask\(\).*requires a handler of Ask\('temperature'\) outside",
        ):
            wrap(ask_temperature)()
    with temperature.provide(1.5):  # with one outside, it is used
        with fx.intercept(temperature, ask=lambda outer: 2 * outer.ask()):
            assert np.all(np.asarray(wrap(ask_temperature)()) == 3.0)
    # an operation it does not answer is forwarded, which needs one outside
    with steps.init(jnp.int32(0)) as outer_cell:
        pass
    with fx.intercept(steps, get=lambda outer: jnp.int32(7)):
        assert np.all(np.asarray(wrap(get_steps)()) == 7)
        with pytest.raises(
            fx.UnhandledEffectError,
            match=r"forwards .*set.* requires a handler of State\('steps'\) outside",
        ):
            wrap(lambda: steps.set(jnp.int32(1)))()
    assert int(outer_cell.value) == 0


@pytest.mark.parametrize(
    "effect, handler",
    [
        (label, lambda: label.provide("hello")),
        (label, lambda: label.provide(object())),
        (tag, lambda: tag.init("hello")),
    ],
    ids=["ask-str", "ask-object", "state-str"],
)
def test_a_handler_holding_a_non_array_read_in_jit_names_the_effect_and_static(effect, handler):
    read = label.ask if effect is label else tag.get
    # (a State has no static form: it says to hold an array)
    fix = "static=True" if effect is label else "Hold an array"
    message = rf"{re.escape(repr(effect))} holds an? {type(handler().value).__name__}.*{fix}"
    with handler() as h:
        before = h.value
        for _ in range(2):  # the first call (which discovers the row) and the next
            with pytest.raises(fx.EffectTypeError, match=message) as info:
                fx.jit(lambda: read())()
            assert "not a valid JAX type" not in str(info.value)
            with pytest.raises(fx.EffectTypeError, match=message):
                fx.jit(lambda: (read(), 1.0)[1])()
        assert h.value is before
        assert read() is before  # eagerly it is read as it is


def test_an_unhashable_static_export_raises_a_public_effax_error():
    config = Mode("config")
    with steps.init(jnp.int32(0)) as counter, ModeHandler(config, [1, 2]):
        for call in (
            lambda: fx.jit(bump_then(lambda: len(config.get())))(),
            lambda: fx.jit(bump_then(lambda: len(config.get()))).trace(),
        ):
            with pytest.raises(fx.EffectTypeError, match=r"Mode\('config'\).*not hashable") as e:
                call()
            assert type(e.value) is fx.EffectTypeError, type(e.value)
            assert int(counter.value) == 0
        # an eager loop still reads it (its body is traced, not compiled)
        out = fx.scan(lambda c, _: (c + len(config.get()), None), 0, None, length=2)[0]
        assert int(out) == 4


def test_jit_of_a_handled_function_names_where_the_handler_was_made():
    cell = steps.init(jnp.int32(0))

    def count():
        steps.set(steps.get() + 1)
        return steps.get()

    with pytest.raises(
        fx.EffectLeakError, match=r"State\('steps'\).*created outside the jax\.jit"
    ) as info:
        fx.jit(fx.handle(count, cell))()
    assert "created under a JAX trace" not in str(info.value)
    assert "transform=jax.jit" in str(info.value)
    assert int(cell.value) == 0
    assert int(fx.handle(count, cell, transform=jax.jit)()) == 1
    assert int(cell.value) == 1
