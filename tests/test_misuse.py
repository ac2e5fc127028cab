"""Never silent: what a careless or clever user tries gets the eager answer or a
named error (issues 14 and 29).

Each case asserts one of two things: the wrapped program computes what the eager
program computes (keys and integers bit for bit), or it raises the named effax
error with a message that names the effect (or the function and argument) and the
fix; cases that could change a handler check that it was left as it was. Every
message checked through `raises` is also checked to name none of effax's internal
argument names (``_effax_plumbed``, ``_rem_singleton``). The last sections are
tables: every public function called with bad arguments (`_BAD_ARGUMENTS`, which
`test_every_public_function_is_in_the_table_of_bad_arguments` keeps complete), and
errors raised through effax's wrappers, whose tracebacks show no effax frame.
"""

import asyncio
import copy
import functools as ft
import inspect
import pathlib
import pickle
import threading
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import effax as fx
from tests.helpers import Mode, ModeHandler, assert_bitwise_equal, assert_transparent

# Module-level effects, as effax asks (docs/concepts.md) (they pickle by reference to these names).
total = fx.State[jnp.ndarray]("total")
log = fx.Emit[jnp.ndarray]("log")
scale = fx.Ask[jnp.ndarray]("scale")
mode = fx.State[str]("mode")
prefix = fx.Ask[str]("prefix")
dropout = fx.RandomKey("dropout")


def raises(error, *fragments):
    """`pytest.raises(error)` that also checks the message names each fragment, and
    names none of effax's internals."""

    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(error)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            if not self.ctx.__exit__(*exc):
                return False  # another exception: let it through
            message = str(self.info.value)
            # JAX's names for effax's internals never reach the user
            assert "_effax_plumbed" not in message and "_rem_singleton" not in message, message
            for fragment in fragments:
                assert fragment in message, (fragment, message)
            return True

    return Check()


def draw(x):
    return x + fx.random.normal()


# --- 1. raw jax.vmap over a key stream ---

RAW_VMAP_DRAWS = {
    "direct": lambda: jax.vmap(draw),
    "effax.jit": lambda: jax.vmap(fx.jit(draw)),
    "effax.scan": lambda: jax.vmap(
        lambda x: fx.scan(lambda c, _: (draw(c), None), x, None, length=2)[0]
    ),
    "effax.cond": lambda: jax.vmap(lambda x: fx.cond(True, draw, lambda y: y, x)),
    "effax.vmap": lambda: jax.vmap(fx.vmap(draw)),
    "effax.checkpoint": lambda: jax.vmap(fx.checkpoint(draw)),
}


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("where", RAW_VMAP_DRAWS)
def test_raw_vmap_refuses_to_give_every_element_the_same_key(where):
    xs = jnp.zeros((3, 2)) if where == "effax.vmap" else jnp.zeros(3)
    with fx.rng.seed(0) as stream:
        with raises(fx.EffectLeakError, "RandomKey('rng')", "effax.vmap", "keys='split'"):
            RAW_VMAP_DRAWS[where]()(xs)
        assert stream.counter == 0  # the refused call drew nothing


@pytest.mark.reuses_keys_on_purpose
def test_effax_vmap_split_matches_the_eager_loop_over_elements():
    xs = jnp.arange(3.0)
    with fx.rng.seed(0) as stream:
        got = fx.vmap(draw, keys="split")(xs)
    k = jax.random.fold_in(jax.random.key(0), 0)  # the one key the stream splits
    want = [
        x + jax.random.normal(jax.random.fold_in(jax.random.fold_in(k, b), 0))
        for b, x in enumerate(xs)
    ]
    assert_transparent(got, jnp.stack(want))
    assert stream.counter == 1


@pytest.mark.reuses_keys_on_purpose
def test_a_stream_seeded_inside_raw_vmap_is_the_users_choice():
    out = jax.vmap(fx.handle(draw, fx.rng.seed(1)))(jnp.zeros(2))
    assert out[0] == out[1]  # every element seeded the same stream: same keys, by request


def test_raw_grad_over_a_key_stream_draws_the_eager_keys():
    with fx.rng.seed(0) as a:
        g = jax.grad(draw)(1.0)
        k = fx.rng.next_key()
    with fx.rng.seed(0) as b:
        _ = draw(1.0)
        k_eager = fx.rng.next_key()
    assert float(g) == 1.0 and a.counter == b.counter == 2
    assert_bitwise_equal(k, k_eager)


# --- 2. raw grad / vmap around effax wrappers that write the outer tracer ---


def _write(x):
    total.set(total.get() + x)


def _emit(x):
    log.emit(x * 1.0)


WRAPPERS = {
    "scan": lambda body: lambda x: fx.scan(lambda c, _: (c, body(x)), 0.0, None, length=2),
    "cond": lambda body: lambda x: fx.cond(True, lambda: body(x), lambda: body(-x)),
    "while_loop": lambda body: (
        lambda x: fx.while_loop(lambda i: i < 2, lambda i: (body(x), i + 1)[1], 0)
    ),
    "grad": lambda body: lambda x: fx.grad(lambda y: (body(x * y), y * y)[1])(1.0),
    "vmap": lambda body: lambda x: fx.vmap(lambda y: body(x))(jnp.ones(2)),
    "checkpoint": lambda body: lambda x: fx.checkpoint(lambda y: (body(x * y), y)[1])(1.0),
    "jit": lambda body: lambda x: fx.jit(lambda y: (body(x * y), y)[1])(1.0),
}


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("raw", ["grad", "vmap"])
@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_raw_transform_around_a_wrapper_writing_its_tracer_is_refused(raw, wrapper):
    fn = WRAPPERS[wrapper](_write)

    def outer(x):
        fn(x)
        return jnp.sum(x * 2)

    transform = jax.grad if raw == "grad" else jax.vmap
    x = 1.0 if raw == "grad" else jnp.ones(3)
    with total.init(jnp.float32(5)) as cell:
        with raises(fx.EffectLeakError, "State('total')", f"effax.{raw}"):
            transform(outer)(x)
        assert float(cell.value) == 5.0  # nothing was stored, and it is readable


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("wrapper", ["scan", "cond", "grad", "jit", "checkpoint"])
def test_raw_grad_around_a_wrapper_emitting_its_tracer_is_refused(wrapper):
    fn = WRAPPERS[wrapper](_emit)
    with log.collect() as collector:
        with raises(fx.EffectLeakError, "Emit('log')", "effax.grad"):
            jax.grad(lambda x: (fn(x), x * 2)[1])(1.0)
    assert collector.values == []


def test_a_write_under_raw_grad_names_effax_grad_and_stop_gradient():
    with total.init(jnp.float32(0)) as cell:
        with raises(fx.EffectLeakError, "effax.grad", "jax.lax.stop_gradient"):
            jax.grad(lambda x: (total.set(x), x)[1])(1.0)
        # the fixes it names work
        jax.grad(lambda x: (total.set(jax.lax.stop_gradient(x * 3)), x)[1])(1.0)
        assert float(cell.value) == 3.0
        fx.grad(lambda x: (total.set(x * 4), x)[1])(1.0)
        assert float(cell.value) == 4.0


# --- 3. an unused handler whose value cannot be an input ---

UNUSED = {
    "jit": lambda: fx.jit(lambda x: x + 1)(1.0),
    "scan": lambda: fx.scan(lambda c, x: (c + x, None), 0.0, jnp.ones(3))[0],
    "cond": lambda: fx.cond(True, lambda: 1.0, lambda: 2.0),
    "switch": lambda: fx.switch(1, [lambda: 1.0, lambda: 2.0]),
    "while_loop": lambda: fx.while_loop(lambda i: i < 3, lambda i: i + 1, 0),
    "fori_loop": lambda: fx.fori_loop(0, 3, lambda i, c: c + i, 0),
    "vmap": lambda: fx.vmap(lambda x: x + 1)(jnp.ones(2)),
    "grad": lambda: fx.grad(lambda x: x * 2)(1.0),
    "checkpoint": lambda: fx.checkpoint(lambda x: x * 2)(1.0),
    "eval_shape": lambda: fx.handle(lambda x: x * 2, transform=jax.eval_shape)(1.0).shape,
}


@pytest.mark.parametrize("wrapper", UNUSED)
def test_an_unused_non_array_handler_does_not_break_a_wrapper(wrapper):
    with mode.init("idle") as cell, prefix.provide("log:"):
        got = UNUSED[wrapper]()
    want = UNUSED[wrapper]()  # no handlers at all
    assert_bitwise_equal(got, want)
    assert cell.value == "idle"


USES_STR = {
    "jit": lambda read: fx.jit(lambda x: x * len(read()))(1.0),
    "scan": lambda read: fx.scan(lambda c, _: (c * len(read()), None), 1.0, None, length=2),
    "cond": lambda read: fx.cond(True, lambda: len(read()), lambda: 0),
    "vmap": lambda read: fx.vmap(lambda x: x * len(read()))(jnp.ones(2)),
    "grad": lambda read: fx.grad(lambda x: x * len(read()))(1.0),
}


@pytest.mark.parametrize("wrapper", USES_STR)
def test_a_used_non_array_ask_names_itself_and_static_true(wrapper):
    with prefix.provide("log:"):
        with raises(fx.EffectTypeError, "Ask('prefix')", "static=True", "str"):
            USES_STR[wrapper](prefix.ask)


@pytest.mark.parametrize("wrapper", USES_STR)
def test_a_used_non_array_state_names_itself(wrapper):
    with mode.init("idle") as cell:
        with raises(fx.EffectTypeError, "State('mode')", "holds a str"):
            USES_STR[wrapper](mode.get)
    assert cell.value == "idle"


def test_a_static_ask_of_a_string_crosses_every_wrapper():
    label = fx.Ask[str]("label", static=True)
    with label.provide("abc"):
        for wrapper, run in USES_STR.items():
            got = run(label.ask)
            assert float(jnp.sum(jnp.asarray(jax.tree.leaves(got)[0]))) != 0, wrapper


# --- 4. one handler object entered by several threads or tasks ---


@pytest.mark.parametrize("shape", ["handler", "bundle"])
def test_asyncio_tasks_sharing_a_handler_exit_in_any_order(shape):
    config = scale.provide(jnp.float32(0.5))
    entered = config if shape == "handler" else fx.handlers(config)

    async def task(first_wait, second_wait):
        with entered:
            await asyncio.sleep(first_wait)
            value = float(scale.ask())
            await asyncio.sleep(second_wait)
        return value

    async def main():
        # task 1 enters first and exits first, while task 2 is still inside
        return await asyncio.gather(task(0.01, 0.0), task(0.0, 0.05))

    assert asyncio.run(main()) == [0.5, 0.5]


def test_threads_sharing_a_handler_exit_in_any_order():
    config = scale.provide(jnp.float32(2.0))
    inside = threading.Barrier(2)
    first_out = threading.Event()
    results, errors = [], []

    def worker(last):
        try:
            with config:
                inside.wait()
                if last:
                    first_out.wait()
                results.append(float(scale.ask()))
            if not last:
                first_out.set()
        except Exception as e:  # pragma: no cover - the failure being tested
            errors.append(e)
            first_out.set()

    threads = [threading.Thread(target=worker, args=(last,)) for last in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [2.0, 2.0]


def test_exiting_a_handler_where_it_was_not_entered_is_refused():
    config = scale.provide(jnp.float32(1.0))
    with config:
        with raises(fx.EffectUsageError, "where it is not the innermost handler entered"):
            threading_result = []
            thread = threading.Thread(
                target=lambda: threading_result.append(_exit_or_error(config))
            )
            thread.start()
            thread.join()
            raise threading_result[0]
        assert float(scale.ask()) == 1.0  # still installed here


def _exit_or_error(handler):
    try:
        handler.__exit__(None, None, None)
    except fx.EffectUsageError as error:
        return error
    return AssertionError("exited in another thread")


def test_threads_each_with_their_own_cell_lose_no_update():
    counts = []

    def worker():
        with total.init(jnp.int32(0)) as cell:
            for _ in range(50):
                total.set(total.get() + 1)
        counts.append(int(cell.value))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == [50] * 4


# --- 5. coroutine and generator functions ---


def test_a_handled_coroutine_runs_under_its_handlers():
    async def step(x):
        await asyncio.sleep(0)
        total.set(total.get() + x * scale.ask())
        return scale.ask()

    with scale.provide(jnp.float32(1.0)), total.init(jnp.float32(0)) as cell:
        handled = fx.handle(step, scale.provide(jnp.float32(3.0)))
        assert float(asyncio.run(handled(2.0))) == 3.0
        assert float(cell.value) == 6.0  # absorbed once the coroutine returned
        assert float(scale.ask()) == 1.0


def test_a_handled_coroutine_that_raises_changes_nothing():
    async def step():
        total.set(total.get() + 1)
        raise RuntimeError("boom")

    with total.init(jnp.float32(0)) as cell:
        with pytest.raises(RuntimeError, match="boom"):
            asyncio.run(fx.handle(step)())
        assert float(cell.value) == 0.0


def _gen():
    yield prefix.ask()


async def _agen():
    yield prefix.ask()


async def _coro():
    return 1


@pytest.mark.parametrize(
    ("fn", "transform", "kind"),
    [
        (_gen, None, "a generator"),
        (_agen, None, "an async generator"),
        (_coro, jax.jit, "a coroutine"),
        (_gen, jax.jit, "a generator"),
    ],
)
def test_functions_whose_body_runs_later_are_refused(fn, transform, kind):
    with raises(fx.EffectTypeError, kind, fn.__name__):
        fx.handle(fn, prefix.provide("x"), transform=transform)


# --- 6. custom derivatives ---


@jax.custom_jvp
def _scaled_jvp(x):
    return x * scale.ask()


@_scaled_jvp.defjvp
def _scaled_jvp_rule(primals, tangents):
    (x,), (t,) = primals, tangents
    return _scaled_jvp(x), t * scale.ask() * 10  # a rule that differs from autodiff


@jax.custom_vjp
def _scaled_vjp(x):
    return x * scale.ask()


def _fwd(x):
    return _scaled_vjp(x), None


def _bwd(_, g):
    return (g * scale.ask() * 10,)


_scaled_vjp.defvjp(_fwd, _bwd)

CUSTOM = {"custom_jvp": _scaled_jvp, "custom_vjp": _scaled_vjp}
DERIVED = {
    "jit": lambda f: fx.jit(f),
    "grad": lambda f: fx.grad(f),
    "jit(jax.grad)": lambda f: fx.jit(jax.grad(f)),
    "jit(grad)": lambda f: fx.jit(fx.grad(f)),
    "scan": lambda f: lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=2)[0],
    "vmap": lambda f: lambda x: fx.vmap(f)(jnp.stack([x, x]))[0],
    "vmap(grad)": lambda f: lambda x: fx.vmap(jax.grad(f))(jnp.stack([x, x]))[0],
    "checkpoint": lambda f: fx.checkpoint(f),
}
EAGER = {
    "jit": lambda f: f,
    "grad": jax.grad,
    "jit(jax.grad)": jax.grad,
    "jit(grad)": jax.grad,
    "scan": lambda f: lambda x: f(f(x)),
    "vmap": lambda f: f,
    "vmap(grad)": jax.grad,
    "checkpoint": lambda f: f,
}


@pytest.mark.parametrize("wrapper", DERIVED)
@pytest.mark.parametrize("kind", CUSTOM)
def test_custom_derivatives_see_their_handlers_under_every_wrapper(kind, wrapper):
    f = CUSTOM[kind]
    with scale.provide(jnp.float32(3.0)):
        got = DERIVED[wrapper](f)(2.0)
        want = EAGER[wrapper](f)(2.0)  # eager, and raw jax.grad
    assert_transparent(jnp.asarray(got), jnp.asarray(want))
    if "grad" in wrapper:
        assert float(got) == 30.0  # the custom rule ran, not autodiff of the primal


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize("kind", CUSTOM)
def test_a_custom_rule_traced_after_a_compiled_call_is_refused_by_name(kind):
    with scale.provide(jnp.float32(3.0)):
        with raises(fx.EffectLeakError, "Ask('scale')", kind, "effax.jit(jax.grad(f))"):
            jax.grad(fx.jit(CUSTOM[kind]))(2.0)


# --- 7. batched predicates ---


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("outer", ["eager", "jit"])
def test_split_keys_over_a_batched_cond_drawing_different_numbers_of_keys(outer):
    preds = jnp.array([1.0, -1.0, 1.0])

    def f(p):
        return fx.cond(p > 0, lambda: fx.random.normal(), lambda: jnp.float32(0))

    run = (lambda g: g) if outer == "eager" else fx.jit
    with fx.rng.seed(0) as stream:
        got = run(fx.vmap(f, keys="split"))(preds)
    k = jax.random.fold_in(jax.random.key(0), 0)
    want = [
        jax.random.normal(jax.random.fold_in(jax.random.fold_in(k, b), 0)) if p > 0 else 0.0
        for b, p in enumerate(preds)
    ]
    assert_transparent(got, jnp.asarray(want, jnp.float32))
    assert stream.counter == 1


@pytest.mark.parametrize("outer", ["eager", "jit"])
def test_a_batched_cond_making_the_same_update_in_both_branches(outer):
    def f(p):
        fx.cond(p > 0, lambda: total.set(total.get() + 1), lambda: total.set(total.get() + 1))
        return p

    run = (lambda g: g) if outer == "eager" else fx.jit
    with total.init(jnp.float32(0)) as cell:
        run(fx.vmap(f))(jnp.array([1.0, -1.0, 1.0]))
    # the eager loop over the batch: every element reads the shared 0 and writes 1
    assert_bitwise_equal(cell.value, jnp.float32(1))


def test_a_batched_cond_making_different_updates_is_refused():
    def f(p):
        fx.cond(p > 0, lambda: total.set(total.get() + 1), lambda: total.set(total.get() + 2))

    with total.init(jnp.float32(0)) as cell:
        with raises(fx.EffectLeakError, "State('total')", "state='batched'"):
            fx.vmap(f)(jnp.array([1.0, -1.0]))
        assert float(cell.value) == 0.0


# --- 8. shardings given as one sharding ---


@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices (XLA_FLAGS in conftest)")
@pytest.mark.reuses_keys_on_purpose
def test_one_in_sharding_applies_to_the_users_arguments_only():
    sharding = NamedSharding(Mesh(jax.devices()[:4], ("d",)), PartitionSpec("d"))

    def step(x):
        total.set(total.get() + x.sum())
        return x * 2 + fx.random.normal()

    results = []
    for transform in [jax.jit, ft.partial(jax.jit, in_shardings=sharding)]:
        with total.init(jnp.float32(0)) as cell, fx.rng.seed(0):
            f = fx.handle(step, transform=transform)
            ys = [f(jnp.ones(8)), f(jnp.ones(8))]
        results.append((ys, cell.value))
    assert_transparent(results[1], results[0])
    assert results[1][0][0].sharding.is_equivalent_to(sharding, 1)


def test_one_in_sharding_for_a_function_with_var_args_asks_for_a_tuple():
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with raises(fx.EffectTypeError, "in_shardings", "tuple"):
        fx.handle(lambda *xs: xs[0], transform=ft.partial(jax.jit, in_shardings=sharding))(1.0)


# --- 9. policies ---


@pytest.mark.parametrize(
    ("option", "value"), [("keys", "share"), ("keys", None), ("state", "batch"), ("state", 0)]
)
@pytest.mark.parametrize("wrapper", ["vmap", "shard_map"])
def test_unknown_policies_are_refused(wrapper, option, value):
    if wrapper == "vmap":
        make = lambda: fx.vmap(draw, **{option: value})
    else:
        mesh = Mesh(jax.devices()[:1], ("d",))
        spec = PartitionSpec("d")
        make = lambda: fx.shard_map(
            draw, mesh=mesh, in_specs=spec, out_specs=spec, **{option: value}
        )
    with raises(fx.EffectUsageError, f"{option}={value!r}", "must be one of"):
        make()


# --- 10. key counters past int32 ---


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("counter", [2**31 - 1, 2**31, 2**31 + 5, 2**32 - 1])
@pytest.mark.parametrize("wrapper", ["jit", "scan", "cond", "vmap-shared"])
def test_key_counters_up_to_2_to_the_32_match_eagerly(wrapper, counter):
    run = {
        "jit": lambda: fx.jit(fx.rng.next_key)(),
        "scan": lambda: fx.scan(lambda c, _: (c, fx.rng.next_key()), 0, None, length=1)[1][0],
        "cond": lambda: fx.cond(jnp.bool_(True), fx.rng.next_key, fx.rng.next_key),
        "vmap-shared": lambda: fx.vmap(lambda _: fx.rng.next_key(), keys="shared")(jnp.ones(1))[0],
    }[wrapper]
    with fx.rng.seed(0) as stream:
        stream.counter = counter
        got = run()
    want = jax.random.fold_in(jax.random.key(0), counter)
    assert_bitwise_equal(got, want)
    assert int(stream.counter) == counter + 1


@pytest.mark.parametrize("wrapper", ["eager", "jit"])
def test_a_stream_that_drew_2_to_the_32_keys_says_so(wrapper):
    with dropout.seed(0) as stream:
        stream.counter = 2**32
        with raises(fx.EffectUsageError, "RandomKey('dropout')", "2**32", "dropout.seed(key)"):
            (dropout.next_key if wrapper == "eager" else fx.jit(dropout.next_key))()
        assert stream.counter == 2**32


# --- 11. StateTypeError messages ---


@pytest.mark.parametrize(
    ("before", "after", "names"),
    [
        (lambda: jax.random.key(0), jax.random.key_data, ("key<fry>[]", "uint32[2]")),
        (lambda: jax.random.PRNGKey(0), jax.random.wrap_key_data, ("uint32[2]", "key<fry>[]")),
        (lambda: jnp.int32(0), lambda v: v * 1.5, ("int32[]", "float32[]")),
    ],
)
def test_state_type_errors_describe_keys_and_arrays(before, after, names):
    state = fx.State[jax.Array]("key_state")
    with state.init(before()) as cell:
        old = cell.value
        with raises(fx.StateTypeError, "State('key_state')", *names):
            fx.jit(lambda: state.set(after(state.get())))()
        assert cell.value is old


# --- 12. JAX's own errors, named for the effect ---


def test_python_control_flow_on_a_traced_ask_suggests_static():
    n = fx.Ask[int]("n")
    with n.provide(3):
        with raises(fx.EffectTypeError, "Ask('n')", "static=True"):
            fx.jit(lambda x: x * 2 if n.ask() > 2 else x)(1.0)


def test_python_control_flow_on_a_static_ask_works():
    n = fx.Ask[int]("n", static=True)
    f = fx.jit(lambda x: x * 2 if n.ask() > 2 else x)
    with n.provide(3):
        assert float(f(1.0)) == 2.0
    with n.provide(1):
        assert float(f(1.0)) == 1.0


def test_a_state_value_jit_cannot_parse_is_named():
    f = fx.jit(lambda: total.set(total.get() + 1))
    with total.init(jnp.int32(0)) as cell:
        f()
        f()  # the warm path
        cell.value = 2**40
        with raises(fx.EffectTypeError, "State('total')", "overflow"):
            f()
        assert cell.value == 2**40


@pytest.mark.parametrize("kind", ["cond", "switch"])
def test_branches_emitting_different_dtypes_are_named(kind):
    branches = [lambda: log.emit(jnp.int32(1)), lambda: log.emit(jnp.float32(1))]
    with log.collect() as collector:
        with raises(fx.EffectUsageError, "Emit('log')", "int32", "float32", f"effax.{kind}"):
            if kind == "cond":
                fx.cond(True, *branches)
            else:
                fx.switch(0, branches)
    assert collector.values == []


@pytest.mark.parametrize("wrapper", ["jit", "scan", "vmap"])
def test_emitting_a_string_inside_a_traced_region_is_named(wrapper):
    words = fx.Emit[str]("words")
    run = {
        "jit": lambda: fx.jit(lambda: words.emit("hi"))(),
        "scan": lambda: fx.scan(lambda c, _: (c, words.emit("hi")), 0, None, length=2),
        "vmap": lambda: fx.vmap(lambda x: words.emit("hi"))(jnp.ones(2)),
    }[wrapper]
    with words.collect() as collector:
        with raises(fx.EffectTypeError, "Emit('words')", "str"):
            run()
        words.emit("eagerly, fine")
    assert collector.values == ["eagerly, fine"]


def test_a_batched_state_of_the_wrong_size_is_named():
    with total.init(jnp.zeros(3)) as cell:
        with raises(fx.EffectUsageError, "State('total')", "leading axis", "state='batched'"):
            fx.vmap(lambda x: total.set(total.get() + x), state="batched")(jnp.ones(2))
        assert cell.value.shape == (3,)


@pytest.mark.skipif(len(jax.devices()) < 4, reason="needs 4 devices (XLA_FLAGS in conftest)")
def test_a_per_device_write_of_a_shared_state_under_shard_map_is_named():
    mesh = Mesh(jax.devices()[:4], ("d",))

    def step(x):
        total.set(total.get() + x.sum())
        return x

    with total.init(jnp.float32(0)) as cell:
        with raises(fx.EffectUsageError, "State('total')", "lax.pmean", "state='batched'"):
            fx.shard_map(
                step, mesh=mesh, in_specs=PartitionSpec("d"), out_specs=PartitionSpec("d")
            )(jnp.ones(8))
        assert float(cell.value) == 0.0


def test_an_unhashable_static_export_is_named_and_unused_it_is_no_obstacle():
    config = Mode("config")
    with ModeHandler(config, [1, 2]):
        assert float(fx.jit(lambda x: x * 2)(1.0)) == 2.0  # not looked up
        assert (
            float(fx.scan(lambda c, _: (c * len(config.get()), None), 1.0, None, length=2)[0])
            == 4.0
        )
        with raises(fx.EffectTypeError, "Mode('config')", "not hashable", "list"):
            fx.jit(lambda x: x * len(config.get()))(1.0)
    with ModeHandler(config, (1, 2)):
        assert float(fx.jit(lambda x: x * len(config.get()))(1.0)) == 2.0


def test_an_eager_loop_reading_an_unhashable_static_export_runs_uncompiled():
    """An eager scan is the compiled call of its implementation; a body reading a
    handler that compiled calls cannot key on still runs (as the wrapper itself,
    its body traced on every call, twice on the first: the compiled attempt learns
    the body reads it, later attempts fail before tracing), and a hashable value
    afterwards gets the cached program (one trace, then none)."""
    config = Mode("config")
    traces = []

    def body(c, _):
        traces.append(None)
        return c * len(config.get()), None

    with ModeHandler(config, [1, 2]):
        assert [float(fx.scan(body, 1.0, None, length=2)[0]) for _ in range(3)] == [4.0] * 3
    assert len(traces) == 4
    with ModeHandler(config, (1, 2, 3)):
        assert [float(fx.scan(body, 1.0, None, length=2)[0]) for _ in range(3)] == [9.0] * 3
    assert len(traces) == 5


# --- 13. hints are valid Python ---


@pytest.mark.parametrize(
    "effect",
    [
        fx.RandomKey("my dropout"),
        fx.State[int]("norm.stats"),
        fx.Ask[int]("class"),
        fx.State[int]("ok"),
    ],
)
def test_the_suggested_fix_is_valid_python(effect):
    operation = {
        fx.RandomKey: lambda: effect.next_key(),
        fx.State: lambda: effect.get(),
        fx.Ask: lambda: effect.ask(),
    }[type(effect)]
    with raises(fx.UnhandledEffectError, repr(effect)) as info:
        operation()
    message = str(info.value)
    snippets = message.split("`")[1::2]
    assert snippets
    for snippet in snippets:
        compile(snippet, "<hint>", "exec")
    if effect.name != "ok":
        assert f"(where `effect` is {effect!r})" in message


def test_make_jaxpr_names_a_fix_that_exists():
    with scale.provide(jnp.float32(2.0)):
        with raises(fx.EffectLeakError, "jax.make_jaxpr", "effax.handle"):
            jax.make_jaxpr(lambda x: x * scale.ask())(1.0)

    def f(x):
        return x * scale.ask()

    # the fix the message names: the handler created inside the traced function
    jaxpr = jax.make_jaxpr(lambda *args: fx.handle(f, scale.provide(jnp.float32(2.0)))(*args))(1.0)
    assert "mul" in str(jaxpr)


# --- 14. odd inputs ---


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize(
    "seed", [3, np.int64(3), np.array(3), jnp.int32(3), jnp.uint32(3), np.uint8(3)], ids=repr
)
def test_integer_scalar_seeds_are_what_jax_random_key_takes(seed):
    with fx.rng.seed(seed):
        got = fx.rng.next_key()
    assert_bitwise_equal(got, jax.random.fold_in(jax.random.key(3), 0))


@pytest.mark.parametrize(
    "seed",
    [3.0, "3", None, jnp.float32(3), jnp.arange(3), np.array([3, 4], np.int32), True],
    ids=repr,
)
def test_seeds_that_are_not_keys_are_refused(seed):
    with raises(fx.EffectTypeError, "RandomKey('rng').seed"):
        fx.rng.seed(seed)


def test_two_handlers_of_one_effect_in_a_bundle_are_refused():
    with raises(fx.EffectUsageError, "Ask('scale')", "two handlers"):
        fx.handlers(scale.provide(1.0), total.init(0), scale.provide(2.0))


def test_effects_copy_as_themselves_and_pickle_by_name():
    for effect in [total, log, scale, fx.rng, dropout]:
        assert copy.copy(effect) is effect
        assert copy.deepcopy(effect) is effect
        assert pickle.loads(pickle.dumps(effect)) is effect
    # a handler deep-copies into an independent cell of the same effect
    with total.init(jnp.float32(1)) as cell:
        clone = copy.deepcopy(cell)
        total.set(jnp.float32(2))
    assert clone.effect is total and float(clone.value) == 1.0


def test_an_effect_bound_to_no_module_name_is_not_pickled():
    local = fx.State[int]("local state")
    with raises(fx.EffectTypeError, "State('local state')", "module level"):
        pickle.dumps(local)


@pytest.mark.parametrize(
    "run",
    [
        lambda body: fx.fori_loop(0, 0, lambda i, c: (body(c), c)[1], 1.0),
        lambda body: fx.scan(lambda c, _: ((body(c), c)[1], None), 1.0, None, length=0),
        lambda body: fx.map(lambda x: (body(x), x)[1], jnp.zeros((0,))),
    ],
    ids=["fori_loop", "scan", "map"],
)
def test_a_loop_of_no_steps_emits_nothing_as_a_python_loop(run):
    with log.collect() as collector:
        run(log.emit)
    assert collector.values == []
    with log.collect() as collector:
        for _ in range(0):  # the Python loop it stands for
            log.emit(1.0)
    assert collector.values == []


@pytest.mark.parametrize("value", [None, np.float32(1.5), np.array([1, 2], np.int16), 3, 2.5, True])
@pytest.mark.parametrize("wrapper", ["jit", "scan", "cond", "vmap"])
def test_odd_but_valid_state_values_cross_every_wrapper(wrapper, value):
    state = fx.State[object]("odd")

    def touch():
        state.set(jax.tree.map(lambda v: v, state.get()))

    run = {
        "jit": lambda: fx.jit(touch)(),
        "scan": lambda: fx.scan(lambda c, _: (c, touch()), 0, None, length=2),
        "cond": lambda: fx.cond(True, touch, touch),
        "vmap": lambda: fx.vmap(lambda _: touch())(jnp.ones(2)),
    }[wrapper]
    with state.init(value) as cell:
        run()
    leaves = jax.tree.leaves(cell.value)
    want = jax.tree.leaves(value)
    assert len(leaves) == len(want)
    for got, expected in zip(leaves, want, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def test_a_state_changing_shape_between_calls_retraces():
    f = fx.jit(lambda: total.set(total.get() * 2))
    with total.init(jnp.ones(2)) as cell:
        f()
        cell.value = jnp.ones(3)
        f()
        assert_bitwise_equal(cell.value, jnp.full(3, 2.0))


# --- 14. arguments checked at the boundary (issue 29), leaving the handlers as they were ---

_SAMPLERS = sorted(n for n in fx.random.__all__ if n != "key")
_SAMPLER_ARGS = {  # the arguments each sampler needs besides shape and stream
    "beta": (1.0, 1.0),
    "categorical": (jnp.zeros(3),),
    "choice": (3,),
    "dirichlet": (jnp.ones(2),),
    "gamma": (1.0,),
    "multivariate_normal": (jnp.zeros(2), jnp.eye(2)),
    "permutation": (3,),
    "randint": (),
    "truncated_normal": (-1.0, 1.0),
}


def _sample(name, **kwargs):
    fn = getattr(fx.random, name)
    if name == "randint":
        return fn(kwargs.pop("shape", (2,)), 0, 5, **kwargs)
    return fn(*_SAMPLER_ARGS.get(name, ()), **kwargs)


@pytest.mark.parametrize("name", [*_SAMPLERS, "key"])
@pytest.mark.parametrize("stream", [None, "rng", fx.Ask[int]("not_a_stream"), object()])
def test_every_sampler_refuses_a_stream_that_is_not_a_random_key(name, stream):
    with fx.rng.seed(0) as rng_stream:
        with raises(fx.EffectTypeError, f"effax.random.{name}(stream=...)", "RandomKey"):
            _sample(name, stream=stream)
        assert rng_stream.counter == 0


@pytest.mark.parametrize(
    "name", [n for n in _SAMPLERS if "shape" in inspect.signature(getattr(fx.random, n)).parameters]
)
@pytest.mark.parametrize("shape", [(-1,), (2, -3), ("2",), -1])
def test_every_sampler_with_a_shape_refuses_a_negative_or_non_int_one(name, shape):
    with fx.rng.seed(0) as stream:
        with raises(fx.EffectUsageError, f"effax.random.{name} got shape=", "non-negative ints"):
            _sample(name, shape=shape)
        assert stream.counter == 0  # nothing drawn
        _sample(name, shape=(2,))  # a valid shape still draws
        assert stream.counter == 1


@pytest.mark.parametrize("length", [-1, 2.0, "3", True])
def test_scan_refuses_a_length_that_is_not_a_non_negative_int(length):
    with fx.rng.seed(0) as stream:
        with raises(fx.EffectUsageError, f"length={length!r}", "non-negative"):
            fx.scan(lambda c, _: (c, fx.random.normal()), 0, None, length=length)
        assert stream.counter == 0


@pytest.mark.parametrize("flag", ["yes", 1, None])
def test_donate_state_must_be_a_bool(flag):
    with raises(fx.EffectTypeError, "donate_state", "True or False", repr(flag)):
        fx.jit(draw, donate_state=flag)


@pytest.mark.parametrize("counter", [-1, 2**32, 2**40])
def test_restore_refuses_an_impossible_key_counter(counter):
    with fx.handlers(fx.rng.seed(0), total.init(jnp.ones(2))) as hs:
        fx.random.normal()
        saved = fx.snapshot(hs)
        saved["rng"]["counter"] = np.int64(counter)
        saved["total"] = jnp.zeros(2)
        with raises(fx.EffectUsageError, "RandomKey('rng')", "key counter", "2**32 - 1"):
            fx.restore(saved, hs)
        assert hs[fx.rng].counter == 1  # nothing was written, the State neither
        assert_bitwise_equal(hs[total], jnp.ones(2))


@pytest.mark.leaks_on_purpose
def test_restore_refuses_a_tracer_that_escaped_its_trace():
    leaked = []
    jax.jit(lambda x: leaked.append(x) or x)(jnp.ones(2))
    with total.init(jnp.ones(2)) as cell:
        with raises(fx.EffectLeakError, "State('total')", "tracer", "outside jax.jit"):
            fx.restore({"total": leaked[0]}, cell)
        assert_bitwise_equal(cell.value, jnp.ones(2))


# --- 15. unhandled effects name every way to handle them, and their namesakes ---


def test_an_unhandled_emit_names_discard_beside_collect():
    log = fx.Emit[int]("log")
    with raises(fx.UnhandledEffectError, "log.collect()", "log.discard()"):
        log.emit(1)


def test_an_unhandled_effect_names_a_handled_namesake_and_where_both_were_declared():
    first = fx.State[int]("steps")
    second = fx.State[int]("steps")  # another declaration: another effect
    here = f"{__file__}:"
    with second.init(0):
        with raises(fx.UnhandledEffectError, "same name", here, "compared by identity"):
            first.get()
    with raises(fx.UnhandledEffectError) as info:  # no namesake handled: not mentioned
        first.get()
    assert "same name" not in str(info.value)


# --- 16. errors that name the effect and the fix (issue 29) ---


@pytest.mark.parametrize("use", ["shape", "index"])
def test_a_traced_ask_used_as_a_python_int_suggests_static(use):
    n = fx.Ask[int]("n")
    body = {
        "shape": lambda x: x * jnp.ones(n.ask()),
        "index": lambda x: [x, x, x, x][n.ask()],
    }[use]
    with n.provide(3):
        with raises(fx.EffectTypeError, "Ask('n')", "static=True"):
            fx.jit(body)(1.0)


def test_a_scalar_state_under_batched_vmap_names_the_fixes():
    with total.init(jnp.float32(0)) as cell:
        with raises(fx.EffectUsageError, "State('total')", "scalar", "state='shared'"):
            fx.vmap(lambda x: total.set(total.get() + x), state="batched")(jnp.ones(3))
        assert_bitwise_equal(cell.value, jnp.float32(0))


@pytest.mark.parametrize(
    ("transform", "instead"),
    [
        (jax.vmap, "effax.vmap"),
        (jax.grad, "effax.grad"),
        (jax.value_and_grad, "effax.value_and_grad"),
        (ft.partial(jax.vmap, in_axes=0), "effax.vmap"),
    ],
)
def test_handle_refuses_a_transformation_that_maps_or_differentiates(transform, instead):
    with raises(fx.EffectTypeError, "cannot carry effects", "jax.jit", instead):
        fx.handle(draw, transform=transform)


# --- 17. every public function checks its arguments (issue 29): a table ---

_OBJECTS = np.array([object(), object()])  # a NumPy array of Python objects


def _generator():
    yield 1


def _stale():
    leaked = []
    jax.jit(lambda x: leaked.append(x) or x)(jnp.ones(()))
    return leaked[0]


def _handler_with_fields(fields):
    return type("Tally", (fx.Handler,), {"fields": fields})  # checked as the class is made


_each = lambda i, c: c
_pair = lambda c, x: (c, x)
# name -> cases (what is wrong, the call, the error, fragments its message names)
_TAP = fx.Tap[jax.Array]("misuse_tap")


def _tap_under(handler, site, value):
    with handler:
        return _TAP.tap(site, value)


_BAD_ARGUMENTS = {
    "scan": [
        ("f=None", lambda: fx.scan(None, 0.0, jnp.ones(2)), fx.EffectTypeError, "f must be"),
        ("xs of objects", lambda: fx.scan(_pair, 0.0, _OBJECTS), fx.EffectTypeError, "xs"),
        ("init a str", lambda: fx.scan(_pair, "0", jnp.ones(2)), fx.EffectTypeError, "init"),
        ("stale init", lambda: fx.scan(_pair, _stale(), jnp.ones(2)), fx.EffectLeakError, "init"),
        (
            "reverse='yes'",
            lambda: fx.scan(_pair, 0.0, jnp.ones(2), reverse="yes"),
            fx.EffectTypeError,
            "reverse",
        ),
        ("length=-1", lambda: fx.scan(_pair, 0.0, None, length=-1), fx.EffectUsageError, "length"),
    ],
    "map": [
        ("f=None", lambda: fx.map(None, jnp.ones(2)), fx.EffectTypeError, "f must be"),
        ("xs of objects", lambda: fx.map(abs, _OBJECTS), fx.EffectTypeError, "xs"),
        (
            "batch_size=-1",
            lambda: fx.map(abs, jnp.ones(2), batch_size=-1),
            fx.EffectUsageError,
            "batch_size",
        ),
    ],
    "fori_loop": [
        ("lower='0'", lambda: fx.fori_loop("0", 3, _each, 0.0), fx.EffectTypeError, "lower"),
        ("upper=None", lambda: fx.fori_loop(0, None, _each, 0.0), fx.EffectTypeError, "upper"),
        ("upper=2.5", lambda: fx.fori_loop(0, 2.5, _each, 0.0), fx.EffectTypeError, "upper"),
        ("body_fun=None", lambda: fx.fori_loop(0, 3, None, 0.0), fx.EffectTypeError, "body_fun"),
        ("stale init", lambda: fx.fori_loop(0, 3, _each, _stale()), fx.EffectLeakError, "init_val"),
    ],
    "while_loop": [
        ("cond_fun=None", lambda: fx.while_loop(None, abs, 0.0), fx.EffectTypeError, "cond_fun"),
        ("body_fun='f'", lambda: fx.while_loop(bool, "f", 0.0), fx.EffectTypeError, "body_fun"),
        (
            "init of objects",
            lambda: fx.while_loop(bool, abs, _OBJECTS),
            fx.EffectTypeError,
            "init_val",
        ),
    ],
    "cond": [
        ("pred=None", lambda: fx.cond(None, float, float), fx.EffectTypeError, "pred"),
        ("pred='yes'", lambda: fx.cond("yes", float, float), fx.EffectTypeError, "pred"),
        ("stale pred", lambda: fx.cond(_stale(), float, float), fx.EffectLeakError, "pred"),
        ("true_fun=None", lambda: fx.cond(True, None, float), fx.EffectTypeError, "true_fun"),
        ("operand a str", lambda: fx.cond(True, abs, abs, "x"), fx.EffectTypeError, "operands"),
    ],
    "switch": [
        ("index='0'", lambda: fx.switch("0", [float]), fx.EffectTypeError, "index"),
        ("branches=None", lambda: fx.switch(0, None), fx.EffectTypeError, "branches"),
        ("branches=[]", lambda: fx.switch(0, []), fx.EffectUsageError, "branches"),
        ("a branch None", lambda: fx.switch(0, [float, None]), fx.EffectTypeError, "branches[1]"),
    ],
    "handle": [
        ("fn=None", lambda: fx.handle(None), fx.EffectTypeError, "fn must be"),
        (
            "transform='jit'",
            lambda: fx.handle(abs, transform="jit"),
            fx.EffectTypeError,
            "transform",
        ),
        ("a str handler", lambda: fx.handle(abs, "h"), fx.EffectTypeError, "handlers"),
        (
            "donate_state=1",
            lambda: fx.handle(abs, transform=jax.jit, donate_state=1),
            fx.EffectTypeError,
            "donate_state",
        ),
    ],
    "jit": [
        ("fn='f'", lambda: fx.jit("f"), fx.EffectTypeError, "fn must be"),
        (
            "donate_state='yes'",
            lambda: fx.jit(abs, donate_state="yes"),
            fx.EffectTypeError,
            "donate_state",
        ),
        ("stale argument", lambda: fx.jit(lambda x: x)(_stale()), fx.EffectLeakError, "arguments"),
    ],
    "checkpoint": [("fun=None", lambda: fx.checkpoint(None), fx.EffectTypeError, "fun")],
    "grad": [
        ("fun=None", lambda: fx.grad(None), fx.EffectTypeError, "effax.grad", "fun"),
        ("argnums='0'", lambda: fx.grad(abs, argnums="0"), fx.EffectTypeError, "argnums"),
    ],
    "value_and_grad": [
        ("fun=None", lambda: fx.value_and_grad(None), fx.EffectTypeError, "fun"),
        ("argnums=()", lambda: fx.value_and_grad(abs, argnums=()), fx.EffectTypeError, "argnums"),
    ],
    "vmap": [
        ("fun=None", lambda: fx.vmap(None), fx.EffectTypeError, "fun"),
        ("keys='both'", lambda: fx.vmap(abs, keys="both"), fx.EffectUsageError, "keys"),
        ("state=None", lambda: fx.vmap(abs, state=None), fx.EffectUsageError, "state"),
    ],
    "shard_map": [
        (
            "f=None",
            lambda: fx.shard_map(None, mesh=None, in_specs=None, out_specs=None),
            fx.EffectTypeError,
            "f must be",
        ),
        (
            "mesh=None",
            lambda: fx.shard_map(abs, mesh=None, in_specs=None, out_specs=None),
            fx.EffectTypeError,
            "mesh",
        ),
    ],
    "plumb_and_transform": [
        (
            "callable_to_transform='f'",
            lambda: fx.plumb_and_transform(
                "f",
                transform_to_apply=jax.jit,
                compute_extra_input_before=tuple,
                create_context_managers_after=tuple,
            ),
            fx.EffectTypeError,
            "callable_to_transform",
        ),
    ],
    "handlers": [
        ("None", lambda: fx.handlers(None), fx.EffectTypeError, "takes handlers"),
        ("a str", lambda: fx.handlers("h"), fx.EffectTypeError, "takes handlers"),
    ],
    "snapshot": [("a str", lambda: fx.snapshot("h"), fx.EffectTypeError, "take handlers")],
    "restore": [
        ("snapshot=None", lambda: fx.restore(None, total.init(1.0)), fx.EffectTypeError, "dict"),
        ("a str handler", lambda: fx.restore({}, "h"), fx.EffectTypeError, "take handlers"),
    ],
    "assert_processes_agree": [
        ("a str", lambda: fx.assert_processes_agree("h"), fx.EffectTypeError, "take handlers"),
    ],
    "uses": [
        ("a str", lambda: fx.uses("s"), fx.EffectTypeError, "takes effects"),
        (
            "a generator function",
            lambda: fx.uses(total)(_generator),
            fx.EffectTypeError,
            "generator function",
        ),
    ],
    "intercept": [
        ("a str effect", lambda: fx.intercept("loss"), fx.EffectTypeError, "takes an effect"),
        (
            "an unknown operation",
            lambda: fx.intercept(total, gett=lambda outer: outer.get()),
            fx.EffectUsageError,
            "no operation 'gett'",
            "get, set, modify",
        ),
        (
            "a non-callable",
            lambda: fx.intercept(total, get=3),
            fx.EffectTypeError,
            "takes a function",
        ),
    ],
    "Ask": [
        ("name=None", lambda: fx.Ask[int](None), fx.EffectTypeError, "name"),
        ("static='yes'", lambda: fx.Ask[int]("a", static="yes"), fx.EffectTypeError, "static"),
        (
            "stale value",
            lambda: fx.Ask[jax.Array]("a").provide(_stale()),
            fx.EffectLeakError,
            "provide",
        ),
        (
            "unhashable static value",
            lambda: fx.Ask[list]("a", static=True).provide([1]),
            fx.EffectTypeError,
            "hashable",
        ),
    ],
    "State": [
        ("name=''", lambda: fx.State[int](""), fx.EffectTypeError, "non-empty"),
        ("stale value", lambda: total.init(_stale()), fx.EffectLeakError, "init"),
    ],
    "StateDict": [
        ("name=''", lambda: fx.StateDict[int](""), fx.EffectTypeError, "non-empty"),
        ("init(list)", lambda: fx.StateDict[int]("d").init([1]), fx.EffectTypeError, "dict"),
        ("init({1: 1})", lambda: fx.StateDict[int]("d").init({1: 1}), fx.EffectTypeError, "str"),
        (
            "stale entry",
            lambda: fx.StateDict[int]("d").init({"a": _stale()}),
            fx.EffectLeakError,
            "init",
        ),
    ],
    "Emit": [("name=3", lambda: fx.Emit[int](3), fx.EffectTypeError, "name")],
    "Tap": [
        ("name=3", lambda: fx.Tap[int](3), fx.EffectTypeError, "name"),
        ("record(3)", lambda: _TAP.record(3), fx.EffectTypeError, "fnmatch"),
        ("gradients(None)", lambda: _TAP.gradients(None), fx.EffectTypeError, "fnmatch"),
        ("replace(3)", lambda: _TAP.replace(3), fx.EffectTypeError, "mapping"),
        ("replace({3: x})", lambda: _TAP.replace({3: 1.0}), fx.EffectTypeError, "site names"),
        ("replace({s: str})", lambda: _TAP.replace({"s": "x"}), fx.EffectTypeError, "array"),
        ("replace({s: None})", lambda: _TAP.replace({"s": None}), fx.EffectTypeError, "array"),
        (
            "where= float mask",
            lambda: _TAP.replace({"s": jnp.ones(2)}, where={"s": jnp.ones(2)}),
            fx.EffectTypeError,
            "boolean mask",
        ),
        (
            "where= with a function",
            lambda: _TAP.replace(lambda s, v: v, where={"s": True}),
            fx.EffectUsageError,
            "masks the values of a mapping",
        ),
        (
            "tap(site=None)",
            lambda: _tap_under(_TAP.ignore(), None, 1.0),
            fx.EffectTypeError,
            "site's name as a str",
        ),
    ],
    "RandomKey": [
        ("name=None", lambda: fx.RandomKey(None), fx.EffectTypeError, "name"),
        ("seed='0'", lambda: fx.RandomKey("r").seed("0"), fx.EffectTypeError, "seed"),
        ("seed of objects", lambda: fx.rng.seed(_OBJECTS), fx.EffectTypeError, "seed"),
        ("stale seed", lambda: fx.rng.seed(_stale()), fx.EffectLeakError, "seed"),
    ],
    "JitAwareContextVar": [
        ("name=None", lambda: fx.JitAwareContextVar(None), fx.EffectTypeError, "str"),
    ],
    "Handler": [
        (
            "Fields(carry=3)",
            lambda: _handler_with_fields(fx.Fields(carry=3)),
            fx.EffectTypeError,
            "carry=3",
        ),
    ],
    **{
        f"random.{name}": [
            ("stream=None", ft.partial(_sample, name, stream=None), fx.EffectTypeError, "stream"),
            (
                "stream=object()",
                ft.partial(_sample, name, stream=object()),
                fx.EffectTypeError,
                "RandomKey",
            ),
        ]
        for name in [*_SAMPLERS, "key"]
    },
}
# Public names that take no argument a user could get wrong: types made by the
# functions above (handlers, states, stages), the errors, and the protocol's records.
_NOTHING_TO_CHECK = {
    "BatchPolicy", "Collector", "Compiled", "Discarder", "Effect", "EffectError",
    "EffectLeakError", "EffectTypeError", "EffectUsageError", "Export", "Fields", "Handlers",
    "Interceptor", "Ignorer", "Recorder", "Replacer", "GradientRecorder", "TapHandler",
    "KeyState", "KeyStream", "Outcome", "Provider", "StateCell", "StateDictCell",
    "StateTypeError",
    "UndeclaredEffectError", "UnhandledEffectError", "random", "rng", "__version__",
}  # fmt: skip


def test_every_public_function_is_in_the_table_of_bad_arguments():
    """A new public function (in effax.__all__ or effax.random.__all__) needs rows in
    `_BAD_ARGUMENTS`, so that its validation is tested, or a reason to be exempt."""
    public = {*fx.__all__, *(f"random.{n}" for n in fx.random.__all__)}
    missing = public - set(_BAD_ARGUMENTS) - _NOTHING_TO_CHECK
    assert not missing, f"add rows to _BAD_ARGUMENTS for {sorted(missing)}"
    assert not (set(_BAD_ARGUMENTS) | _NOTHING_TO_CHECK) - public  # nothing stale


@pytest.mark.leaks_on_purpose
@pytest.mark.parametrize(
    ("name", "case"),
    [(name, case) for name, cases in _BAD_ARGUMENTS.items() for case in cases],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_every_public_function_refuses_bad_arguments_by_name(name, case):
    """None, a str, an array of Python objects, a tracer of a finished trace, a flag
    that is not a bool, a negative count: a named error naming the argument,
    drawing no key and changing no handler."""
    _, call, error, *fragments = case
    with fx.rng.seed(0) as stream, total.init(jnp.ones(2)) as cell:
        with raises(error, *fragments):
            call()
        assert stream.counter == 0
        assert_bitwise_equal(cell.value, jnp.ones(2))


# --- 18. tracebacks hide effax's frames as JAX hides its own (issue 29) ---


def _boom(x):
    raise ValueError("the user's own error")


_FRAMES = {  # what is called -> the error, raised in the user's code or effax's
    "unhandled perform": (lambda: total.get(), fx.UnhandledEffectError),
    "unhandled in a scan body": (
        lambda: fx.scan(lambda c, x: (c + total.get(), None), 0.0, jnp.ones(2)),
        fx.UnhandledEffectError,
    ),
    "unhandled under jit": (
        lambda: fx.jit(lambda x: x + total.get())(1.0),
        fx.UnhandledEffectError,
    ),
    "user error under jit": (lambda: fx.jit(_boom)(1.0), ValueError),
    "user error under handle": (lambda: fx.handle(_boom, total.init(1.0))(1.0), ValueError),
    "user error in a scan body": (
        lambda: fx.scan(lambda c, x: (_boom(c), None), 0.0, jnp.ones(2)),
        ValueError,
    ),
    "user error in a cond branch": (lambda: fx.cond(True, _boom, abs, 1.0), ValueError),
    "user error under vmap": (lambda: fx.vmap(_boom)(jnp.ones(2)), ValueError),
    "user error under grad": (lambda: fx.grad(_boom)(1.0), ValueError),
    "unseeded sampler": (lambda: fx.random.normal(), fx.UnhandledEffectError),
    "bad argument": (lambda: fx.fori_loop(0, None, abs, 0.0), fx.EffectTypeError),
}


def _frames(call, error):
    with pytest.raises(error) as info:
        call()
    return [
        (pathlib.Path(f.filename), f.name) for f in traceback.extract_tb(info.value.__traceback__)
    ]


@pytest.mark.parametrize("case", list(_FRAMES))
def test_tracebacks_show_no_effax_frame_and_end_in_user_code(case):
    """The frames of an effax error, or of the user's own error raised through
    effax's wrappers: none is effax's (its generated entry code included), and the
    last one is in this file (where the user's code raised or performed)."""
    frames = _frames(*_FRAMES[case])
    effax_dir = pathlib.Path(fx.__file__).parent
    assert not [f for f in frames if f[0].is_relative_to(effax_dir)], frames
    assert frames[-1][0] == pathlib.Path(__file__), frames


@pytest.mark.parametrize("case", ["unhandled under jit", "user error in a scan body"])
def test_tracebacks_show_effax_frames_with_filtering_off(case):
    """JAX_TRACEBACK_FILTERING=off (jax.config's traceback_filtering) shows them."""
    before = jax.config.jax_traceback_filtering
    jax.config.update("jax_traceback_filtering", "off")
    try:
        frames = _frames(*_FRAMES[case])
    finally:
        jax.config.update("jax_traceback_filtering", before)
    effax_dir = pathlib.Path(fx.__file__).parent
    assert [f for f in frames if f[0].is_relative_to(effax_dir)], frames
