"""`effax.nnx.grad` and `effax.nnx.value_and_grad` (re-exported by `effax.nnx`):
Flax NNX's `grad` / `value_and_grad` through `effax.value_and_grad`'s plumbing, and
what the `effax.nnx` wrappers share (NNX's options, the decorator form)."""

from __future__ import annotations

import functools as ft
from collections.abc import Callable, Hashable, Sequence
from typing import Any, overload

from flax import nnx

from ._grad import _check_differentiated, _grad_of, _value_and_grad

__all__ = ["grad", "value_and_grad"]


class _Missing:
    """No function given yet: the wrapper is called with options only, as a decorator."""


_MISSING: Any = _Missing


def _nnx_options(graph: bool | None, graph_updates: bool | None) -> dict[str, bool]:
    return {k: v for k, v in (("graph", graph), ("graph_updates", graph_updates)) if v is not None}


@overload
def value_and_grad(
    *,
    argnums: Any = ...,
    has_aux: bool = ...,
    holomorphic: bool = ...,
    allow_int: bool = ...,
    reduce_axes: Sequence[Hashable] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...
@overload
def value_and_grad(
    f: Callable[..., Any],
    *,
    argnums: Any = ...,
    has_aux: bool = ...,
    holomorphic: bool = ...,
    allow_int: bool = ...,
    reduce_axes: Sequence[Hashable] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[..., Any]: ...
def value_and_grad(
    f: Any = _MISSING,
    *,
    argnums: Any = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence[Hashable] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.value_and_grad` (`argnums` may hold `nnx.DiffState`) that plumbs the
    handlers through as `effax.value_and_grad` does: handler values enter as
    constants, updates and emitted values come out, and a tap's `gradients()`
    handler receives the gradients of its sites."""
    if f is _MISSING:
        return ft.partial(
            value_and_grad,
            argnums=argnums,
            has_aux=has_aux,
            holomorphic=holomorphic,
            allow_int=allow_int,
            reduce_axes=reduce_axes,
            graph=graph,
            graph_updates=graph_updates,
        )
    _check_argnums(f, argnums, "effax.nnx.value_and_grad")
    differentiate = ft.partial(
        nnx.value_and_grad,
        holomorphic=holomorphic,
        allow_int=allow_int,
        **_nnx_options(graph, graph_updates),
    )
    return _value_and_grad(f, argnums, has_aux, _keyword_argnums(differentiate), prefix="effax.nnx")


@overload
def grad(
    *,
    argnums: Any = ...,
    has_aux: bool = ...,
    holomorphic: bool = ...,
    allow_int: bool = ...,
    reduce_axes: Sequence[Hashable] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...
@overload
def grad(
    f: Callable[..., Any],
    *,
    argnums: Any = ...,
    has_aux: bool = ...,
    holomorphic: bool = ...,
    allow_int: bool = ...,
    reduce_axes: Sequence[Hashable] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[..., Any]: ...
def grad(
    f: Any = _MISSING,
    *,
    argnums: Any = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence[Hashable] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.grad` that plumbs the handlers through (see `value_and_grad`)."""
    options: dict[str, Any] = dict(
        argnums=argnums,
        has_aux=has_aux,
        holomorphic=holomorphic,
        allow_int=allow_int,
        reduce_axes=reduce_axes,
        graph=graph,
        graph_updates=graph_updates,
    )
    if f is _MISSING:
        return ft.partial(grad, **options)
    _check_argnums(f, argnums, "effax.nnx.grad")
    return _grad_of(value_and_grad(f, **options), f, has_aux, "effax.nnx.grad")


def _keyword_argnums(differentiate: Callable[..., Any]) -> Callable[..., Any]:
    """NNX's `value_and_grad` takes `argnums` by keyword only."""

    def call(inner: Callable[..., Any], argnums: Any, *, has_aux: bool) -> Any:
        return differentiate(inner, argnums=argnums, has_aux=has_aux)

    return call


def _check_argnums(f: Any, argnums: Any, where: str) -> None:
    """As effax.grad's, with NNX's `DiffState(argnum, filter)` allowed."""
    numbers = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    _check_differentiated(
        f,
        tuple(n.argnum if isinstance(n, nnx.DiffState) else n for n in numbers),
        where,
    )
