"""Every error effax raises, with its message pinned, and failure safety."""

import functools as ft

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
dropout = fx.RandomKey("dropout")
aux = fx.Emit[jax.Array]("aux")


@pytest.mark.parametrize(
    ("perform", "hint"),
    [
        (temperature.ask, r"temperature\.provide\(value\)"),
        (steps.get, r"steps\.init\(value\)"),
        (dropout.next_key, r"dropout\.seed\(key\)"),
        (lambda: aux.emit(jnp.ones(())), r"aux\.collect\(\)"),
    ],
)
def test_unhandled_effect_names_effect_and_handler(perform, hint):
    with pytest.raises(fx.UnhandledEffectError, match=f"was performed with no handler.*{hint}"):
        perform()
    assert issubclass(fx.UnhandledEffectError, LookupError)


def test_unhandled_inside_handle_jit():
    with pytest.raises(fx.UnhandledEffectError, match=r"State\('steps'\)"):
        fx.jit(lambda: steps.get())()


RAW = {
    "jit": (lambda f: jax.jit(f)(jnp.float32(1)), r"inside jax\.jit.*Use effax\.jit"),
    "scan": (
        lambda f: jax.lax.scan(lambda c, _: (f(c), None), jnp.float32(1), None, length=2),
        r"inside scan.*Use effax\.scan",
    ),
    "cond": (
        lambda f: jax.lax.cond(True, f, lambda x: x, jnp.float32(1)),
        r"inside cond.*Use effax\.cond",
    ),
    "while_loop": (
        lambda f: jax.lax.while_loop(lambda c: c < 2, f, jnp.float32(1)),
        r"inside while_loop.*Use effax\.while_loop",
    ),
    "fori_loop": (
        lambda f: jax.lax.fori_loop(0, 2, lambda i, c: f(c), jnp.float32(1)),
        r"inside fori_loop.*Use effax\.fori_loop",
    ),
    "map": (lambda f: jax.lax.map(f, jnp.ones(2)), r"inside map.*Use effax\.map"),
    "switch": (
        lambda f: jax.lax.switch(1, [lambda x: x, f], jnp.float32(1)),
        r"inside switch.*Use effax\.switch",
    ),
    "shard_map": (
        lambda f: jax.shard_map(
            f,
            mesh=jax.sharding.Mesh(jax.devices()[:1], ("i",)),
            in_specs=jax.sharding.PartitionSpec(),
            out_specs=jax.sharding.PartitionSpec(),
        )(jnp.float32(1)),
        r"shard_map.*Use effax\.shard_map",
    ),
    "jit-of-shard_map": (
        lambda f: jax.jit(
            jax.shard_map(
                f,
                mesh=jax.sharding.Mesh(jax.devices()[:1], ("i",)),
                in_specs=jax.sharding.PartitionSpec(),
                out_specs=jax.sharding.PartitionSpec(),
            )
        )(jnp.float32(1)),
        r"shard_map.*Use effax\.shard_map",
    ),
    "checkpoint": (
        lambda f: jax.checkpoint(f)(jnp.float32(1)),
        r"inside checkpoint.*Use effax\.checkpoint",
    ),
}


@pytest.mark.parametrize(("run", "message"), RAW.values(), ids=RAW.keys())
def test_raw_staging_transform_reading_outer_handler_raises(run, message):
    with temperature.provide(jnp.float32(2)):
        with pytest.raises(fx.EffectLeakError, match=rf"Ask\('temperature'\).*{message}"):
            run(lambda x: x * temperature.ask())


@pytest.mark.parametrize(
    ("transform", "value"),
    [
        (jax.jit, lambda n: n.astype(jnp.float32)),
        (jax.jit, lambda n: jnp.stack([n, n])),
        (jax.jit, lambda n: (n, n)),
        (jax.checkpoint, lambda n: n.astype(jnp.float32)),
    ],
    ids=["dtype", "shape", "structure", "checkpoint-dtype"],
)
def test_state_type_change_across_compiled_boundary(transform, value):
    def fn():
        steps.set(value(steps.get()))

    with (
        steps.init(jnp.int32(1)) as cell,
        pytest.raises(
            fx.StateTypeError, match=r"State\('steps'\) changed its type.*entered as.*int32"
        ),
    ):
        fx.handle(fn, transform=transform)()
    assert cell.value.dtype == jnp.int32 and int(cell.value) == 1


def test_state_type_change_is_fine_eagerly():
    with steps.init(jnp.int32(1)) as cell:
        steps.set(jnp.float32(2))
    assert cell.value.dtype == jnp.float32


@pytest.mark.parametrize(
    "transform",
    [jax.grad, lambda f: jax.vmap(f)],
    ids=["grad", "vmap"],
)
def test_write_of_inner_tracer_to_outer_handler_raises(transform):
    def fn(x):
        steps.set(x * 2)
        return x * 1.0

    with steps.init(jnp.float32(0)) as cell:
        with pytest.raises(fx.EffectLeakError, match=r"Writing a traced value to State\('steps'\)"):
            transform(fn)(jnp.float32(1) if transform is jax.grad else jnp.ones(2))
    assert float(cell.value) == 0.0


HANDLED = {
    "direct": lambda f: f,
    "handle": fx.handle,
    "handle(jit)": fx.jit,
    "handle(jit) warm": lambda f: _warm(fx.jit(f)),
}


def _warm(compiled):
    # two calls outside any transformation install the generated call path
    for _ in range(2):
        compiled(jnp.float32(1))
    return compiled


@pytest.mark.parametrize("wrap", HANDLED.values(), ids=HANDLED.keys())
@pytest.mark.parametrize("transform", [jax.grad, jax.vmap], ids=["grad", "vmap"])
def test_handled_call_under_raw_transform_refuses_to_store_its_tracers(wrap, transform):
    # What a handled call hands back to an outer handler under a raw jax.grad /
    # jax.vmap is a tracer of that transformation: storing it would leak it.
    def fn(x):
        steps.set(steps.get() + x * 2)
        return x * 1.0

    x = jnp.float32(1) if transform is jax.grad else jnp.ones(2)
    with steps.init(jnp.float32(0)) as cell:
        handled = wrap(fn)
        before = cell.value
        with pytest.raises(fx.EffectLeakError, match=r"Writing a traced value to State\('steps'\)"):
            transform(handled)(x)
        assert cell.value is before


def test_own_cell_under_raw_grad_refuses_to_store_tracers():
    def fn(x):
        steps.set(steps.get() + x)
        return x * 1.0

    for wrap in [fx.grad, jax.grad]:
        cell = steps.init(jnp.float32(0))
        counted = fx.handle(fn, cell, transform=jax.jit)
        with pytest.raises(
            fx.EffectLeakError, match=r"State\('steps'\), whose handler was passed to effax.handle"
        ):
            wrap(counted)(jnp.float32(1))
        assert float(cell.value) == 0.0
    # what the message advises: install the cell around the transformation
    cell = steps.init(jnp.float32(0))
    with cell:
        assert float(fx.grad(fx.jit(fn))(jnp.float32(1))) == 1.0
    assert float(cell.value) == 1.0


def test_emit_of_inner_tracer_raises():
    def fn(x):
        aux.emit(x)
        return x

    with aux.collect() as collected, pytest.raises(fx.EffectLeakError, match=r"Emit\('aux'\)"):
        jax.grad(fn)(jnp.float32(1))
    assert collected.values == []


def test_reads_pass_through_grad_and_vmap():
    def fn(x):
        return x * temperature.ask() + steps.get()

    with temperature.provide(jnp.float32(3)), steps.init(jnp.float32(1)):
        assert float(jax.grad(fn)(jnp.float32(2))) == 3.0
        np.testing.assert_array_equal(jax.vmap(fn)(jnp.ones(2)), [4.0, 4.0])


def test_handle_with_own_cell_called_inside_raw_jit_raises():
    cell = steps.init(jnp.int32(0))
    tick = fx.handle(lambda: steps.modify(lambda n: n + 1), cell, transform=jax.jit)
    with pytest.raises(
        fx.EffectLeakError, match=r"handler of State\(.steps.\) was created outside the jax\.jit"
    ):
        jax.jit(tick)()
    assert int(cell.value) == 0


class Boom(Exception):
    pass


def _snapshot(hs):
    return (
        int(hs[steps]),
        hs[dropout].counter,
        [float(v) for v in hs[aux]],
    )


@pytest.mark.parametrize(
    "transform",
    [None, ft.partial(jax.jit, static_argnums=0), ft.partial(jax.checkpoint, static_argnums=(0,))],
    ids=["eager", "jit", "checkpoint"],
)
@pytest.mark.parametrize("where", ["first-call", "later-call"])
def test_exception_inside_handled_call_leaves_handlers_untouched(transform, where):
    own = fx.State[jax.Array]("own")
    own_cell = own.init(jnp.int32(5))

    def fn(fail):
        steps.modify(lambda n: n + 1)
        own.modify(lambda n: n + 1)
        dropout.next_key()
        aux.emit(jnp.float32(1))
        if fail:
            raise Boom("inside")
        return steps.get()

    handled = fx.handle(fn, own_cell, transform=transform)
    with fx.handlers(steps.init(jnp.int32(0)), dropout.seed(0), aux.collect()) as hs:
        if where == "later-call":
            handled(False)  # a successful call first: the failure is in a new trace
        before = _snapshot(hs), int(own_cell.value)
        with pytest.raises(Boom, match="inside"):
            handled(True)
        assert (_snapshot(hs), int(own_cell.value)) == before
        handled(False)  # and the handlers still work afterwards
        assert _snapshot(hs)[0] == before[0][0] + 1
        assert int(own_cell.value) == before[1] + 1


def test_exception_while_tracing_leaves_handlers_untouched():
    def fn(x):
        steps.modify(lambda n: n + 1)
        dropout.next_key()
        return jnp.dot(x, jnp.ones(3))  # shape error while tracing for x of shape (2,)

    with fx.handlers(steps.init(jnp.int32(0)), dropout.seed(0)) as hs:
        fast = fx.jit(fn)
        fast(jnp.ones(3))
        before = int(hs[steps]), hs[dropout].counter
        with pytest.raises(TypeError):
            fast(jnp.ones(2))
        assert (int(hs[steps]), hs[dropout].counter) == before


def test_plumb_and_transform_rejects_bad_arguments():
    with pytest.raises(TypeError, match="fn must be callable"):
        fx.handle(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes handlers"):
        fx.handle(lambda: None, steps)  # type: ignore[arg-type]


WRAPPERS_WRITING_STATE = {
    "scan": lambda f, w: fx.scan(lambda c, x: (c + f(w), None), 0.0, None, length=2)[0],
    "cond": lambda f, w: fx.cond(w > 0, f, lambda w: 0.0 * w, w),
    "while_loop": lambda f, w: fx.while_loop(lambda v: v < 1.0, lambda v: v + f(w) + 1.0, 0.0),
    "grad": lambda f, w: fx.grad(f)(w) * w,
    "vmap": lambda f, w: jnp.sum(fx.vmap(f, state="shared")(jnp.stack([w, w]))),
    "jit": lambda f, w: fx.jit(f)(w),
}


@pytest.mark.parametrize("wrap", WRAPPERS_WRITING_STATE.values(), ids=WRAPPERS_WRITING_STATE)
@pytest.mark.parametrize("raw", [jax.grad, jax.vmap], ids=["grad", "vmap"])
def test_raw_transformation_around_a_wrapper_cannot_leak_into_outer_state(raw, wrap):
    # The same write check for every wrapper: a value depending on the raw
    # transformation's input must not be stored in a handler installed outside it.
    def f(w):
        steps.set(steps.get() + w)
        return w * 2.0

    def outer(w):
        return wrap(f, w)

    arg = jnp.float32(0.5) if raw is jax.grad else jnp.ones(3)
    with steps.init(jnp.float32(0)) as cell:
        with pytest.raises(fx.EffectLeakError, match=r"State\('steps'\)"):
            raw(outer)(arg)
    assert float(cell.value) == 0.0


def test_one_error_taxonomy():
    builtins = {
        fx.UnhandledEffectError: LookupError,
        fx.EffectLeakError: LookupError,
        fx.UndeclaredEffectError: LookupError,
        fx.EffectTypeError: TypeError,
        fx.StateTypeError: TypeError,
        fx.EffectUsageError: ValueError,
    }
    for error, builtin in builtins.items():
        assert issubclass(error, fx.EffectError) and issubclass(error, builtin), error
        assert error.__module__ == "effax"
    assert issubclass(fx.StateTypeError, fx.EffectTypeError)


MISUSES = {
    "handlers(3)": (lambda: fx.handlers(3), fx.EffectTypeError, "takes handlers"),
    "handle(fn, 3)": (lambda: fx.handle(lambda: 0, 3), fx.EffectTypeError, "takes handlers"),
    "seed('x')": (lambda: dropout.seed("x"), fx.EffectTypeError, r"RandomKey\('dropout'\)"),
    "unhashable static": (
        lambda: fx.Ask[list]("m", static=True).provide([1]),
        fx.EffectTypeError,
        "must be hashable",
    ),
    "uses(3)": (lambda: fx.uses(3), fx.EffectTypeError, "takes effects"),
    "plumb(3)": (
        lambda: fx.plumb_and_transform(
            3,
            transform_to_apply=jax.jit,
            compute_extra_input_before=lambda: 0,
            create_context_managers_after=lambda x: [],
        ),
        fx.EffectTypeError,
        "must be callable",
    ),
    "emit in while_loop": (
        lambda: fx.handle(
            lambda: fx.while_loop(lambda x: x < 2, lambda x: (aux.emit(x), x + 1)[1], 0.0),
            aux.collect(),
        )(),
        fx.EffectUsageError,
        r"Emit\('aux'\) sent out values \(emitted, or recorded taps\) inside effax.while_loop",
    ),
    "cond emits differ": (
        lambda: fx.handle(
            lambda: fx.cond(True, lambda: aux.emit(jnp.float32(1)), lambda: None),
            aux.collect(),
        )(),
        fx.EffectUsageError,
        r"Emit\('aux'\) emitted different numbers",
    ),
}


@pytest.mark.parametrize("misuse", MISUSES.values(), ids=MISUSES)
def test_misuse_raises_an_effax_error(misuse):
    thunk, error, message = misuse
    with pytest.raises(error, match=message):
        thunk()
