"""Effect-aware transformations: `vmap`, `checkpoint`, `shard_map` (`grad` and
`value_and_grad` are `_grad`).

Each has its JAX namesake's signature (plus keyword-only policies) and plumbs the
handlers around the call over the `Handler` protocol, like `effax.handle`:
state updates, key advances and emitted values come out alongside.
"""

from __future__ import annotations

import contextvars
import functools as ft
import operator
import re
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal, ParamSpec, TypeVar

import jax
import numpy as np
from jax.sharding import PartitionSpec

from . import _trace
from ._arguments import check_callable, check_unleaked
from ._errors import EffectLeakError, EffectTypeError, EffectUsageError
from ._handle import handle
from ._protocol import BatchPolicy
from ._region import Region

__all__ = ["checkpoint", "shard_map", "vmap"]

P = ParamSpec("P")
R = TypeVar("R")

# How many effax.vmap calls enclose this point of the program: an unnamed effax.vmap
# names its axis by its depth, so nested ones differ while the same vmap called again
# keeps its name (JAX caches batched programs by axis name; a fresh name per call
# would compile every jitted operation inside anew on every eager call).
_vmap_depth = contextvars.ContextVar[int]("effax_vmap_depth", default=0)
# PartitionSpec's constructor is untyped on some supported JAX versions.
_spec: Callable[..., Any] = PartitionSpec


_POLICY_HINT = (
    "choose the batched policy (keys='split' for key streams, state='batched' for "
    "states) or keep the update independent of the batch"
)


def _policy(wrapper: str, keys: Any, state: Any, axis_names: tuple[Hashable, ...]) -> BatchPolicy:
    """The `BatchPolicy` of `wrapper`'s `keys=` and `state=`, checked."""
    for option, value, allowed in (
        ("keys", keys, ("split", "shared")),
        ("state", state, ("shared", "batched")),
    ):
        if not isinstance(value, str) or value not in allowed:
            raise EffectUsageError(
                f"{wrapper}({option}={value!r}): {option} must be one of "
                f"{' or '.join(repr(a) for a in allowed)}."
            )
    return BatchPolicy(keys=keys, state=state, axis_names=axis_names)


def _batched(
    region: Region,
    fun: Callable[..., Any],
    transform: Callable[[Callable[..., Any], Sequence[int | None], Sequence[Any]], Any],
    *,
    wrapper_name: str,
    check_shared: bool,
) -> Callable[..., Any]:
    """Shared by `vmap` and `shard_map`: run `fun` under handlers with batch axes.

    `transform(inner, carry_axes, carries)` maps `inner(carries, *args)` over the
    batch, returning `(out, carries, values)` with the carries on `carry_axes` and
    the values stacked along a new leading axis.
    """
    call_ref = _trace.current_trace_ref()

    def inner(carries: Any, *args: Any) -> Any:
        out, outcomes = region.run(fun, carries, args, carry_required=False)
        if check_shared:
            for effect, outcome, axis in zip(
                region.plan.effects, outcomes, region.carry_axes, strict=True
            ):
                leaves = jax.tree.leaves(outcome.carry)
                # (a tracer of this vmap that it does not map is the same everywhere)
                if axis is None and _trace.foreign_tracers(leaves, call_ref, unmapped=True):
                    raise EffectLeakError(
                        f"{effect!r} was updated with a value that differs across the batch "
                        f"of {wrapper_name}, but its policy shares one value across the "
                        f"batch: {_POLICY_HINT}."
                    )
        return out, *region.split(outcomes)

    for effect, axis, carry in zip(
        region.plan.effects, region.carry_axes, region.carries, strict=True
    ):
        if axis is not None and any(np.ndim(leaf) == 0 for leaf in jax.tree.leaves(carry)):
            raise EffectUsageError(
                f"{wrapper_name}(state='batched') maps every State along its leading axis, "
                f"but {effect!r} holds a scalar (no batch axis). Initialise it with one row "
                "per element (e.g. `jnp.stack([x] * batch_size)`), or use state='shared' "
                "for one value shared by the whole batch."
            )
    mapped = transform(inner, region.carry_axes, region.carries)

    def call(*args: Any) -> Any:
        try:
            out, carries, values = mapped(region.carries, *args)
        except ValueError as error:
            raise _explain_sizes(region, error, wrapper_name)  # noqa: B904 (chained inside)
        region.absorb(carries, values, steps=1)
        return out

    return call


_CARRY_PATH = re.compile(r"carries\[(\d+)\]")


def _explain_sizes(region: Region, error: ValueError, wrapper_name: str) -> BaseException:
    """Name the states of a batched region in JAX's error about batch sizes."""
    text = str(error)
    indices = {int(i) for i in _CARRY_PATH.findall(text)}
    plumbed = region.plan.effects
    effects = [plumbed[i] for i in sorted(indices) if i < len(plumbed)]
    if not effects:
        return error
    text = _CARRY_PATH.sub(lambda m: repr(plumbed[int(m.group(1))]), text)
    new = EffectUsageError(
        f"{wrapper_name}(state='batched') maps every State along its leading axis, so "
        f"{', '.join(repr(e) for e in effects)} must have a leading axis of the batch size "
        f"(one value per element): {text}\nInitialise the state with one row per element "
        "(e.g. `jnp.stack([x] * batch_size)`), or use state='shared'."
    )
    new.__cause__ = error
    return new


def _check_grown(region: Region, carries: Sequence[Any], out: Sequence[Any]) -> None:
    """Inside `effax.shard_map`: refuse a per-device carry that gained entries (a
    `StateDict` entry created inside; any other change of structure was refused as
    the region's outcome left it): its leading axis would have to be split over
    devices, and a value made per device has none."""
    for effect, axis, before, after in zip(
        region.plan.effects, region.carry_axes, carries, out, strict=True
    ):
        if axis is not None and not operator.eq(
            jax.tree.structure(before), jax.tree.structure(after)
        ):
            raise EffectUsageError(
                f"{effect!r} gained entries inside effax.shard_map(state='batched'), where "
                "every state is split over the devices along its leading axis, which a "
                "value made on one device does not have. Create the entries before the "
                "shard_map (with one row per device), or use state='shared'."
            )


def _check_replicated(region: Region, carries: Sequence[Any], names: tuple[Hashable, ...]) -> None:
    """Inside `effax.shard_map`: refuse a shared (replicated) carry that varies
    across devices, naming its effect (JAX would name an internal function)."""
    for effect, axis, carry in zip(region.plan.effects, region.carry_axes, carries, strict=True):
        if axis is not None:
            continue
        varying = {a for leaf in jax.tree.leaves(carry) for a in _trace.varying_axes(leaf)}
        if varying:
            raise EffectUsageError(
                f"{effect!r} was updated with a value that differs across the devices of "
                f"effax.shard_map (it varies over mesh axes {sorted(varying, key=str)}), but "
                "state='shared' keeps one replicated value. Reduce the update over those "
                "axes first (lax.pmean / lax.psum), or use state='batched' to keep one value "
                "per device along the leading axis."
            )


def vmap(
    fun: Callable[P, R],
    in_axes: int | Sequence[Any] | None = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    spmd_axis_name: Hashable | tuple[Hashable, ...] | None = None,
    *,
    keys: Literal["split", "shared"] = "split",
    state: Literal["shared", "batched"] = "shared",
) -> Callable[P, R]:
    """`jax.vmap` that plumbs the handlers around the call through, by explicit policy.

    - `keys="split"` (default): the key stream draws one key ``K`` and batch element
      ``b`` draws from a stream seeded with ``fold_in(K, b)``; `keys="shared"`: every
      element draws the keys the unbatched program would.
    - `state="shared"` (default): states are broadcast, and writing a value that
      differs across the batch raises `EffectLeakError`; `state="batched"`: every
      state carries the batch along its leading axis.

    Emitted values come out stacked along a new leading axis, one row per element.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> with effax.rng.seed(0) as stream:
    ...     xs = effax.vmap(lambda x: x + effax.random.normal())(jnp.zeros(3))
    >>> bool(xs[0] != xs[1]), stream.value.counter
    (True, 1)

    """
    check_callable(fun, "fun", "effax.vmap")
    _policy("effax.vmap", keys, state, ())  # options checked when the wrapper is made

    @_trace.api_boundary
    @ft.wraps(fun)
    def batched(*args: Any) -> Any:
        check_unleaked(args, "its arguments", "effax.vmap")
        options = {"axis_size": axis_size, "spmd_axis_name": spmd_axis_name}
        batching = (jax.vmap, in_axes, out_axes, axis_name, options)
        return _vmap_call(fun, args, batching, keys, state, "effax.vmap")

    return batched  # type: ignore[return-value]


def _vmap_call(
    fun: Callable[..., Any],
    args: tuple[Any, ...],
    batching: tuple[Callable[..., Any], Any, Any, Hashable | None, dict[str, Any]],
    keys: Any,
    state: Any,
    wrapper_name: str,
) -> Any:
    """One call of a batching wrapper (`effax.vmap`, `effax.nnx.vmap`): `batching` is
    `(vmap, in_axes, out_axes, axis_name, options)`, with JAX's or Flax NNX's `vmap`;
    the handler carries are one more argument, on the axes the policy gives them."""
    vmap, in_axes, out_axes, axis_name, options = batching
    depth = _vmap_depth.get()
    name = axis_name if axis_name is not None else f"effax_vmap_{depth}"
    region = Region(fun, _policy(wrapper_name, keys, state, (name,)), name=wrapper_name)

    def transform(inner: Callable[..., Any], carry_axes: Any, carries: Any) -> Any:
        axes = in_axes if isinstance(in_axes, (list, tuple)) else (in_axes,) * len(args)
        return vmap(
            inner,
            in_axes=(carry_axes, *axes),
            out_axes=(out_axes, carry_axes, 0),
            axis_name=name,
            **options,
        )

    token = _vmap_depth.set(depth + 1)
    try:
        return _batched(region, fun, transform, wrapper_name=wrapper_name, check_shared=True)(*args)
    finally:
        _vmap_depth.reset(token)


def checkpoint(
    fun: Callable[P, R],
    *,
    prevent_cse: bool = True,
    policy: Callable[..., bool] | None = None,
    static_argnums: int | tuple[int, ...] = (),
) -> Callable[P, R]:
    """`jax.checkpoint` (remat) that plumbs handlers through, like `effax.handle`.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[jnp.ndarray]("scale")
    >>> f = effax.checkpoint(lambda x: jnp.sin(x) * scale.ask())
    >>> with scale.provide(jnp.float32(2)):
    ...     float(effax.grad(f)(0.0))
    2.0

    """
    check_callable(fun, "fun", "effax.checkpoint")
    return handle(
        fun,
        transform=ft.partial(
            jax.checkpoint, prevent_cse=prevent_cse, policy=policy, static_argnums=static_argnums
        ),
    )


def shard_map(
    f: Callable[P, R],
    *,
    mesh: Any,
    in_specs: Any,
    out_specs: Any,
    axis_names: frozenset[Hashable] | None = None,
    check_vma: bool = True,
    keys: Literal["split", "shared"] = "split",
    state: Literal["shared", "batched"] = "shared",
) -> Callable[P, R]:
    """`jax.shard_map` that plumbs the handlers around the call through.

    Handler consts and carries are replicated on every device (``PartitionSpec()``),
    and each device draws distinct keys: with `keys="split"` (default) the stream
    draws one key ``K`` and device ``d`` (its linear index over the mesh axes) uses a
    stream seeded with ``fold_in(K, d)``; `keys="shared"` draws the same keys
    everywhere. States must stay replicated (`state="shared"`: reduce updates with
    ``lax.pmean``/``psum``) or be split along their leading axis over all mesh axes
    (`state="batched"`). Emitted values come out stacked per device along a new
    leading axis.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> from jax.sharding import PartitionSpec as P
    >>> mesh = jax.sharding.Mesh(jax.devices()[:1], ("data",))
    >>> total = effax.State[jnp.ndarray]("total")
    >>> def step(x):
    ...     total.set(total.get() + jax.lax.psum(jnp.sum(x), "data"))
    ...     return x * 2
    >>> with total.init(jnp.float32(0)) as cell:
    ...     y = effax.shard_map(step, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(
    ...         jnp.arange(4.0))
    >>> float(cell.value)
    6.0

    """
    check_callable(f, "f", "effax.shard_map")
    if not isinstance(getattr(mesh, "axis_names", None), tuple):
        raise EffectTypeError(
            f"effax.shard_map takes mesh= as a jax.sharding.Mesh, but got "
            f"{type(mesh).__name__}: {mesh!r}."
        )
    names = tuple(mesh.axis_names if axis_names is None else sorted(axis_names, key=str))
    policy = _policy("effax.shard_map", keys, state, names)

    @_trace.api_boundary
    @ft.wraps(f)
    def sharded(*args: Any) -> Any:
        region = Region(f, policy, name="effax.shard_map", refs=False)

        def transform(inner: Callable[..., Any], carry_axes: Any, carries: Any) -> Any:
            def spec(axis: int | None, tree: Any) -> Any:
                # one spec for the whole carry (a prefix): a dict carry may gain
                # entries in the region (a `StateDict`)
                return None if tree is None else _spec() if axis is None else _spec(names)

            carry_specs = [spec(a, c) for a, c in zip(carry_axes, carries, strict=True)]
            specs = in_specs if isinstance(in_specs, tuple) else (in_specs,)

            def per_device(carries: Any, *args: Any) -> Any:
                out, out_carries, values = inner(carries, *args)
                _check_grown(region, carries, out_carries)
                _check_replicated(region, out_carries, names)
                # stack values per device: a new leading axis of size 1 here
                values = jax.tree.map(lambda v: v[None], values)
                return out, out_carries, values

            kwargs: dict[str, Any] = {}
            if axis_names is not None:
                kwargs["axis_names"] = axis_names
            return jax.shard_map(
                per_device,
                mesh=mesh,
                in_specs=(carry_specs, *specs),
                out_specs=(out_specs, carry_specs, _spec(names)),
                check_vma=check_vma,
                **kwargs,
            )

        # Inside shard_map every value is a per-device tracer; replication of shared
        # states is checked by shard_map itself (check_vma).
        return _batched(region, f, transform, wrapper_name="effax.shard_map", check_shared=False)(
            *args
        )

    return sharded  # type: ignore[return-value]
