"""The options of ``jax.jit(**options)`` (a decorator that keeps them in a closure
variable, a JAX implementation detail) are read in `effax._trace`, the one module
that reads JAX internals, and checked by its self-test at import (issue 40 item 5)."""

import functools as ft

import jax
import jax.numpy as jnp
import pytest

import effax as fx
from effax import _plumb, _trace
from tests.helpers import assert_bitwise_equal

steps = fx.State[jnp.ndarray]("steps")


def test_the_options_that_differ_from_jax_jit_defaults_are_read():
    options = _trace.jit_factory_options(jax.jit(static_argnums=1, donate_argnums=(0,)))
    assert options == {"static_argnums": 1, "donate_argnums": (0,)}
    assert _trace.jit_factory_options(jax.jit()) == {}
    assert _trace.jit_factory_options(jax.jit(keep_unused=False)) == {}  # the default


@pytest.mark.parametrize(
    "transform",
    [jax.jit, ft.partial(jax.jit, static_argnums=0), jax.checkpoint, lambda f: f, len],
    ids=["jit", "partial", "checkpoint", "lambda", "builtin"],
)
def test_anything_else_has_no_jit_options(transform):
    assert _trace.jit_factory_options(transform) is None


def test_plumb_reads_them_through_trace():
    """`_plumb` keeps no reading of its own: normalizing a transformation asks
    `_trace`."""
    assert not hasattr(_plumb, "jit_factory_options")
    normal = _plumb.normalize_transform(jax.jit(static_argnums=0))
    assert isinstance(normal, ft.partial) and normal.func is jax.jit
    assert normal.keywords == {"static_argnums": 0}


def test_the_self_test_fails_loudly_when_the_options_cannot_be_read(monkeypatch):
    monkeypatch.setattr(_trace, "jit_factory_options", lambda transform: None)
    with pytest.raises(
        _trace.EffaxInternalsError,
        match=rf"jax {jax.__version__} \(supported: 0\.10\.x.*jit_options",
    ):
        _trace._self_test()


def _counted(n, x):
    steps.set(steps.get() + 1)
    return x * n


@pytest.mark.parametrize("wrapper", ["handle", "jit", "scan", "vmap", "cond", "checkpoint"])
def test_jit_factory_options_apply_to_the_function_under_every_wrapper(wrapper):
    """``effax.handle(fn, transform=jax.jit(static_argnums=0))``: the static argument
    is `fn`'s, and the answer is the eager one, also inside other wrappers."""
    fast = fx.handle(_counted, transform=jax.jit(static_argnums=0))
    run = {
        "handle": lambda f, x: f(3, x),
        "jit": lambda f, x: fx.jit(lambda y: f(3, y))(x),
        "scan": lambda f, x: fx.scan(lambda c, _: (f(3, c), None), x, None, length=1)[0],
        "vmap": lambda f, x: fx.vmap(lambda y: f(3, y), state="shared")(jnp.stack([x]))[0],
        "cond": lambda f, x: fx.cond(True, lambda y: f(3, y), lambda y: y * 3.0, x),
        "checkpoint": lambda f, x: fx.checkpoint(lambda y: f(3, y))(x),
    }[wrapper]
    with steps.init(jnp.int32(0)) as eager_cell:
        expected = run(_counted, jnp.float32(2.0))
    with steps.init(jnp.int32(0)) as cell:
        got = run(fast, jnp.float32(2.0))
        got_again = run(fast, jnp.float32(2.0))
    assert_bitwise_equal(got, expected)
    assert_bitwise_equal(got_again, expected)
    assert int(cell.value) == 2 * int(eager_cell.value) == 2
