"""Interception (issue 25, DESIGN §2b): handlers that reinterpret an operation and
forward it to the handler outside them, across every wrapper.

Each scenario is a program written twice: performing its effects under
interceptors (`fx.intercept`), and by hand with the interception folded in (the
cast, the scale, the stop_gradient written at the call site) under the plain
handlers. Run eagerly and under each wrapper, the two must agree bit for bit
(outputs, final states, emitted values, key counters and the next key drawn):
under one wrapper they are the same computation, and the hand-written one under
a wrapper is what the transparency tests compare with eager Python. Where the
eager Python equivalent is short (jit, scan, cond), the intercepted program is also
compared with it directly.
"""

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent
from jax.sharding import PartitionSpec as P

import effax as fx

loss = fx.Emit[jax.Array]("loss")
temperature = fx.Ask[jax.Array]("temperature")
params = fx.State[dict]("params")
draws = fx.State[jax.Array]("draws")
stream = fx.RandomKey("stream")

F32, BF16 = jnp.float32, jnp.bfloat16


def cast(tree, dtype):
    return jax.tree.map(lambda a: a.astype(dtype), tree)


def _stop_w(p):
    return {**p, "w": jax.lax.stop_gradient(p["w"])}


def _count_draw(outer):
    draws.modify(lambda n: n + 1)
    return outer.next_key()


# The interceptors (module level: their functions are static, one compile each).
HALF = fx.intercept(loss, emit=lambda outer, v: outer.emit(0.5 * v))
HOTTER = fx.intercept(temperature, ask=lambda outer: 2 * outer.ask())
MIXED = fx.intercept(
    params, get=lambda outer: cast(outer.get(), BF16), set=lambda outer, p: outer.set(cast(p, F32))
)
FREEZE_W = fx.intercept(params, get=lambda outer: _stop_w(outer.get()))
COUNTED = fx.intercept(stream, next_key=_count_draw)
PLUS_ONE = fx.intercept(loss, emit=lambda outer, v: outer.emit(v + 1))


def _noise(x):
    return jax.random.uniform(stream.next_key(), dtype=x.dtype)


# --- the scenarios: (interceptors, intercepted body, hand-written body) ----------------


def emit_scaled(x):
    loss.emit(x * x)
    return x + 1


def emit_scaled_by_hand(x):
    loss.emit(0.5 * (x * x))
    return x + 1


def ask_derived(x):
    return x * temperature.ask() + 1


def ask_derived_by_hand(x):
    return x * (2 * temperature.ask()) + 1


def mixed_precision(x):
    p = params.get()  # bfloat16 leaves
    y = jnp.sum(p["w"] * x.astype(BF16)).astype(F32) + p["b"].astype(F32)
    params.modify(lambda q: jax.tree.map(lambda a: a * 0.5, q))  # read cast, written back
    params.set(jax.tree.map(lambda a: a + 1, params.get()))
    return jnp.tanh(y)


def mixed_precision_by_hand(x):
    p = cast(params.get(), BF16)
    y = jnp.sum(p["w"] * x.astype(BF16)).astype(F32) + p["b"].astype(F32)
    params.set(cast(jax.tree.map(lambda a: a * 0.5, cast(params.get(), BF16)), F32))
    params.set(cast(jax.tree.map(lambda a: a + 1, cast(params.get(), BF16)), F32))
    return jnp.tanh(y)


def frozen(x):
    p = params.get()
    params.set({"w": p["w"] + x, "b": p["b"] + x})
    q = params.get()  # the gradient stops at w
    return jnp.sum(jnp.sin(q["w"])) + jnp.cos(q["b"]) * x


def frozen_by_hand(x):
    p = _stop_w(params.get())
    params.set({"w": p["w"] + x, "b": p["b"] + x})
    q = _stop_w(params.get())
    return jnp.sum(jnp.sin(q["w"])) + jnp.cos(q["b"]) * x


def keys_counted(x):
    return x + _noise(x) - _noise(x) * 0.5


def keys_counted_by_hand(x):
    draws.modify(lambda n: n + 1)
    a = _noise(x)
    draws.modify(lambda n: n + 1)
    return x + a - _noise(x) * 0.5


def nested_emits(x):
    loss.emit(x)  # PLUS_ONE sees it first (innermost), then HALF
    return 2 * x


def nested_emits_by_hand(x):
    loss.emit(0.5 * (x + 1))
    return 2 * x


SCENARIOS = {
    "emit": ((HALF,), emit_scaled, emit_scaled_by_hand),
    "ask": ((HOTTER,), ask_derived, ask_derived_by_hand),
    "mixed precision": ((MIXED,), mixed_precision, mixed_precision_by_hand),
    "stop_gradient": ((FREEZE_W,), frozen, frozen_by_hand),
    "key stream": ((COUNTED,), keys_counted, keys_counted_by_hand),
    "nested": ((HALF, PLUS_ONE), nested_emits, nested_emits_by_hand),
}
EMITTING = {"emit", "nested"}  # values emitted inside while_loop are an error


# --- the wrappers: each runs a scalar body ------------------------------------------


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:8]), ("d",))


def _while(body):
    def run(x):
        return fx.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, body(c[1])), (0, x))[1]

    return run


WRAPPERS = {
    "eager": lambda body: body,
    "jit": fx.jit,
    "jit of jit": lambda body: fx.jit(lambda x: fx.jit(body)(x) * 2),
    "scan": lambda body: lambda x: fx.scan(lambda c, _: (body(c), None), x, None, length=3)[0],
    "fori_loop": lambda body: lambda x: fx.fori_loop(0, 3, lambda i, c: body(c), x),
    "while_loop": _while,
    "cond": lambda body: lambda x: fx.cond(x > 0, body, lambda c: body(-c), x),
    "vmap split": lambda body: (
        lambda x: jnp.sum(fx.vmap(body, keys="split", state="batched")(x + jnp.arange(3.0)))
    ),
    "vmap shared": lambda body: (
        lambda x: jnp.sum(fx.vmap(body, keys="shared", state="batched")(x + jnp.arange(3.0)))
    ),
    "grad": fx.grad,
    "value_and_grad": fx.value_and_grad,
    "checkpoint": fx.checkpoint,
    "shard_map split": lambda body: fx.shard_map(
        lambda x: body(x)[None], mesh=_mesh(), in_specs=P(), out_specs=P("d")
    ),
    "shard_map shared": lambda body: fx.shard_map(
        lambda x: body(x)[None], mesh=_mesh(), in_specs=P(), out_specs=P("d"), keys="shared"
    ),
    "jit of scan of vmap": lambda body: fx.jit(
        lambda x: fx.scan(
            lambda c, _: (c + jnp.sum(fx.vmap(body, state="batched")(c + jnp.arange(2.0))), None),
            x,
            None,
            length=2,
        )[0]
    ),
}
BATCH = {"vmap split": 3, "vmap shared": 3, "jit of scan of vmap": 2}


def cells(batch=None):
    """Fresh handlers of every effect (state batched along a leading axis of size
    `batch` for a vmap with state="batched")."""
    p = {"w": jnp.array([0.1, -1.7, 3.3], F32), "b": F32(0.77)}  # not bfloat16 numbers
    n = jnp.int32(0)
    if batch:
        p, n = jax.tree.map(lambda a: jnp.broadcast_to(a, (batch, *a.shape)), (p, n))
    return (
        loss.collect(),
        temperature.provide(F32(1.25)),
        params.init(p),
        draws.init(n),
        stream.seed(7),
    )


X = F32(0.5)


def outcome(run, interceptors=(), batch=None, x=X):
    """Everything a program can change: output, states, emits, key counter, next key."""
    with fx.handlers(*cells(batch)) as hs:
        with fx.handlers(*interceptors):
            y = run(x)
            y2 = run(x)  # a second call: warm path, counters moved on
        key = stream.next_key()
    return (y, y2, hs[params], hs[draws], hs[loss], int(hs[stream].counter), key)


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_an_interceptor_answers_as_the_code_written_by_hand(scenario, wrapper):
    interceptors, body, by_hand = SCENARIOS[scenario]
    wrap = WRAPPERS[wrapper]
    if wrapper == "while_loop" and scenario in EMITTING:
        with pytest.raises(fx.EffectUsageError, match="while_loop"):
            outcome(wrap(body), interceptors)
        return
    batch = BATCH.get(wrapper)
    ours = outcome(wrap(body), interceptors, batch)
    theirs = outcome(wrap(by_hand), (), batch)
    assert_bitwise_equal(ours, theirs)


def test_the_interceptions_change_what_the_programs_compute():
    """The scenarios are not vacuous: without its interceptors each differs from
    the hand-written one (under jit; stop_gradient under grad)."""
    for scenario, (_, body, by_hand) in SCENARIOS.items():
        wrap = fx.grad if scenario == "stop_gradient" else fx.jit
        plain, theirs = outcome(wrap(body)), outcome(wrap(by_hand))
        with pytest.raises(AssertionError):
            assert_bitwise_equal(plain, theirs)


def _python_scan(body):
    """A Python loop of three steps, with each emit site's values stacked per step,
    as effax.scan stacks them."""

    def run(x):
        with loss.collect() as inner:
            for _ in range(3):
                x = body(x)
        per_step = len(inner.values) // 3
        for site in range(per_step):
            loss.emit(jnp.stack(inner.values[site::per_step]))
        return x

    return run


PYTHON = {
    "jit": lambda body: body,
    "scan": _python_scan,
    "cond": lambda body: lambda x: body(x) if x > 0 else body(-x),
}


@pytest.mark.parametrize("wrapper", list(PYTHON))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_an_intercepted_program_compiled_matches_it_in_python(scenario, wrapper):
    interceptors, body, _ = SCENARIOS[scenario]
    ours = outcome(WRAPPERS[wrapper](body), interceptors)
    theirs = outcome(PYTHON[wrapper](body), interceptors)
    # bfloat16 arithmetic: XLA fuses it in float32 compiled, rounds each op eagerly
    assert_transparent(ours, theirs, rtol=1e-2 if scenario == "mixed precision" else 1e-6)


def test_the_innermost_interceptor_sees_an_operation_first():
    with loss.collect() as collected, HALF, PLUS_ONE:
        loss.emit(F32(3))
        fx.jit(loss.emit)(F32(3))
    with loss.collect() as reversed_order, PLUS_ONE, HALF:
        loss.emit(F32(3))
    assert [float(v) for v in collected.values] == [2.0, 2.0]
    assert [float(v) for v in reversed_order.values] == [2.5]


def test_an_interceptor_inside_a_compiled_region_reaches_the_rebuilt_handler():
    """Installed inside fx.jit (and inside a scan body in it), over handlers
    installed outside both: the chain is interceptor (inside) -> interceptor
    (outside, rebuilt) -> collector (outside, rebuilt)."""

    def inner(x):
        with PLUS_ONE:
            loss.emit(x)
        return x

    def outer(x):
        fx.scan(lambda c, _: (inner(c), None), x, None, length=2)
        with PLUS_ONE:
            return fx.jit(inner)(x)

    with loss.collect() as ours, HALF:
        fx.jit(outer)(F32(1))
    with loss.collect() as theirs:
        loss.emit(jnp.full(2, 0.5 * (1 + 1), F32))
        loss.emit(F32(0.5 * (1 + 1 + 1)))
    assert_bitwise_equal(ours.values, theirs.values)


# --- what is static: the functions, by identity --------------------------------------


def test_the_same_function_never_retraces_and_a_new_lambda_does():
    traces = []

    def f(x):
        traces.append(1)
        loss.emit(x)
        return temperature.ask() * x

    compiled = fx.jit(f)
    scale = lambda outer, v: outer.emit(0.5 * v)
    with loss.collect() as collected, temperature.provide(F32(2)):
        for i in range(3):  # a new interceptor object each call, the same function
            with fx.intercept(loss, emit=scale):
                compiled(F32(i))
        assert len(traces) == 1
        for i in range(3):  # new values of the handler it forwards to: no retrace either
            with temperature.provide(F32(i)), fx.intercept(loss, emit=scale):
                compiled(F32(i))
        assert len(traces) == 1
        for i in range(3):  # a new lambda each call: traced each time
            with fx.intercept(loss, emit=lambda outer, v: outer.emit(0.5 * v)):
                compiled(F32(i))
        assert len(traces) == 4
        compiled(F32(1))  # without it: the program of the plain collector
        assert len(traces) == 5
    assert [float(v) for v in collected.values] == [0.0, 0.5, 1.0] * 3 + [1.0]


def test_a_region_that_does_not_perform_the_effect_is_not_changed_by_its_interceptor():
    """An interceptor of an effect the function does not perform: the same
    program, compiled once, as without it."""
    traces = []

    def f(x):
        traces.append(1)
        return x * 2

    compiled = fx.jit(f)
    with loss.collect(), HALF:
        compiled(F32(1))
        jaxpr_with = jax.make_jaxpr(compiled)(F32(1))
    with loss.collect():
        compiled(F32(1))
        jaxpr_without = jax.make_jaxpr(compiled)(F32(1))
    assert str(jaxpr_with) == str(jaxpr_without)


# --- failures -----------------------------------------------------------------------


def test_an_interceptor_with_no_outer_handler_raises_at_the_forwarding_operation():
    for wrap in (WRAPPERS["eager"], fx.jit, WRAPPERS["scan"]):
        expected = wrap(lambda x: x + 1)(F32(1))
        with HALF:
            assert_bitwise_equal(wrap(lambda x: x + 1)(F32(1)), expected)  # not performed
            with pytest.raises(fx.UnhandledEffectError, match=r"loss.*collect"):
                wrap(emit_scaled)(F32(1))


def test_an_interceptor_whose_function_raises_leaves_every_handler_as_it_was():
    def boom(outer, v):
        outer.emit(v)
        raise ValueError("the interceptor's own error")

    def f(x):
        params.set({"w": x + jnp.zeros(3), "b": x})
        loss.emit(x)
        return x

    for wrap in (fx.jit, fx.grad, WRAPPERS["scan"]):
        with fx.handlers(*cells()) as hs:
            before = outcome_of(hs)
            with fx.intercept(loss, emit=boom), pytest.raises(ValueError, match="own error"):
                wrap(f)(F32(1))
            assert_bitwise_equal(outcome_of(hs), before)


def outcome_of(hs):
    return (hs[params], hs[draws], list(hs[loss]), int(hs[stream].counter))


def test_a_failing_call_under_a_chain_leaves_the_chain_as_it_was():
    def f(x):
        keys_counted(x)
        mixed_precision(x)
        loss.emit(x)
        raise RuntimeError("the user's error")

    for wrap in (fx.jit, WRAPPERS["scan"], fx.vmap):
        with fx.handlers(*cells()) as hs:
            before = outcome_of(hs)
            with fx.handlers(HALF, PLUS_ONE, MIXED, COUNTED):
                with pytest.raises(RuntimeError, match="user's error"):
                    wrap(f)(F32(1) if wrap is not fx.vmap else jnp.ones(2))
            assert_bitwise_equal(outcome_of(hs), before)


def test_forwarding_to_a_handler_behind_a_staging_trace_is_a_leak():
    with loss.collect():

        @jax.jit
        def f(x):
            with HALF:
                loss.emit(x)
            return x

        with pytest.raises(fx.EffectLeakError, match="loss"):
            f(F32(1))


def test_an_interceptor_installed_twice_in_one_chain_is_refused():
    for chain in [(HALF, HALF), (HALF, PLUS_ONE, HALF)]:
        with loss.collect() as collected, fx.handlers(*chain[:1]):
            with (
                fx.handlers(*chain[1:]),
                pytest.raises(fx.EffectUsageError, match="installed twice"),
            ):
                loss.emit(F32(1))
        assert collected.values == []
    with loss.collect() as collected, HALF:  # the same one, once in the chain of each stream
        with loss.collect(), HALF:
            loss.emit(F32(1))
        loss.emit(F32(2))
    assert [float(v) for v in collected.values] == [1.0]


def test_a_bundle_puts_interceptors_after_the_handler_they_forward_to():
    with fx.handlers(loss.collect(), HALF) as hs:
        loss.emit(F32(4))
    assert [float(v) for v in hs[loss]] == [2.0]
    assert isinstance(hs.handler(loss), fx.Collector)
    with pytest.raises(fx.EffectUsageError, match="after the handler it forwards to"):
        fx.handlers(HALF, loss.collect())
    with pytest.raises(fx.EffectUsageError, match="two handlers"):
        fx.handlers(loss.collect(), loss.collect())


def test_an_interceptor_has_no_state_of_its_own():
    cell = params.init({"w": jnp.ones(3), "b": F32(0)})
    with cell, MIXED:
        assert MIXED.value is cell.value
        assert fx.snapshot(MIXED) == {}
        assert set(fx.snapshot(cell, MIXED)) == {"params"}
    with pytest.raises(fx.UnhandledEffectError):
        MIXED.value  # noqa: B018 - nothing to forward to here


def test_a_key_stream_interceptor_is_not_read_through_a_raw_vmap():
    with stream.seed(0), COUNTED, draws.init(jnp.int32(0)):
        with pytest.raises(fx.EffectLeakError, match="vmap"):
            jax.vmap(_noise)(jnp.ones(2))


def test_an_interceptor_inside_raw_grad_refuses_to_store_a_tracer_in_an_outer_cell():
    with params.init({"w": jnp.ones(3), "b": F32(0)}):

        def f(x):
            with MIXED:
                params.set({"w": x + jnp.zeros(3), "b": x})
            return x

        with pytest.raises(fx.EffectLeakError, match="params"):
            jax.grad(f)(F32(1))


class Meter(fx.Effect["Gauge"]):
    """A user-defined effect whose operation is a method of its handler, so that an
    interceptor can answer it (`operations` names it for `fx.intercept`)."""

    operations = ("add",)

    def __init__(self, name):
        super().__init__(name)

    def add(self, amount):
        self.handler().add(amount)


@attrs.define(eq=False)
class Gauge(fx.Handler[Meter]):
    effect: Meter
    total: jax.Array = attrs.field(factory=lambda: F32(0))
    fields = fx.Fields(carry="total")

    def add(self, amount):
        self.effect.check_store(self, amount)
        self.total = self.total + amount

    @property
    def value(self):
        return self.total

    @classmethod
    def rebuild(cls, effect, static, const, carry):
        return cls(effect, carry)


meter = Meter("meter")
DOUBLED = fx.intercept(meter, add=lambda outer, a: outer.add(2 * a))


@pytest.mark.parametrize("wrapper", ["eager", "jit", "scan", "while_loop", "cond", "grad"])
def test_intercepting_a_user_defined_effect(wrapper):
    def f(x):
        meter.add(x)
        return x * 3

    with Gauge(meter) as ours, DOUBLED:
        WRAPPERS[wrapper](f)(F32(1.5))
    with Gauge(meter) as theirs:
        WRAPPERS[wrapper](lambda x: f(2 * x) / 2)(F32(1.5))
    assert_bitwise_equal(ours.total, theirs.total)
    with pytest.raises(fx.EffectUsageError, match="no operation 'sub'"):
        fx.intercept(meter, sub=lambda outer, a: None)


# --- the warm path: an interceptor's calls read and write the handler it forwards to


def test_warm_calls_under_an_interceptor_take_the_fast_path(monkeypatch):
    from effax import _callpath

    general = [0]
    original = _callpath.Handled.call

    def counted(self, args, kwargs):
        general[0] += 1
        return original(self, args, kwargs)

    monkeypatch.setattr(_callpath.Handled, "call", counted)
    compiled = fx.jit(mixed_precision)
    with fx.handlers(*cells()) as hs, MIXED, COUNTED:
        ours = [compiled(F32(i)) for i in range(4)] + [compiled(keys_counted(F32(1)))]
    assert general[0] == 1  # the first call; the others ran the generated code
    with fx.handlers(*cells()) as theirs, MIXED, COUNTED:
        expected = [mixed_precision(F32(i)) for i in range(4)] + [
            mixed_precision(keys_counted(F32(1)))
        ]
    assert_transparent(
        (ours, hs[params], hs[draws]), (expected, theirs[params], theirs[draws]), rtol=1e-2
    )


def test_a_static_value_that_changes_under_an_interceptor_is_seen():
    mode = fx.Ask[str]("mode", static=True)
    traces = []

    def fn(x):
        traces.append(mode.ask())
        return x * 2 if mode.ask() == "double!" else x

    compiled = fx.jit(fn)
    provider = mode.provide("double")
    shout = fx.intercept(mode, ask=lambda outer: outer.ask() + "!")
    with provider, shout:
        assert [float(compiled(1.0)) for _ in range(3)] == [2.0] * 3
        provider.provided = "same"  # under a live warm path
        assert [float(compiled(1.0)) for _ in range(3)] == [1.0] * 3
        provider.provided = "double"
        assert float(compiled(1.0)) == 2.0
    assert traces == ["double!", "same!"]


def test_a_compiled_write_through_an_interceptor_inside_raw_grad_is_refused():
    """The interceptor lives under the raw jax.grad, the cell it forwards to
    outside it: a compiled call's outcome would leave a grad tracer in the cell."""

    def f(x):
        params.set({"w": x + jnp.zeros(3), "b": x})
        return x

    compiled = fx.jit(f)
    with params.init({"w": jnp.ones(3), "b": F32(0)}) as cell:

        def g(x):
            with MIXED:
                return compiled(x)

        with pytest.raises(fx.EffectLeakError, match="params"):
            jax.grad(g)(F32(1))
        assert_bitwise_equal(cell.value, {"w": jnp.ones(3), "b": F32(0)})
        jax.grad(lambda x: g(jax.lax.stop_gradient(x)) * 0 + x)(F32(1))  # no tracer: fine


class Clipped(fx.Interceptor):
    """A forwarding handler of one's own: a subclass with the operation as a method."""

    def add(self, amount):
        self.outer().add(jnp.minimum(amount, 1.0))


@pytest.mark.parametrize("wrapper", ["eager", "jit", "jit of jit", "scan", "cond", "grad"])
def test_a_subclass_of_interceptor_forwards_across_regions(wrapper):
    def f(x):
        meter.add(x)
        return x

    with Gauge(meter) as ours, Clipped(meter, ()):
        WRAPPERS[wrapper](f)(F32(1.5))
    with Gauge(meter) as theirs:
        WRAPPERS[wrapper](lambda x: f(jnp.minimum(x, 1.0)))(F32(1.5))
    assert_bitwise_equal(ours.total, theirs.total)


class Capped(fx.Interceptor):
    """A forwarding handler with a parameter of its own, set in its own __init__
    (whose signature is not Interceptor's)."""

    def __init__(self, effect, cap):
        super().__init__(effect, ())
        self.cap = cap

    def add(self, amount):
        self.outer().add(jnp.minimum(amount, self.cap))


class SlottedCapped(Capped):
    """The same with its parameters in __slots__ (and one more)."""

    __slots__ = ("offset",)

    def __init__(self, effect, cap, offset):
        super().__init__(effect, cap)
        self.offset = offset

    def add(self, amount):
        self.outer().add(jnp.minimum(amount, self.cap) + self.offset)


@pytest.mark.parametrize(
    "wrapper", ["eager", "jit", "jit of jit", "scan", "while_loop", "cond", "vmap", "grad"]
)
def test_a_subclass_with_its_own_init_and_parameters_crosses_every_region(wrapper):
    # (issue 39, item 6: rebuilt inside a region, it was called with effax's
    # arguments: "__init__() takes 3 positional arguments but 4 were given")
    def f(x):
        meter.add(x)
        return x

    wrappers = {
        **WRAPPERS,  # the Gauge takes one value: the vmap's update does not depend on the batch
        "vmap": lambda body: lambda x: jnp.sum(fx.vmap(lambda y: body(x) * y)(jnp.ones(2))),
    }
    wrapped = wrappers[wrapper](f)
    for cap, offset in [(1.0, 0.0), (0.25, 0.0), (1.0, 0.5), (1.0, 0.0)]:
        handler = Capped(meter, cap) if offset == 0.0 else SlottedCapped(meter, cap, offset)
        with Gauge(meter) as ours, handler:
            wrapped(F32(1.5))
        # the same program written out by hand: its parameters are static
        mine = wrappers[wrapper](lambda x, c=cap, o=offset: f(jnp.minimum(x, c) + o))
        with Gauge(meter) as theirs:
            mine(F32(1.5))
        assert_bitwise_equal(ours.total, theirs.total)


def test_a_subclass_parameter_is_static_another_value_traces_again():
    traces = []

    def f(x):
        traces.append(None)
        meter.add(x)
        return x

    compiled = fx.jit(f)
    totals = []
    for cap in (1.0, 1.0, 0.5, 1.0):
        with Gauge(meter) as gauge, Capped(meter, cap):
            compiled(F32(2))
        totals.append(float(gauge.total))
    assert totals == [1.0, 1.0, 0.5, 1.0]
    assert len(traces) == 2  # one per parameter value


def test_a_subclass_parameter_that_is_not_hashable_is_refused_by_name_when_compiled():
    def f(x):
        meter.add(x)
        return x

    with Gauge(meter) as gauge, Capped(meter, jnp.float32(1)):
        f(F32(2))  # eagerly nothing is static
        with pytest.raises(
            fx.EffectTypeError, match=r"Capped.*keeps 'cap' as a parameter.*hashable"
        ):
            fx.jit(f)(F32(2))
    assert float(gauge.total) == 1.0  # the refused call wrote nothing


# --- interceptors among effax.handle's own handlers ------------------------------------


@pytest.mark.parametrize("transform", [None, jax.jit], ids=["eager", "jit"])
def test_handle_chains_an_interceptor_after_the_handler_it_forwards_to(transform):
    def f(x):
        loss.emit(x)
        return temperature.ask() * x

    collector = loss.collect()
    g = fx.handle(f, collector, HALF, temperature.provide(F32(3)), HOTTER, transform=transform)
    assert float(g(F32(4))) == 24.0
    assert float(g(F32(2))) == 12.0
    assert [float(v) for v in collector.values] == [2.0, 1.0]
    with loss.collect() as outside:  # an own interceptor alone forwards to the caller's
        fx.handle(f, HALF, temperature.provide(F32(1)), transform=transform)(F32(4))
    assert [float(v) for v in outside.values] == [2.0]
    with pytest.raises(fx.EffectUsageError, match="two handlers"):
        fx.handle(f, loss.collect(), loss.collect())


# --- what a careless or clever user tries -----------------------------------------------


def test_interceptors_in_threads_and_asyncio_tasks_stay_in_their_own_chains():
    import asyncio
    import threading

    f = fx.jit(lambda x: (loss.emit(x), x)[1])
    results = {}

    def worker(i):
        with loss.collect() as c, HALF:
            for _ in range(10):
                f(F32(i))
        results[i] = [float(v) for v in c.values]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: [0.5 * i] * 10 for i in range(4)}

    async def task(i):
        with loss.collect() as c, HALF:
            for _ in range(3):
                f(F32(i))
                await asyncio.sleep(0)
        return [float(v) for v in c.values]

    async def main():
        return await asyncio.gather(*(task(i) for i in range(3)))

    assert asyncio.run(main()) == [[0.5 * i] * 3 for i in range(3)]


def test_an_interceptor_over_a_state_holding_none_and_an_optional_ask():
    maybe = fx.State[jax.Array | None]("maybe")
    shifted = fx.intercept(
        maybe, get=lambda outer: None if outer.get() is None else outer.get() + 1
    )
    read = fx.jit(lambda: maybe.get())
    with maybe.init(None), shifted:
        assert read() is None and maybe.get() is None
    with maybe.init(F32(1)), shifted:
        assert float(read()) == 2.0

    optional = fx.Ask[jax.Array]("optional")
    doubled = fx.intercept(optional, ask=lambda outer: outer.ask() * 2)

    def h():
        try:
            return optional.ask()
        except fx.UnhandledEffectError:  # the interceptor has nothing to forward to
            return F32(-1)

    compiled = fx.jit(h)
    with doubled:
        assert float(h()) == float(compiled()) == -1.0
    with optional.provide(F32(3)), doubled:  # now it has: the compiled call retraces
        assert float(h()) == float(compiled()) == 6.0
