"""`Ask(name, default=...)`: answered where no handler is installed, eagerly and
under every wrapper; a compiled call traced without a handler traces again once one
is installed."""

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_bitwise_equal

import effax as fx

F32 = jnp.float32
scale = fx.Ask[jax.Array]("scale", default=F32(2))
verbose = fx.Ask[bool]("verbose", static=True, default=False)
plain = fx.Ask[jax.Array]("plain")


def f(x):
    return x * scale.ask() + (1.0 if verbose.ask() else 0.0)


WRAPPERS = {
    "eager": lambda g: g,
    "jit": fx.jit,
    "scan": lambda g: lambda x: fx.scan(lambda c, _: (g(c), None), x, None, length=2)[0],
    "cond": lambda g: lambda x: fx.cond(x > 0, g, lambda c: c, x),
    "vmap": lambda g: lambda x: jnp.sum(fx.vmap(g)(x + jnp.arange(3.0, dtype=F32))),
    "grad": fx.grad,
    "checkpoint": fx.checkpoint,
    "while_loop": lambda g: lambda x: fx.while_loop(lambda c: c < 10, g, x),
}


def python(x, wrapper, s, v):
    """The same program, with the effects' values written in."""
    g = lambda c: c * s + (1.0 if v else 0.0)
    if wrapper == "scan":
        return g(g(x))
    if wrapper == "cond":
        return g(x) if x > 0 else x
    if wrapper == "vmap":
        return jnp.sum(g(x + jnp.arange(3.0, dtype=F32)))
    if wrapper == "grad":
        return jax.grad(g)(x)
    if wrapper == "while_loop":
        while x < 10:
            x = g(x)
        return x
    return g(x)


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_the_default_answers_where_no_handler_is_installed(wrapper):
    g = WRAPPERS[wrapper](f)
    x = F32(0.75)
    assert_bitwise_equal(g(x), python(x, wrapper, F32(2), False))
    with scale.provide(F32(3)), verbose.provide(True):
        assert_bitwise_equal(g(x), python(x, wrapper, F32(3), True))
    assert_bitwise_equal(g(x), python(x, wrapper, F32(2), False))


def test_a_compiled_call_retraces_once_a_handler_is_installed():
    traces = []

    def counted(x):
        traces.append(1)
        return f(x)

    g = fx.jit(counted)
    for _ in range(2):
        assert float(g(F32(1))) == 2.0
        with scale.provide(F32(5)):
            assert float(g(F32(1))) == 5.0
            with scale.provide(F32(7)):  # a new value: no retrace
                assert float(g(F32(1))) == 7.0
    assert len(traces) == 2


def test_a_default_does_not_hide_an_unreachable_handler_or_a_missing_one():
    with scale.provide(F32(3)), pytest.raises(fx.EffectLeakError, match="scale"):
        jax.jit(lambda x: x * scale.ask())(F32(1))
    with pytest.raises(fx.UnhandledEffectError, match="plain"):
        plain.ask()


def test_defaults_are_checked_where_declared():
    with pytest.raises(fx.EffectTypeError, match=r"static.*default must be hashable"):
        fx.Ask[list]("bad", static=True, default=[1])
    assert fx.Ask[None]("none", default=None).ask() is None
    assert fx.Ask[int]("no default").default is fx.Ask[int]("x").default  # the sentinel


def test_an_interceptor_over_an_ask_with_a_default_and_no_handler():
    doubled = fx.intercept(scale, ask=lambda outer: 2 * outer.ask())
    with scale.provide(F32(3)), doubled:
        assert float(fx.jit(f)(F32(1))) == 6.0
    with doubled, pytest.raises(fx.UnhandledEffectError, match="scale"):
        f(F32(1))  # an interceptor forwards to a handler; the default is not one
