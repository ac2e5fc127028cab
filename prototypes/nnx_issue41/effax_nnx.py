"""Prototype of `effax.nnx` (issue 41): twins of Flax NNX's lifted transforms that
plumb effax's handlers through, by ONE adapter over effax's `Region`.

The adapter (`_lift`) is the same for every transform:

  1. at the call, build a `Region` for the body (the handlers visible here are
     exported: consts closed over, carries as `region.carries`);
  2. rewrite the NNX transform's *axes spec* so that one extra plain pytree
     argument (the handler carries) and one extra output (the carries coming out
     plus the per-step/per-element values) travel with the user's own arguments:
     this rewrite (`Layout`) is the only per-transform code;
  3. call the NNX transform on `inner`, which unpacks the carries, runs the user's
     body through `region.run` (handlers rebuilt inside), and `region.split`s the
     outcomes into the extra output;
  4. `region.absorb` the carries/values that came out (with the step count).

Module state is NNX's business throughout: NNX splits/merges the graph nodes in
the user's arguments exactly as without effax; the handler carries are a plain
pytree (no graph nodes), which NNX passes through like any array argument.
"""

from __future__ import annotations

import functools as ft
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from flax.core.frozen_dict import FrozenDict
from flax.nnx.transforms.iteration import Carry

# --- effax internals the prototype needs (none of them public) -----------------
from effax._control import Records  # reversed-scan flip of recorded taps
from effax._region import Region  # the whole protocol side
from effax._grad import Differentiating, _perturbations  # tap gradients
from effax._protocol import Outcome
from effax._transforms import _batched, _policy, _vmap_depth  # vmap's policy plumbing


class _Missing:
    pass


Missing = _Missing


def _partial_if_missing(f: Any, fn: Callable[..., Any], **kw: Any) -> Any:
    return ft.partial(fn, **kw) if f is Missing else None


# ------------------------------------------------------------------------- scan
def scan(
    f: Any = Missing,
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
    in_axes: Any = (Carry, 0),
    out_axes: Any = (Carry, 0),
    transform_metadata: Any = FrozenDict({}),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.scan` (same signature) that plumbs effax's handlers: the handler
    carries ride in NNX's `Carry` slot (added if the user has none), the values
    come out as one more per-step output (axis 0)."""
    if f is Missing:
        return ft.partial(
            scan, length=length, reverse=reverse, unroll=unroll,
            _split_transpose=_split_transpose, in_axes=in_axes, out_axes=out_axes,
            transform_metadata=transform_metadata, graph=graph, graph_updates=graph_updates,
        )

    @ft.wraps(f)
    def wrapper(*args: Any) -> Any:
        n = len(args)
        region = Region(f, name="effax.nnx.scan")
        # ---- in_axes: put the handler carries into the Carry slot ----
        if in_axes is Carry:
            inner_in, cin, added = (Carry,), 0, False
        elif isinstance(in_axes, tuple):
            idx = [i for i, a in enumerate(in_axes) if a is Carry]
            inner_in, cin, added = in_axes, (idx[0] if idx else None), False
        else:  # one int / None for every argument
            inner_in, cin, added = (in_axes,) * n, None, False
        if cin is None:
            inner_in, cin, added = (*inner_in, Carry), n, True
        # ---- out_axes: the carries leave through the Carry slot, the values and a
        # step marker as one more per-step output ----
        if out_axes is Carry:
            cout: Any = "all"
            inner_out: Any = (Carry, 0)
        elif isinstance(out_axes, tuple) and any(a is Carry for a in out_axes):
            cout = [i for i, a in enumerate(out_axes) if a is Carry][0]
            inner_out = (*out_axes, 0)
        else:
            cout, inner_out = None, (out_axes, Carry, 0)

        def inner(*iargs: Any) -> Any:
            if added:
                handler_carries, uargs = iargs[n], iargs[:n]
            else:
                user_carry, handler_carries = iargs[cin]
                uargs = (*iargs[:cin], user_carry, *iargs[cin + 1:])
            out, outcomes = region.run(f, handler_carries, uargs)
            carries, values = region.split(outcomes)
            extra = (values, jnp.zeros((), jnp.int8))  # (step marker: counts steps)
            if cout == "all":
                return (out, carries), extra
            if cout is None:
                return out, carries, extra
            out = list(out)
            out[cout] = (out[cout], carries)
            return (*out, extra)

        call_args = (
            (*args, region.carries)
            if added
            else (*args[:cin], (args[cin], region.carries), *args[cin + 1:])
        )
        result = nnx.scan(
            inner, length=length, reverse=reverse, unroll=unroll,
            _split_transpose=_split_transpose, in_axes=inner_in, out_axes=inner_out,
            transform_metadata=transform_metadata, graph=graph, graph_updates=graph_updates,
        )(*call_args)
        if cout == "all":
            (out, carries), (values, marker) = result
        elif cout is None:
            out, carries, (values, marker) = result
        else:
            *outs, (values, marker) = result
            outs[cout], carries = outs[cout]
            out = tuple(outs)
        steps = int(marker.shape[0])
        if reverse:
            values = [
                jax.tree.map(lambda v: jnp.flip(v, 0), v) if issubclass(type(h), Records) else v
                for h, v in zip(region.handlers, values, strict=True)
            ]
        region.absorb(carries, values, steps=steps)
        return out

    return wrapper


# ------------------------------------------------------------------------- vmap
def vmap(
    f: Any = Missing,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Any = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
    transform_metadata: Any = FrozenDict({}),
    graph: bool | None = None,
    graph_updates: bool | None = None,
    keys: str = "split",
    state: str = "shared",
) -> Any:
    """`nnx.vmap` (same signature, plus effax.vmap's `keys=`/`state=`): the handler
    carries are one more argument on the axes the policy gives them, and come out
    on the same axes; values stacked per element."""
    if f is Missing:
        return ft.partial(
            vmap, in_axes=in_axes, out_axes=out_axes, axis_name=axis_name,
            axis_size=axis_size, spmd_axis_name=spmd_axis_name,
            transform_metadata=transform_metadata, graph=graph,
            graph_updates=graph_updates, keys=keys, state=state,
        )
    _policy("effax.nnx.vmap", keys, state, ())

    @ft.wraps(f)
    def batched(*args: Any) -> Any:
        depth = _vmap_depth.get()
        name = axis_name if axis_name is not None else f"effax_vmap_{depth}"
        region = Region(f, _policy("effax.nnx.vmap", keys, state, (name,)), name="effax.nnx.vmap")

        def transform(inner: Callable[..., Any], carry_axes: Any, carries: Any) -> Any:
            axes = in_axes if isinstance(in_axes, (list, tuple)) else (in_axes,) * len(args)
            carry_axes = list(carry_axes)
            return nnx.vmap(
                inner, in_axes=(carry_axes, *axes), out_axes=(out_axes, carry_axes, 0),
                axis_name=name, axis_size=axis_size, spmd_axis_name=spmd_axis_name,
                transform_metadata=transform_metadata, graph=graph,
                graph_updates=graph_updates,
            )

        token = _vmap_depth.set(depth + 1)
        try:
            return _batched(
                region, f, transform, wrapper_name="effax.nnx.vmap", check_shared=True
            )(*args)
        finally:
            _vmap_depth.reset(token)

    return batched


# ------------------------------------------------------------------------ remat
def remat(
    f: Any = Missing,
    *,
    prevent_cse: bool = True,
    static_argnums: int | tuple[int, ...] = (),
    policy: Callable[..., bool] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.remat` (same signature): carries as a leading extra argument
    (static_argnums shifted by one), outcomes as an extra output."""
    if f is Missing:
        return ft.partial(
            remat, prevent_cse=prevent_cse, static_argnums=static_argnums, policy=policy,
            graph=graph, graph_updates=graph_updates,
        )
    statics = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @ft.wraps(f)
    def wrapper(*args: Any) -> Any:
        region = Region(f, name="effax.nnx.remat")

        def inner(handler_carries: Any, *uargs: Any) -> Any:
            out, outcomes = region.run(f, handler_carries, uargs, carry_required=False)
            return (out, *region.split(outcomes))

        out, carries, values = nnx.remat(
            inner, prevent_cse=prevent_cse, static_argnums=tuple(s + 1 for s in statics),
            policy=policy, graph=graph, graph_updates=graph_updates,
        )(region.carries, *args)
        region.absorb(carries, values, steps=1)
        return out

    return wrapper


# --------------------------------------------------------------- value_and_grad
def value_and_grad(
    f: Any = Missing,
    *,
    argnums: Any = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Any = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """`nnx.value_and_grad`: carries as a trailing non-differentiated argument
    (argnums unchanged), outcomes through `has_aux`; tap gradients as
    effax.value_and_grad (perturbations as one more differentiated argument)."""
    if f is Missing:
        return ft.partial(
            value_and_grad, argnums=argnums, has_aux=has_aux, holomorphic=holomorphic,
            allow_int=allow_int, graph=graph, graph_updates=graph_updates,
        )

    @ft.wraps(f)
    def wrapper(*args: Any) -> Any:
        n = len(args)
        region = Region(f, name="effax.nnx.value_and_grad")
        # tap gradients (`Differentiating`), as effax.value_and_grad: sized by an
        # abstract run, then one more differentiated argument (position n+1)
        takers = {j: h for j, h in enumerate(region.handlers) if issubclass(type(h), Differentiating)}
        taking = [j for j, h in takers.items() if h.differentiates()]
        layouts, eps = _perturbations(region, f, taking, args, {}) if taking else ((), ())

        def before(inner_handlers: list[Any], eps: tuple[Any, ...]) -> None:
            for j, layout, e in zip(taking, layouts, eps, strict=True):
                inner_handlers[j].perturb(e, layout)

        def inner(*iargs: Any) -> Any:
            out, outcomes = region.run(
                f, iargs[n], iargs[:n], carry_required=False,
                before=ft.partial(before, eps=iargs[n + 1]) if taking else None,
            )
            value, aux = out if has_aux else (out, None)
            return value, (aux, region.split(outcomes))

        kw: dict[str, Any] = {}
        if graph is not None:
            kw["graph"] = graph
        if graph_updates is not None:
            kw["graph_updates"] = graph_updates
        numbers = argnums
        if taking:  # (argnums may hold DiffState: append the perturbations' position)
            numbers = (*(argnums if isinstance(argnums, (tuple, list)) else (argnums,)), n + 1)
        (value, (aux, (carries, values))), grads = nnx.value_and_grad(
            inner, argnums=numbers, has_aux=True, holomorphic=holomorphic,
            allow_int=allow_int, **kw,
        )(*args, region.carries, *([eps] if taking else []))
        if taking:
            grads, cotangents = grads[:-1], grads[-1]
            grads = grads if isinstance(argnums, (tuple, list)) else grads[0]
            for j, layout, cotangent in zip(taking, layouts, cotangents, strict=True):
                got = Outcome(region.statics[j], None, values[j])
                outcome = takers[j].with_cotangents(got, layout, cotangent)
                region.statics[j], carries[j], values[j] = outcome.static, None, outcome.values
        region.absorb(carries, values, steps=1)
        return ((value, aux) if has_aux else value), grads

    return wrapper


# ------------------------------------------- cond / switch / while_loop / fori_loop
# effax's own `_branches` and `_while` already lay the handler carries out as NNX
# wants them (cond/switch: the carries are operand 0, out (out, carries, values);
# while_loop: init_val is (init_val, carries)). So the twin is effax's own wrapper
# with the primitive swapped for NNX's. Here done by swapping `effax._control.lax`
# for the call (a prototype hack, NOT thread-safe); the real change is to pass the
# primitive into `_branches` / `_while` as a parameter.
import contextlib  # noqa: E402

import effax._control as _control  # noqa: E402


class _NNXLax:
    """`jax.lax` with cond/switch/while_loop replaced by NNX's lifted ones."""

    def __init__(self, graph: bool | None, graph_updates: bool | None) -> None:
        self.kw = {k: v for k, v in (("graph", graph), ("graph_updates", graph_updates)) if v is not None}

    def __getattr__(self, name: str) -> Any:
        return getattr(jax.lax, name)

    def cond(self, pred: Any, t: Any, f: Any, *ops: Any) -> Any:
        return nnx.cond(pred, t, f, *ops, **self.kw)

    def switch(self, index: Any, branches: Any, *ops: Any) -> Any:
        return nnx.switch(index, branches, *ops, **self.kw)

    def while_loop(self, c: Any, b: Any, init: Any) -> Any:
        return nnx.while_loop(c, b, init, **self.kw)


@contextlib.contextmanager
def _nnx_primitives(graph: bool | None, graph_updates: bool | None) -> Any:
    saved = _control.lax
    _control.lax = _NNXLax(graph, graph_updates)  # type: ignore[assignment]
    try:
        yield
    finally:
        _control.lax = saved


def cond(pred: Any, true_fun: Any, false_fun: Any, *operands: Any,
         graph: bool | None = None, graph_updates: bool | None = None) -> Any:
    with _nnx_primitives(graph, graph_updates):
        return _control._branches([true_fun, false_fun], "cond", pred, *operands)


def switch(index: Any, branches: Any, *operands: Any,
           graph: bool | None = None, graph_updates: bool | None = None) -> Any:
    with _nnx_primitives(graph, graph_updates):
        return _control._branches(list(branches), "switch", index, *operands)


def while_loop(cond_fun: Any, body_fun: Any, init_val: Any, *,
               graph: bool | None = None, graph_updates: bool | None = None) -> Any:
    with _nnx_primitives(graph, graph_updates):
        return _control._while([cond_fun, body_fun], None, init_val)


def fori_loop(lower: Any, upper: Any, body_fun: Any, init_val: Any, *,
              unroll: int | bool | None = None,
              graph: bool | None = None, graph_updates: bool | None = None) -> Any:
    """Python-int bounds: the twin scan over the indices (emits stacked per step,
    key counter stays static), as effax.fori_loop does; traced bounds: while_loop."""
    try:
        lo, hi = int(lower), int(upper)
    except (TypeError, jax.errors.ConcretizationTypeError):
        def c(s: Any) -> Any:
            return s[0] < upper

        def b(s: Any) -> Any:
            return s[0] + 1, body_fun(s[0], s[1])

        return while_loop(c, b, (jnp.asarray(lower), init_val), graph=graph,
                          graph_updates=graph_updates)[1]
    return scan(
        lambda val, i: body_fun(i, val), in_axes=(Carry, 0), out_axes=Carry,
        unroll=1 if unroll is None else unroll, graph=graph, graph_updates=graph_updates,
    )(init_val, jnp.arange(lo, hi, dtype=jnp.result_type(lower, upper)))
