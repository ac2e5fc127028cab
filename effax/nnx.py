"""`effax.nnx`: Flax NNX's lifted transforms with effax's handlers plumbed through.

Each wrapper has its `flax.nnx` namesake's signature and module-state semantics
(NNX splits and merges the graph nodes in the arguments exactly as without effax:
BatchNorm statistics, `nnx.Carry`, `nnx.StateAxes`, `DiffState`, graph and tree
mode), and plumbs the handlers visible at the call through the body as the
`effax` wrapper of the same name does: keys drawn as a Python loop over the steps
would draw them, States as carries, Emit values and recorded taps stacked per step
or per batch element, tap replacements and gradients. `effax.nnx.vmap` takes
`effax.vmap`'s `keys=` and `state=` policies. `effax.jit` needs no twin:
``effax.handle(fn, transform=nnx.jit)``.

Needs Flax (``pip install effax[flax]``); ``import effax`` does not import it.

One adapter over effax's `Region` serves every wrapper: the handler carries travel
as one more plain pytree (no graph nodes) beside the user's arguments, in the slot
NNX's transform treats as effax's own transform treats it (the carry of a scan,
an argument on the policy's axes for a vmap, a closed-over constant for a
gradient), and the outcomes come out as one more output; `cond`, `switch` and
`while_loop` are effax's own with NNX's primitives, `remat` is `effax.handle` with
`nnx.remat` as the transformation.
"""

from __future__ import annotations

import functools as ft
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar, overload

import jax
import jax.numpy as jnp

try:
    from flax import nnx
    from flax.core.frozen_dict import FrozenDict
except ImportError as error:  # pragma: no cover (the test environments have Flax)
    raise ImportError(
        "effax.nnx needs Flax (flax.nnx): install it with `pip install effax[flax]`."
    ) from error

from . import _eager, _trace
from ._arguments import check_callable, check_callables, check_unleaked, fori_bounds
from ._control import Primitives, Records, _branches, _while
from ._errors import EffectTypeError
from ._handle import handle
from ._nnx_grad import _MISSING, _nnx_options, grad, value_and_grad
from ._region import Region
from ._transforms import _policy, _vmap_call

__all__ = [
    "cond",
    "fori_loop",
    "grad",
    "remat",
    "scan",
    "switch",
    "value_and_grad",
    "vmap",
    "while_loop",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
A = TypeVar("A")


_NO_METADATA: Mapping[str, Any] = FrozenDict({})  # type: ignore[no-untyped-call]


def _primitives(graph: bool | None, graph_updates: bool | None) -> Primitives:
    options: dict[str, Any] = _nnx_options(graph, graph_updates)
    return Primitives(
        "effax.nnx",
        ft.partial(nnx.cond, **options),
        ft.partial(nnx.switch, **options),
        ft.partial(nnx.while_loop, **options),
    )


def _positional(
    f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], where: str
) -> tuple[Any, ...]:
    """`args` and `kwargs` as positional arguments of `f`, as NNX's transforms take
    them (`resolve_kwargs`)."""
    if not kwargs:
        return args
    try:
        bound = inspect.signature(f).bind(*args, **kwargs)
    except (TypeError, ValueError) as error:
        raise EffectTypeError(f"{where}: the arguments do not fit the function: {error}") from None
    if bound.kwargs:
        raise EffectTypeError(
            f"{where} passes arguments positionally (as NNX's transforms do), but "
            f"{sorted(bound.kwargs)} can only be passed by keyword."
        )
    return bound.args


def _check_axes(in_axes: Any, where: str) -> None:
    """Refuse `in_axes` of a kind NNX's transform refuses, before effax adds its own."""
    one = (int, type(None), nnx.StateAxes)
    kinds = (*one, tuple, list)
    ok = in_axes is nnx.Carry or (isinstance(in_axes, kinds) and not isinstance(in_axes, bool))
    if not ok:
        raise EffectTypeError(
            f"{where}: in_axes must be an int, None, nnx.StateAxes, nnx.Carry (scan) or a "
            f"tuple of them, one per positional argument, as in Flax NNX; got {in_axes!r}."
        )


# ----------------------------------------------------------------------------- scan
@overload
def scan(
    *,
    length: int | None = ...,
    reverse: bool = ...,
    unroll: int | bool = ...,
    _split_transpose: bool = ...,
    in_axes: int | type[nnx.Carry] | tuple[Any, ...] | None = ...,
    out_axes: Any = ...,
    transform_metadata: Mapping[str, Any] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[[F], F]: ...
@overload
def scan(
    f: F,
    *,
    length: int | None = ...,
    reverse: bool = ...,
    unroll: int | bool = ...,
    _split_transpose: bool = ...,
    in_axes: int | type[nnx.Carry] | tuple[Any, ...] | None = ...,
    out_axes: Any = ...,
    transform_metadata: Mapping[str, Any] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> F: ...
def scan(
    f: Any = _MISSING,
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
    in_axes: int | type[nnx.Carry] | tuple[Any, ...] | None = (nnx.Carry, 0),
    out_axes: Any = (nnx.Carry, 0),
    transform_metadata: Mapping[str, Any] = _NO_METADATA,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.scan` that plumbs the handlers around the call through the steps, as
    `effax.scan` does: States are carried, keys drawn as a Python loop over the
    steps would draw them, each emit site's values and recorded taps stacked per
    step (in program order with `reverse=True`).

    The handler carries ride in the scan's `nnx.Carry` slot (one is added where the scan has
    none); their per-step values come out as one more per-step output.
    """
    options: dict[str, Any] = dict(
        length=length,
        reverse=reverse,
        unroll=unroll,
        _split_transpose=_split_transpose,
        transform_metadata=transform_metadata,
        graph=graph,
        graph_updates=graph_updates,
    )
    if f is _MISSING:
        return ft.partial(scan, in_axes=in_axes, out_axes=out_axes, **options)
    check_callable(f, "f", "effax.nnx.scan")
    _check_axes(in_axes, "effax.nnx.scan")

    @_trace.api_boundary
    @ft.wraps(f)
    def scanned(*args: Any, **kwargs: Any) -> Any:
        args = _positional(f, args, kwargs, "effax.nnx.scan")
        check_unleaked(args, "its arguments", "effax.nnx.scan")
        axes = (in_axes, out_axes, tuple(options.items()))
        return _eager.run(_scan, [f], axes, *args, transform=nnx.jit)

    return scanned


def _scan(fns: list[Any], axes: Any, *args: Any) -> Any:
    """One call of `effax.nnx.scan`: `axes` is ``(in_axes, out_axes, options)``."""
    (f,), (in_axes, out_axes, options) = fns, axes
    options, reverse = dict(options), dict(options)["reverse"]
    n = len(args)
    region = Region(f, name="effax.nnx.scan")
    # in_axes: the handler carries join the user's nnx.Carry (or are one more)
    if in_axes is nnx.Carry:
        inner_in: tuple[Any, ...] = (nnx.Carry,)
    elif isinstance(in_axes, tuple):
        inner_in = in_axes
    else:  # one int or None for every argument
        inner_in = (in_axes,) * n
    slots = [i for i, a in enumerate(inner_in) if a is nnx.Carry]
    added = not slots
    carry_in = n if added else slots[0]
    if added:
        inner_in = (*inner_in, nnx.Carry)
    # out_axes: the carries leave through the nnx.Carry slot; the values and a
    # marker of the step count as one more per-step output
    if out_axes is nnx.Carry:
        carry_out: int | None = -1  # the whole output is the carry
        inner_out: Any = (nnx.Carry, 0)
    elif isinstance(out_axes, tuple) and any(a is nnx.Carry for a in out_axes):
        carry_out = next(i for i, a in enumerate(out_axes) if a is nnx.Carry)
        inner_out = (*out_axes, 0)
    else:
        carry_out, inner_out = None, (out_axes, nnx.Carry, 0)

    def body(*inner_args: Any) -> Any:
        if added:
            handler_carries, user_args = inner_args[n], inner_args[:n]
        else:
            user_carry, handler_carries = inner_args[carry_in]
            user_args = (*inner_args[:carry_in], user_carry, *inner_args[carry_in + 1 :])
        out, outcomes = region.run(f, handler_carries, user_args)
        carries, values = region.split(outcomes)
        per_step = (values, jnp.zeros((), jnp.int8))
        if carry_out == -1:
            return (out, carries), per_step
        if carry_out is None:
            return out, carries, per_step
        outs = list(out)
        outs[carry_out] = (outs[carry_out], carries)
        return (*outs, per_step)

    if added:
        call_args = (*args, region.carries)
    else:
        call_args = (*args[:carry_in], (args[carry_in], region.carries), *args[carry_in + 1 :])
    result = nnx.scan(body, in_axes=inner_in, out_axes=inner_out, **options)(*call_args)
    if carry_out == -1:
        (out, carries), (values, marker) = result
    elif carry_out is None:
        out, carries, (values, marker) = result
    else:
        *outs, (values, marker) = result
        outs[carry_out], carries = outs[carry_out]
        out = tuple(outs)
    if reverse:  # (stacked like the xs: last step first; recorders want program order)
        values = [
            jax.tree.map(lambda v: jnp.flip(v, 0), v) if issubclass(type(h), Records) else v
            for h, v in zip(region.handlers, values, strict=True)
        ]
    region.absorb(carries, values, steps=int(marker.shape[0]))
    return out


# ----------------------------------------------------------------------------- vmap
@overload
def vmap(
    *,
    in_axes: int | Sequence[Any] | None = ...,
    out_axes: Any = ...,
    axis_name: Hashable | None = ...,
    axis_size: int | None = ...,
    spmd_axis_name: Hashable | tuple[Hashable, ...] | None = ...,
    transform_metadata: Mapping[str, Any] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
    keys: str = ...,
    state: str = ...,
) -> Callable[[F], F]: ...
@overload
def vmap(
    f: F,
    *,
    in_axes: int | Sequence[Any] | None = ...,
    out_axes: Any = ...,
    axis_name: Hashable | None = ...,
    axis_size: int | None = ...,
    spmd_axis_name: Hashable | tuple[Hashable, ...] | None = ...,
    transform_metadata: Mapping[str, Any] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
    keys: str = ...,
    state: str = ...,
) -> F: ...
def vmap(
    f: Any = _MISSING,
    *,
    in_axes: int | Sequence[Any] | None = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    spmd_axis_name: Hashable | tuple[Hashable, ...] | None = None,
    transform_metadata: Mapping[str, Any] = _NO_METADATA,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    keys: str = "split",
    state: str = "shared",
) -> Any:
    """`nnx.vmap` that plumbs the handlers through as `effax.vmap` does, by the
    same policies: `keys="split"` (each element draws from its own stream) or
    `"shared"`, `state="shared"` or `"batched"`. Emitted values and recorded taps
    come out stacked, one row per element."""
    options: dict[str, Any] = dict(
        axis_size=axis_size,
        spmd_axis_name=spmd_axis_name,
        transform_metadata=transform_metadata,
        **_nnx_options(graph, graph_updates),
    )
    if f is _MISSING:
        return ft.partial(
            vmap,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            keys=keys,
            state=state,
            **options,
        )
    check_callable(f, "f", "effax.nnx.vmap")
    _check_axes(in_axes, "effax.nnx.vmap")
    _policy("effax.nnx.vmap", keys, state, ())  # options checked when the wrapper is made

    @_trace.api_boundary
    @ft.wraps(f)
    def batched(*args: Any, **kwargs: Any) -> Any:
        args = _positional(f, args, kwargs, "effax.nnx.vmap")
        check_unleaked(args, "its arguments", "effax.nnx.vmap")
        batching = (nnx.vmap, in_axes, out_axes, axis_name, options)
        return _vmap_call(f, args, batching, keys, state, "effax.nnx.vmap")

    return batched


# ---------------------------------------------------------------------------- remat
@overload
def remat(
    *,
    prevent_cse: bool = ...,
    static_argnums: int | tuple[int, ...] = ...,
    policy: Callable[..., bool] | None = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[[F], F]: ...
@overload
def remat(
    f: F,
    *,
    prevent_cse: bool = ...,
    static_argnums: int | tuple[int, ...] = ...,
    policy: Callable[..., bool] | None = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> F: ...
def remat(
    f: Any = _MISSING,
    *,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.remat` that plumbs the handlers through, as `effax.checkpoint` does:
    ``effax.handle(f, transform=nnx.remat)`` (`static_argnums` refer to `f`'s own
    arguments)."""
    options: dict[str, Any] = dict(
        prevent_cse=prevent_cse, static_argnums=static_argnums, policy=policy
    )
    if f is _MISSING:
        return ft.partial(remat, graph=graph, graph_updates=graph_updates, **options)
    check_callable(f, "f", "effax.nnx.remat")
    return handle(
        f, transform=ft.partial(nnx.remat, **options, **_nnx_options(graph, graph_updates))
    )


# ------------------------------------------------------ cond / switch / while / fori
@_trace.api_boundary
def cond(
    pred: Any,
    true_fun: Callable[..., A],
    false_fun: Callable[..., A],
    *operands: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> A:
    """`nnx.cond` that plumbs the handlers through both branches, as `effax.cond`."""
    check_callables([true_fun, false_fun], "(true_fun, false_fun)", "effax.nnx.cond")
    check_unleaked(pred, "pred", "effax.nnx.cond")
    options = ("cond", graph, graph_updates)
    fns = [true_fun, false_fun]
    return _eager.run(_nnx_branches, fns, options, pred, *operands, transform=nnx.jit)  # type: ignore[no-any-return]


@_trace.api_boundary
def switch(
    index: Any,
    branches: Sequence[Callable[..., A]],
    *operands: Any,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> A:
    """`nnx.switch` that plumbs the handlers through every branch, as `effax.switch`."""
    check_callables(branches, "branches", "effax.nnx.switch")
    check_unleaked(index, "index", "effax.nnx.switch")
    options = ("switch", graph, graph_updates)
    fns = list(branches)
    return _eager.run(_nnx_branches, fns, options, index, *operands, transform=nnx.jit)  # type: ignore[no-any-return]


@_trace.api_boundary
def while_loop(
    cond_fun: Callable[[T], Any],
    body_fun: Callable[[T], T],
    init_val: T,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """`nnx.while_loop` that plumbs the handlers through, as `effax.while_loop`
    (`cond_fun` may read effects but not change them; nothing is emitted)."""
    check_callables([cond_fun, body_fun], "(cond_fun, body_fun)", "effax.nnx.while_loop")
    fns = [cond_fun, body_fun]
    return _eager.run(_nnx_while, fns, (graph, graph_updates), init_val, transform=nnx.jit)  # type: ignore[no-any-return]


@_trace.api_boundary
def fori_loop(
    lower: int | jax.Array,
    upper: int | jax.Array,
    body_fun: Callable[[Any, T], T],
    init_val: T,
    *,
    unroll: int | bool | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> T:
    """`nnx.fori_loop` that plumbs the handlers through, as `effax.fori_loop`: with
    Python-int bounds an `effax.nnx.scan` over the indices (emits stacked per step),
    with traced bounds an `effax.nnx.while_loop`."""
    bounds = fori_bounds(lower, upper, "effax.nnx.fori_loop")
    check_callable(body_fun, "body_fun", "effax.nnx.fori_loop")
    if bounds is None:  # traced bounds

        def loop_cond(state: tuple[Any, T]) -> Any:
            return state[0] < upper

        def loop_body(state: tuple[Any, T]) -> tuple[Any, T]:
            return state[0] + 1, body_fun(state[0], state[1])

        start = (jnp.asarray(lower), init_val)
        return while_loop(loop_cond, loop_body, start, graph=graph, graph_updates=graph_updates)[1]
    options = (*bounds, 1 if unroll is None else unroll, graph, graph_updates)
    return _eager.run(_nnx_fori, [body_fun], options, init_val, transform=nnx.jit)  # type: ignore[no-any-return]


# The calls the wrappers above make (traced once per handler environment eagerly:
# `_eager.run` compiles them with nnx.jit, which carries the modules among them).
def _nnx_branches(fns: list[Any], options: Any, *args: Any) -> Any:
    kind, graph, graph_updates = options
    return _branches(fns, kind, *args, primitives=_primitives(graph, graph_updates))


def _nnx_while(fns: list[Any], options: Any, init_val: Any) -> Any:
    return _while(fns, None, init_val, primitives=_primitives(*options))


def _nnx_fori(fns: list[Any], options: Any, init_val: Any) -> Any:
    (body_fun,), (lo, hi, dtype, unroll, graph, graph_updates) = fns, options
    step: Callable[[Any, jax.Array], Any] = scan(
        lambda value, i: body_fun(i, value),
        in_axes=(nnx.Carry, 0),
        out_axes=nnx.Carry,
        unroll=unroll,
        graph=graph,
        graph_updates=graph_updates,
    )
    return step(init_val, jnp.arange(lo, hi, dtype=dtype))
