"""`effax.grad` and `effax.value_and_grad`: `jax.grad` with the handlers around the
call plumbed through, and the handlers that take part in differentiation
(`Differentiating`: a tap's ``gradients()`` handler)."""

from __future__ import annotations

import functools as ft
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from . import _trace
from ._arguments import check_callable, check_unleaked
from ._errors import EffectTypeError
from ._protocol import Outcome
from ._region import Region

__all__ = ["Differentiating", "grad", "value_and_grad"]


@runtime_checkable
class Differentiating(Protocol):
    """A handler that takes part in differentiation when plumbed into `effax.grad` /
    `effax.value_and_grad` (a tap's ``gradients()`` handler), where `differentiates`
    says so: its rebuilt handler is first run abstractly (`begin_probe`, then
    `perturbations`: what to differentiate with respect to), then with those inputs
    (`perturb`); the gradients come back through `with_cotangents`."""

    def differentiates(self) -> bool:
        """Whether it takes part here (a handler rebuilt inside another
        differentiated call does not: the outermost one owns the sites)."""
        ...

    def begin_probe(self) -> None:
        """The first, abstract run begins (on the handler rebuilt inside)."""
        ...

    def perturbations(self) -> tuple[Hashable, tuple[Any, ...]]:
        """After the abstract run: a static `layout` (what the inputs stand for) and
        the shapes and dtypes (`jax.ShapeDtypeStruct`) of the inputs to
        differentiate with respect to."""
        ...

    def perturb(self, eps: tuple[Any, ...], layout: Hashable) -> None:
        """The differentiated run begins with inputs `eps`."""
        ...

    def with_cotangents(
        self, outcome: Outcome, layout: Hashable, cotangents: tuple[Any, ...]
    ) -> Outcome:
        """The outcome to absorb (called on the handler outside the call), given the
        gradients with respect to the perturbations."""
        ...


def value_and_grad(
    fun: Callable[..., Any],
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[..., tuple[Any, Any]]:
    """`jax.value_and_grad` that plumbs the handlers around the call through.

    Handler values (asked values, states, keys) enter as constants: derivatives are
    with respect to `argnums` only. State updates, key advances and emitted values
    come out of the call as they would eagerly.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[jnp.ndarray]("scale")
    >>> calls = effax.State[jnp.ndarray]("calls")
    >>> def loss(w):
    ...     calls.set(calls.get() + 1)
    ...     return scale.ask() * w ** 2
    >>> with effax.handlers(scale.provide(jnp.float32(3)), calls.init(jnp.int32(0))) as hs:
    ...     value, g = effax.value_and_grad(loss)(2.0)
    >>> float(value), float(g), int(hs[calls])
    (12.0, 12.0, 1)

    """
    _check_differentiated(fun, argnums, "effax.value_and_grad")
    differentiate = ft.partial(jax.value_and_grad, holomorphic=holomorphic, allow_int=allow_int)
    return _value_and_grad(fun, argnums, has_aux, differentiate, prefix="effax")


def _value_and_grad(
    fun: Callable[..., Any],
    argnums: Any,
    has_aux: bool,
    differentiate: Callable[..., Any],
    *,
    prefix: str,
) -> Callable[..., tuple[Any, Any]]:
    """`value_and_grad` with the differentiating transformation given:
    `differentiate(inner, argnums, has_aux=True)` is `jax.value_and_grad`'s (or Flax
    NNX's, whose `argnums` may hold `nnx.DiffState`s). `prefix` names the wrappers
    in messages ("effax", "effax.nnx")."""

    @_trace.api_boundary
    @ft.wraps(fun)
    def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        check_unleaked((args, kwargs), "its arguments", f"{prefix}.value_and_grad")
        region = Region(fun, name=f"{prefix}.grad")
        # Handlers that take part in differentiation (a tap's gradients()): what
        # they perturb is sized by an abstract run, then differentiated as one more
        # argument (see `Differentiating`).
        takers = {
            j: cast(Differentiating, h)
            for j, h in enumerate(region.handlers)
            if issubclass(type(h), Differentiating)
        }
        taking = [j for j, h in takers.items() if h.differentiates()]
        layouts, eps = _perturbations(region, fun, taking, args, kwargs) if taking else ((), ())
        n = len(args)

        def before(inner_handlers: list[Any], eps: tuple[Any, ...]) -> None:
            for j, layout, e in zip(taking, layouts, eps, strict=True):
                inner_handlers[j].perturb(e, layout)

        def inner(*args: Any, **kwargs: Any) -> Any:
            args, perturbations = (args[:n], args[n]) if taking else (args, ())
            out, outcomes = region.run(
                fun,
                region.carries,
                args,
                kwargs,
                carry_required=False,
                before=ft.partial(before, eps=perturbations) if taking else None,
            )
            value, aux = out if has_aux else (out, None)
            return value, (aux, region.split(outcomes))

        numbers = argnums if not taking else (*_as_tuple(argnums), n)
        (value, (aux, (carries, values))), grads = differentiate(inner, numbers, has_aux=True)(
            *args, *([eps] if taking else []), **kwargs
        )
        if taking:
            grads, cotangents = grads[:-1], grads[-1]
            grads = grads if isinstance(argnums, (tuple, list)) else grads[0]
            for j, layout, cotangent in zip(taking, layouts, cotangents, strict=True):
                got = Outcome(region.statics[j], None, values[j])
                outcome = takers[j].with_cotangents(got, layout, cotangent)
                region.statics[j], carries[j], values[j] = outcome.static, None, outcome.values
        region.absorb(carries, values, steps=1)
        return ((value, aux) if has_aux else value), grads

    return wrapped


def _as_tuple(argnums: Any) -> tuple[Any, ...]:
    return tuple(argnums) if isinstance(argnums, (tuple, list)) else (argnums,)


def _perturbations(
    region: Region, fun: Callable[..., Any], taking: list[int], args: Any, kwargs: Any
) -> tuple[tuple[Hashable, ...], tuple[Any, ...]]:
    """For the handlers `taking` part in differentiating `fun`: what each
    perturbs, found by running `fun` abstractly (its effects change nothing
    outside), and zeros of those shapes to differentiate with respect to."""
    found: list[tuple[Hashable, tuple[Any, ...]]] = []
    inside: list[list[Any]] = []

    def begin(inner_handlers: list[Any]) -> None:
        for j in taking:
            inner_handlers[j].begin_probe()
        inside.append(inner_handlers)

    def probe(*args: Any, **kwargs: Any) -> None:
        region.run(fun, region.carries, args, kwargs, carry_required=False, before=begin)
        found.extend(inside.pop()[j].perturbations() for j in taking)

    unchanged = list(region.unchanged)
    jax.eval_shape(probe, *args, **kwargs)
    region.unchanged = unchanged
    layouts = tuple(layout for layout, _ in found)
    eps = tuple(tuple(jnp.zeros(s.shape, s.dtype) for s in structs) for _, structs in found)
    return layouts, eps


def grad(
    fun: Callable[..., Any],
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[..., Any]:
    """`jax.grad` that plumbs the handlers around the call through (see `value_and_grad`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[jnp.ndarray]("scale")
    >>> with scale.provide(jnp.float32(3)):
    ...     float(effax.grad(lambda w: scale.ask() * w ** 2)(2.0))
    12.0

    """
    _check_differentiated(fun, argnums, "effax.grad")
    value_and_grad_fun = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)
    return _grad_of(value_and_grad_fun, fun, has_aux, "effax.grad")


def _grad_of(
    value_and_grad_fun: Callable[..., tuple[Any, Any]], fun: Any, has_aux: bool, where: str
) -> Callable[..., Any]:
    """The `grad` of a wrapper's `value_and_grad`: the gradients (and the aux)."""

    @_trace.api_boundary
    @ft.wraps(fun)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        check_unleaked((args, kwargs), "its arguments", where)
        value, grads = value_and_grad_fun(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapped


def _check_differentiated(fun: Any, argnums: Any, where: str) -> None:
    check_callable(fun, "fun", where)
    numbers = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    if not numbers or not all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in numbers
    ):
        raise EffectTypeError(
            f"{where} takes argnums as an int or a non-empty tuple of ints (the positions "
            f"of the arguments to differentiate), but got {argnums!r}."
        )
