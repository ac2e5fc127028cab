"""`effax.plumb_and_transform`: the double wrapper, plumbing values in and out."""

import contextlib
import functools as ft
import inspect
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx

scale_var: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("scale")
offset_var: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("offset")
state_var: fx.JitAwareContextVar[dict[str, Any]] = fx.JitAwareContextVar("state")

BOUNDARY = "assigned behind a jit-transform boundary"
NO_VALUE = "No value found for"


def _plumb_scale(fn=None, *, transform=jax.jit):
    """plumb_and_transform, plumbing `scale_var` into `transform`."""
    return fx.plumb_and_transform(
        fn,
        transform_to_apply=transform,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=lambda s: [scale_var.set_on_enter(s)],
    )


def _plumb_state(fn, *, transform=jax.jit):
    """plumb_and_transform, plumbing the dict in `state_var` in and back out."""

    def write_back(new_state: dict[str, Any]) -> None:
        state_var.get().update(new_state)

    return fx.plumb_and_transform(
        fn,
        transform_to_apply=transform,
        compute_extra_input_before=lambda: dict(state_var.get()),
        create_context_managers_after=lambda state: [state_var.set_on_enter(state)],
        compute_extra_output_inside=state_var.get,
        receive_extra_output_after=write_back,
    )


# --- plumbing in ---------------------------------------------------------------------


def test_decorator_with_arguments():
    traces = []

    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=lambda s: [scale_var.set_on_enter(s)],
    )
    def scaled_log(x):
        traces.append(None)
        return scale_var.get() * jnp.log(x)

    for s in (1.0, 2.0, 3.0):
        with scale_var.set_on_enter(jnp.float32(s)):
            np.testing.assert_allclose(scaled_log(4.0), s * np.log(4.0), rtol=1e-6)
    assert len(traces) == 1


def test_direct_call():
    traces = []

    def scaled_log(x):
        traces.append(None)
        return scale_var.get() * jnp.log(x)

    plumbed = fx.plumb_and_transform(
        callable_to_transform=scaled_log,
        transform_to_apply=jax.jit,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=lambda s: [scale_var.set_on_enter(s)],
    )
    for s in (1.0, 2.0):
        with scale_var.set_on_enter(jnp.float32(s)):
            np.testing.assert_allclose(plumbed(4.0), s * np.log(4.0), rtol=1e-6)
            # the original function is untouched, and still impure
            np.testing.assert_allclose(scaled_log(4.0), s * np.log(4.0), rtol=1e-6)
            with pytest.raises(LookupError, match=BOUNDARY):
                jax.jit(scaled_log)(4.0)
    assert len(traces) == 1 + 2 + 2  # one jit trace, two eager calls, two refused traces


def test_without_plumbing_the_transform_refuses():
    @jax.jit
    def scaled(x):
        return scale_var.get() * x

    with scale_var.set_on_enter(2.0), pytest.raises(LookupError, match=BOUNDARY):
        scaled(1.0)


def test_extra_input_is_read_at_call_time():
    @_plumb_scale
    def scaled(x):
        return scale_var.get() * x

    with pytest.raises(LookupError, match=NO_VALUE):
        scaled(1.0)
    with scale_var.set_on_enter(jnp.float32(5.0)):
        assert float(scaled(2.0)) == 10.0


def test_keeps_name_and_signature():
    def fn(a, b=2, *args, c, d=4, **kwargs):
        """Docs."""
        return a

    plumbed = _plumb_scale(fn)
    assert plumbed.__name__ == "fn"
    assert plumbed.__doc__ == "Docs."
    assert inspect.signature(plumbed) == inspect.signature(fn)


def _everything(a, b=2.0, *args, c, d=4.0, **kwargs):
    s = scale_var.get()
    return {
        "a": s * a,
        "b": s * b,
        "args": [s * x for x in args],
        "c": s * c,
        "d": s * d,
        "kwargs": {k: s * v for k, v in kwargs.items()},
    }


CALLS = {
    "positional_and_required_keyword": ((1.0,), {"c": 3.0}),
    "defaults_given_positionally": ((1.0, 5.0), {"c": 3.0}),
    "defaults_given_by_keyword": ((), {"a": 1.0, "b": 5.0, "c": 3.0, "d": 6.0}),
    "var_positional": ((1.0, 5.0, 7.0, 8.0), {"c": 3.0}),
    "var_keyword": ((1.0,), {"c": 3.0, "e": 9.0, "f": 10.0}),
    "everything": ((1.0, 5.0, 7.0), {"c": 3.0, "d": 6.0, "e": 9.0}),
}


@pytest.mark.parametrize(("args", "kwargs"), CALLS.values(), ids=CALLS.keys())
def test_any_call_signature(args, kwargs):
    plumbed = _plumb_scale(_everything)
    with scale_var.set_on_enter(jnp.float32(2.0)):
        expected = _everything(*args, **kwargs)
        actual = plumbed(*args, **kwargs)
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, e)


def test_parameters_named_like_the_plumbing():
    def f(extra_input, callable_to_transform=1.0, *, args=2.0, kwargs=3.0):
        return scale_var.get() * (extra_input + callable_to_transform + args + kwargs)

    with scale_var.set_on_enter(jnp.float32(2.0)):
        got = _plumb_scale(f)(extra_input=1.0, callable_to_transform=2.0, args=3.0, kwargs=4.0)
    np.testing.assert_allclose(got, 20.0)


def test_callable_object_and_bound_method():
    class Scaler:
        def __init__(self, offset):
            self.offset = offset

        def __call__(self, x):
            return scale_var.get() * x + self.offset

        def method(self, x):
            return scale_var.get() * x - self.offset

    scaler = Scaler(1.0)
    with scale_var.set_on_enter(jnp.float32(2.0)):
        np.testing.assert_allclose(_plumb_scale(scaler)(3.0), 7.0)
        np.testing.assert_allclose(_plumb_scale(scaler.method)(3.0), 5.0)


def test_missing_argument_is_a_type_error():
    plumbed = _plumb_scale(_everything)
    with scale_var.set_on_enter(jnp.float32(2.0)), pytest.raises(TypeError):
        plumbed(1.0)  # `c` is required


def test_pytree_extra_input_and_several_context_managers():
    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: {"s": scale_var.get(), "o": offset_var.get()},
        create_context_managers_after=lambda extra: [
            scale_var.set_on_enter(extra["s"]),
            offset_var.set_on_enter(extra["o"]),
        ],
    )
    def affine(x):
        return scale_var.get() * x + offset_var.get()

    with scale_var.set_on_enter(jnp.float32(3.0)), offset_var.set_on_enter(jnp.ones(2)):
        np.testing.assert_allclose(affine(jnp.arange(2.0)), [1.0, 4.0])


def test_context_managers_may_come_from_a_generator():
    def managers(s):
        yield scale_var.set_on_enter(s)

    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=managers,
    )
    def scaled(x):
        return scale_var.get() * x

    with scale_var.set_on_enter(jnp.float32(3.0)):
        assert float(scaled(2.0)) == 6.0


def test_context_managers_entered_in_order_and_exited_in_reverse():
    events = []

    @contextlib.contextmanager
    def recording(name):
        events.append(f"enter {name}")
        yield
        events.append(f"exit {name}")

    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=lambda s: [
            recording("a"),
            scale_var.set_on_enter(s),
            recording("b"),
            offset_var.set_on_enter(s + 1.0),
        ],
    )
    def affine(x):
        events.append("body")
        return scale_var.get() * x + offset_var.get()

    with scale_var.set_on_enter(jnp.float32(3.0)):
        assert float(affine(2.0)) == 3.0 * 2.0 + 4.0
        with pytest.raises(LookupError, match=NO_VALUE):
            offset_var.get()  # the inner context did not leak out
    assert events == ["enter a", "enter b", "body", "exit b", "exit a"]


def test_nested_inside_a_jit_that_sets_the_value():
    @_plumb_scale
    def scaled(x):
        return scale_var.get() * x

    @jax.jit
    def outer(x, s):
        with scale_var.set_on_enter(s):
            return scaled(x) + 1.0

    np.testing.assert_allclose(outer(2.0, 3.0), 7.0)
    np.testing.assert_allclose(outer(2.0, 4.0), 9.0)


def test_gradient_flows_through_the_plumbed_input():
    @_plumb_scale
    def scaled_sin(x):
        return scale_var.get() * jnp.sin(x)

    def loss(s, x):
        with scale_var.set_on_enter(s):
            return scaled_sin(x) ** 2

    def reference(s, x):
        return (s * jnp.sin(x)) ** 2

    got = jax.grad(loss, argnums=(0, 1))(1.5, 0.3)
    want = jax.grad(reference, argnums=(0, 1))(1.5, 0.3)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_vmap_over_the_plumbed_function():
    @_plumb_scale
    def scaled(x):
        return scale_var.get() * x

    with scale_var.set_on_enter(jnp.float32(3.0)):
        np.testing.assert_allclose(jax.vmap(scaled)(jnp.arange(3.0)), [0.0, 3.0, 6.0])


# --- transforms that take options ----------------------------------------------------


def test_static_argnums_refer_to_the_users_function():
    traces = []

    @_plumb_scale(transform=ft.partial(jax.jit, static_argnums=1))
    def power(x, n):
        traces.append(n)
        out = x
        for _ in range(n - 1):  # a Python loop: `n` must be static
            out = out * x
        return scale_var.get() * out

    with scale_var.set_on_enter(jnp.float32(2.0)):
        np.testing.assert_allclose(power(3.0, 2), 18.0)
        np.testing.assert_allclose(power(4.0, 2), 32.0)
        np.testing.assert_allclose(power(3.0, 3), 54.0)
        np.testing.assert_allclose(power(5.0, 3), 250.0)
    with scale_var.set_on_enter(jnp.float32(1.0)):
        np.testing.assert_allclose(power(2.0, 3), 8.0)
    assert traces == [2, 3]


def test_static_argnums_sequence_and_negative_index():
    traces = []

    @_plumb_scale(transform=ft.partial(jax.jit, static_argnums=(0, -1)))
    def f(mode, x, n):
        traces.append((mode, n))
        y = x * n if mode == "mul" else x + n
        return scale_var.get() * y

    with scale_var.set_on_enter(jnp.float32(2.0)):
        np.testing.assert_allclose(f("mul", 3.0, 4), 24.0)
        np.testing.assert_allclose(f("mul", 5.0, 4), 40.0)
        np.testing.assert_allclose(f("add", 3.0, 4), 14.0)
    assert traces == [("mul", 4), ("add", 4)]


def test_static_argnames():
    traces = []

    @_plumb_scale(transform=ft.partial(jax.jit, static_argnames="mode"))
    def f(x, mode="add"):
        traces.append(mode)
        y = x + 1.0 if mode == "add" else x * 10.0
        return scale_var.get() * y

    with scale_var.set_on_enter(jnp.float32(2.0)):
        np.testing.assert_allclose(f(3.0, mode="mul"), 60.0)
        np.testing.assert_allclose(f(4.0, mode="mul"), 80.0)
        np.testing.assert_allclose(f(3.0, mode="add"), 8.0)
        np.testing.assert_allclose(f(5.0, mode="add"), 12.0)
    assert traces == ["mul", "add"]


def test_static_argnames_given_positionally():
    traces = []

    @_plumb_scale(transform=ft.partial(jax.jit, static_argnames="mode"))
    def f(x, mode="add"):
        traces.append(mode)
        return scale_var.get() * (x + 1.0 if mode == "add" else x * 10.0)

    with scale_var.set_on_enter(jnp.float32(2.0)):
        np.testing.assert_allclose(f(3.0, "mul"), 60.0)
        np.testing.assert_allclose(f(4.0, "mul"), 80.0)
    assert traces == ["mul"]


def test_donate_argnums_refer_to_the_users_function():
    @_plumb_scale(transform=ft.partial(jax.jit, donate_argnums=1))
    def f(keep, donate):
        return scale_var.get() * keep + donate

    keep, donate = jnp.ones(4), jnp.full(4, 2.0)
    with scale_var.set_on_enter(jnp.float32(3.0)):
        out = f(keep, donate)
    np.testing.assert_allclose(out, 5.0)
    assert donate.is_deleted()
    assert not keep.is_deleted()


def test_checkpoint_as_the_transform():
    @_plumb_scale(transform=jax.checkpoint)
    def f(x):
        return scale_var.get() * jnp.sin(x) ** 2

    def reference(x):
        return 3.0 * jnp.sin(x) ** 2

    with scale_var.set_on_enter(jnp.float32(3.0)):
        np.testing.assert_allclose(f(0.4), reference(0.4), rtol=1e-6)
        np.testing.assert_allclose(jax.grad(f)(0.4), jax.grad(reference)(0.4), rtol=1e-6)
        # inside a jit that sets the value, too
        grad_inside = jax.jit(lambda x, s: _with_scale(s, jax.grad(f), x))
        np.testing.assert_allclose(grad_inside(0.4, 3.0), jax.grad(reference)(0.4), rtol=1e-6)
        # the un-plumbed function cannot be checkpointed
        with pytest.raises(LookupError, match=BOUNDARY):
            jax.grad(jax.checkpoint(lambda x: scale_var.get() * jnp.sin(x) ** 2))(0.4)


def _with_scale(s, fn, *args):
    with scale_var.set_on_enter(s):
        return fn(*args)


# --- plumbing out --------------------------------------------------------------------


def _tick(x):
    state = state_var.get()
    state["count"] = state["count"] + 1
    state["total"] = state["total"] + x
    return state["count"] * 10


def test_value_updated_inside_jit_is_written_back():
    traces = []

    def counted_tick(x):
        traces.append(None)
        return _tick(x)

    tick = _plumb_state(counted_tick)
    state = {"count": jnp.int32(0), "total": jnp.float32(0.0)}
    outs = []
    with state_var.set_on_enter(state):
        for x in (1.0, 2.0, 3.0):
            outs.append(int(tick(x)))
    assert outs == [10, 20, 30]
    assert int(state["count"]) == 3
    assert float(state["total"]) == 6.0
    assert len(traces) == 1


def test_plumbed_out_matches_eager():
    tick = _plumb_state(_tick)
    eager_state = {"count": jnp.int32(5), "total": jnp.float32(1.0)}
    jit_state = dict(eager_state)
    with state_var.set_on_enter(eager_state):
        eager = [_tick(x) for x in (0.5, 1.5)]
    with state_var.set_on_enter(jit_state):
        jitted = [tick(x) for x in (0.5, 1.5)]
    np.testing.assert_array_equal(jitted, eager)
    assert jax.tree.map(float, jit_state) == jax.tree.map(float, eager_state)


def test_extra_output_is_received_as_concrete_arrays_after_the_call():
    received = []

    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=lambda s: [scale_var.set_on_enter(s)],
        compute_extra_output_inside=lambda: {"double": 2 * scale_var.get()},
        receive_extra_output_after=received.append,
    )
    def f(x):
        return scale_var.get() * x

    with scale_var.set_on_enter(jnp.float32(3.0)):
        out = f(1.0)
        assert len(received) == 1  # received before the call returned
        np.testing.assert_allclose(out, 3.0)
    assert list(received[0]) == ["double"]
    assert isinstance(received[0]["double"], jax.Array)
    np.testing.assert_allclose(np.asarray(received[0]["double"]), 6.0)


def test_extra_output_sees_the_state_after_the_function_ran():
    seen = []

    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: jnp.float32(0.0),
        create_context_managers_after=lambda v: [state_var.set_on_enter({"v": v})],
        compute_extra_output_inside=lambda: state_var.get()["v"],
        receive_extra_output_after=seen.append,
    )
    def f(x):
        state_var.get()["v"] = x * 2
        return x

    f(4.0)
    assert [float(v) for v in seen] == [8.0]


def test_nothing_is_written_back_when_the_call_raises():
    tick = _plumb_state(lambda x: _tick(x) if x.ndim == 0 else _fail())
    state = {"count": jnp.int32(0), "total": jnp.float32(0.0)}
    with state_var.set_on_enter(state):
        tick(1.0)
        with pytest.raises(ValueError, match="not a scalar"):
            tick(jnp.ones(2))
    assert int(state["count"]) == 1
    assert float(state["total"]) == 1.0


def _fail():
    raise ValueError("not a scalar")


def test_plumbing_out_inside_an_outer_jit():
    tick = _plumb_state(_tick)

    @jax.jit
    def run_three(count):
        state = {"count": count, "total": jnp.float32(0.0)}
        with state_var.set_on_enter(state):
            outs = [tick(x) for x in (1.0, 2.0, 3.0)]
        return outs, state

    outs, state = run_three(jnp.int32(7))
    assert [int(o) for o in outs] == [80, 90, 100]
    assert int(state["count"]) == 10
    assert float(state["total"]) == 6.0


def test_plumbing_out_under_grad():
    # The extra output is differentiable like any other output.
    def stash(x):
        state_var.get()["y"] = jnp.sin(x)
        return x

    stash_jit = _plumb_state(stash)

    def loss(x):
        state = {"y": jnp.float32(0.0)}
        with state_var.set_on_enter(state):
            stash_jit(x)
        return state["y"] * 2

    np.testing.assert_allclose(jax.grad(loss)(0.5), 2 * np.cos(0.5), rtol=1e-6)


# --- bad input -----------------------------------------------------------------------

GOOD = {
    "transform_to_apply": jax.jit,
    "compute_extra_input_before": lambda: 1.0,
    "create_context_managers_after": lambda v: [],
}


def _identity(x):
    return x


def test_non_callable_callable_to_transform():
    with pytest.raises(TypeError, match="callable_to_transform"):
        fx.plumb_and_transform(42, **GOOD)


@pytest.mark.parametrize(
    "argument",
    ["transform_to_apply", "compute_extra_input_before", "create_context_managers_after"],
)
@pytest.mark.parametrize("style", ["direct", "decorator"])
def test_non_callable_hook(argument, style):
    kwargs = {**GOOD, argument: "not callable"}
    with pytest.raises(TypeError, match=argument):
        if style == "direct":
            fx.plumb_and_transform(_identity, **kwargs)
        else:
            fx.plumb_and_transform(**kwargs)(_identity)


@pytest.mark.parametrize("argument", ["compute_extra_output_inside", "receive_extra_output_after"])
def test_non_callable_out_hook(argument):
    kwargs = {
        **GOOD,
        "compute_extra_output_inside": lambda: 1.0,
        "receive_extra_output_after": lambda v: None,
        argument: 3,
    }
    with pytest.raises(TypeError, match=argument):
        fx.plumb_and_transform(_identity, **kwargs)


@pytest.mark.parametrize("given", ["compute_extra_output_inside", "receive_extra_output_after"])
def test_out_hooks_go_together(given):
    hook = (lambda: 1.0) if given == "compute_extra_output_inside" else (lambda v: None)
    with pytest.raises(TypeError, match=r"compute_extra_output_inside.*receive_extra_output_after"):
        fx.plumb_and_transform(_identity, **GOOD, **{given: hook})


def test_transform_returning_a_non_callable():
    with pytest.raises(TypeError, match="transform_to_apply"):
        fx.plumb_and_transform(_identity, **{**GOOD, "transform_to_apply": lambda fn: 3})


def test_context_managers_hook_returning_a_non_iterable():
    # A common slip: returning the context manager itself instead of a list of them.
    plumbed = fx.plumb_and_transform(
        lambda x: x * scale_var.get(),
        transform_to_apply=jax.jit,
        compute_extra_input_before=scale_var.get,
        create_context_managers_after=lambda s: scale_var.set_on_enter(s),
    )
    with (
        scale_var.set_on_enter(2.0),
        pytest.raises(TypeError, match="create_context_managers_after"),
    ):
        plumbed(1.0)


@pytest.mark.parametrize("bad", [None, 3, "text"], ids=["none", "int", "str"])
def test_context_managers_hook_returning_non_context_managers(bad):
    plumbed = fx.plumb_and_transform(
        _identity,
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: 1.0,
        create_context_managers_after=lambda v: [bad],
    )
    with pytest.raises(TypeError, match="create_context_managers_after"):
        plumbed(1.0)
