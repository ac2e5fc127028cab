"""Effect-aware control flow: `scan`, `fori_loop`, `while_loop`, `cond`, `switch`, `map`.

Each has its `jax.lax` namesake's signature. The handlers visible at the call are
plumbed into the body over the `Handler` protocol: their consts as loop constants,
their carries (state values, key counters) as part of the loop carry, and their
values (emits) stacked along a new leading axis, one row per step. Every wrapper is
written once against that protocol, never once per effect kind.

Keys follow the rule of ``docs/howto/randomness.md``: in a `scan` of n steps that
draws k keys a step, step i draw j uses counter ``c + i·k + j``, the same keys a
Python loop draws; afterwards
the counter advances by n·k in Python. Where the number of draws is not known at
trace time (a `while_loop`, `cond` branches that draw different numbers of keys)
the counter becomes a traced int32.

Called eagerly, each wrapper runs as the compiled program of its implementation
(`_eager`): called again with the same body and handlers of the same kinds, the
body is not traced again, as with `jax.lax`'s own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, cast, runtime_checkable

import jax
import jax.numpy as jnp
from jax import lax

from . import _eager, _trace
from ._arguments import (
    check_bool,
    check_callable,
    check_callables,
    check_count,
    check_index,
    check_traceable,
    check_unleaked,
    fori_bounds,
)
from ._boundary import describe_signature, signature
from ._effect import Effect
from ._errors import EffectTypeError, EffectUsageError
from ._plan import Plan
from ._protocol import Outcome
from ._region import Region

__all__ = [
    "JAX",
    "Primitives",
    "Records",
    "cond",
    "fori_loop",
    "map",
    "scan",
    "switch",
    "while_loop",
]

C = TypeVar("C")
X = TypeVar("X")
Y = TypeVar("Y")
R = TypeVar("R")


@runtime_checkable
class Records(Protocol):
    """A handler whose outcomes record what ran (a tap recorder), as the loops and
    branches here drive it: a reversed `scan` gives it its per-step values in the
    order the steps ran (taps in program order; other handlers get them indexed like
    `xs`, as `lax.scan` stacks them), and a `cond` / `switch` whose branches sent
    out different static outcomes lays its outcome out alike in every branch."""

    def align_branch(self, outcome: Outcome, statics: Sequence[Hashable]) -> Outcome:
        """Inside one branch (called on the handler outside the cond): this branch's
        `outcome`, from a handler rebuilt from this one, laid out so the branches'
        outputs match, given every branch's static outcome (`statics`, None for a
        branch not traced yet)."""
        ...


class Primitives(NamedTuple):
    """The primitives the bodies run in, and the wrappers' prefix in messages: JAX's,
    or Flax NNX's lifted ones (`effax.nnx`: module state carried across the bodies)."""

    prefix: str
    cond: Callable[..., Any]
    switch: Callable[..., Any]
    while_loop: Callable[..., Any]


JAX = Primitives("effax", lax.cond, lax.switch, lax.while_loop)


@_trace.api_boundary
def scan(
    f: Callable[[C, X], tuple[C, Y]],
    init: C,
    xs: X | None = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
) -> tuple[C, Y]:
    """`jax.lax.scan` that plumbs the handlers around the call through the loop.

    States are part of the carry, key streams draw the keys a Python loop would,
    and each emit site's values come out stacked along a new leading axis (indexed
    like `xs`, also with `reverse=True`).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> total = effax.State[jnp.ndarray]("total")
    >>> log = effax.Emit[jnp.ndarray]("log")
    >>> def step(carry, x):
    ...     total.set(total.get() + x)
    ...     log.emit(x * 2)
    ...     return carry + 1, x
    >>> with effax.handlers(total.init(jnp.float32(0)), log.collect()) as hs:
    ...     n, _ = effax.scan(step, 0, jnp.arange(3.0))
    >>> float(hs[total]), hs[log][0].tolist()
    (3.0, [0.0, 2.0, 4.0])

    """
    check_count(length, "length", "effax.scan", optional=True, minimum=0)
    check_callable(f, "f", "effax.scan")
    check_traceable(init, "init", "effax.scan")
    check_traceable(xs, "xs", "effax.scan")
    check_bool(reverse, "reverse", "effax.scan")
    return _eager.run(_scan, [f], (length, reverse, unroll), init, xs)  # type: ignore[no-any-return]


def _scan(fns: list[Any], options: Any, init: Any, xs: Any) -> Any:
    (f,), (length, reverse, unroll) = fns, options
    region = Region(f, name="effax.scan")

    def body(carry: Any, x: Any) -> Any:
        user_carry, handler_carries = carry
        (new_carry, y), outcomes = region.run(f, handler_carries, (user_carry, x))
        carries, values = region.split(outcomes)
        return (new_carry, carries), (y, values)

    (final, carries), (ys, values) = lax.scan(
        body, (init, region.carries), xs, length=length, reverse=reverse, unroll=unroll
    )
    steps = length if length is not None else len(jax.tree.leaves(xs)[0])
    if reverse:  # (lax.scan stacks per-step values like xs: last step first)
        values = [
            jax.tree.map(lambda v: jnp.flip(v, 0), v) if issubclass(type(h), Records) else v
            for h, v in zip(region.handlers, values, strict=True)
        ]
    region.absorb(carries, values, steps=steps)
    return final, ys


@_trace.api_boundary
def map(f: Callable[[X], Y], xs: X, *, batch_size: int | None = None) -> Y:
    """`jax.lax.map` that plumbs handlers through, as `effax.scan` does.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0):
    ...     ys = effax.map(lambda x: x + effax.random.normal(), jnp.zeros(3))
    >>> ys.shape
    (3,)

    """
    check_callable(f, "f", "effax.map")
    check_traceable(xs, "xs", "effax.map")
    check_count(batch_size, "batch_size", "effax.map", optional=True)
    if batch_size is not None:
        raise NotImplementedError(
            "effax.map(..., batch_size=...) is not supported yet: it would vmap the body, "
            "whose key policy must be chosen explicitly. Use effax.vmap inside effax.scan."
        )
    return _eager.run(_map, [f], None, xs)  # type: ignore[no-any-return]


def _map(fns: list[Any], options: None, xs: Any) -> Any:
    (f,) = fns
    _, ys = _scan([lambda _, x: (None, f(x))], (None, False, 1), None, xs)
    return ys


@_trace.api_boundary
def fori_loop(
    lower: int | jax.Array,
    upper: int | jax.Array,
    body_fun: Callable[[Any, C], C],
    init_val: C,
    *,
    unroll: int | bool | None = None,
) -> C:
    """`jax.lax.fori_loop` that plumbs handlers through.

    With Python-int bounds it is an `effax.scan` (emits are stacked per step, the
    key counter stays a Python int); with traced bounds an `effax.while_loop`.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> count = effax.State[jnp.ndarray]("count")
    >>> with count.init(jnp.int32(0)) as cell:
    ...     out = effax.fori_loop(0, 4, lambda i, c: (count.set(count.get() + i), c)[1], 0.0)
    >>> int(cell.value)
    6

    """
    bounds = fori_bounds(lower, upper, "effax.fori_loop")
    check_callable(body_fun, "body_fun", "effax.fori_loop")
    check_traceable(init_val, "init_val", "effax.fori_loop")
    if bounds is not None:
        options = (*bounds, 1 if unroll is None else unroll)
        return _eager.run(_fori, [body_fun], options, init_val)  # type: ignore[no-any-return]

    def cond_fun(state: tuple[Any, C]) -> Any:
        return state[0] < upper

    def body(state: tuple[Any, C]) -> tuple[Any, C]:
        i, value = state
        return i + 1, body_fun(i, value)

    _, final = _while([cond_fun, body], None, (jnp.asarray(lower), init_val))
    return final  # type: ignore[no-any-return]


def _fori(fns: list[Any], options: Any, init_val: Any) -> Any:
    """A fori_loop with Python-int bounds: an `effax.scan` over the indices."""
    (body_fun,), (lo, hi, dtype, unroll) = fns, options
    final, _ = _scan(
        [lambda c, i: (body_fun(i, c), None)],
        (None, False, unroll),
        init_val,
        jnp.arange(lo, hi, dtype=dtype),
    )
    return final


@_trace.api_boundary
def while_loop(cond_fun: Callable[[C], Any], body_fun: Callable[[C], C], init_val: C) -> C:
    """`jax.lax.while_loop` that plumbs handlers through.

    The trip count is not known at trace time, so key counters come out as traced
    int32, and values cannot be emitted inside the loop (there is nothing to stack
    them along): an emit raises `effax.EffectUsageError`. `cond_fun` may read effects (ask,
    get) but not change them.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> limit = effax.Ask[jnp.ndarray]("limit")
    >>> with limit.provide(jnp.float32(10)), effax.rng.seed(0) as stream:
    ...     x = effax.while_loop(lambda x: x < limit.ask(),
    ...                          lambda x: x + effax.random.uniform(), 0.0)
    >>> bool(x >= 10), int(stream.value.counter) > 0
    (True, True)

    """
    check_callable(cond_fun, "cond_fun", "effax.while_loop")
    check_callable(body_fun, "body_fun", "effax.while_loop")
    check_traceable(init_val, "init_val", "effax.while_loop")
    return _eager.run(_while, [cond_fun, body_fun], None, init_val)  # type: ignore[no-any-return]


def _while(fns: list[Any], options: None, init_val: Any, *, primitives: Primitives = JAX) -> Any:
    cond_fun, body_fun = fns
    prefix = primitives.prefix
    region = Region(fns, name=f"{prefix}.while_loop")

    def cond(carry: Any) -> Any:
        value, handler_carries = carry
        _, untouched = region.run(lambda: None, handler_carries, ())
        pred, outcomes = region.run(cond_fun, handler_carries, (value,))
        for effect, before, after in zip(region.plan.effects, untouched, outcomes, strict=True):
            same_carry = all(
                a is b
                for a, b in zip(
                    jax.tree.leaves(before.carry), jax.tree.leaves(after.carry), strict=True
                )
            )
            if before.static != after.static or not same_carry or jax.tree.leaves(after.values):
                raise EffectUsageError(
                    f"{effect!r} was changed inside {prefix}.while_loop's cond_fun. cond_fun may "
                    "read effects (ask, get) but not change them: move the update into "
                    "body_fun."
                )
        return pred

    def body(carry: Any) -> Any:
        value, handler_carries = carry
        new_value, outcomes = region.run(body_fun, handler_carries, (value,))
        emitting = region.effect_with_values([o.values for o in outcomes])
        if emitting is not None:
            raise EffectUsageError(
                f"{emitting!r} sent out values (emitted, or recorded taps) inside "
                f"{prefix}.while_loop, whose trip count is not known at trace time, so they "
                f"cannot be collected. Use {prefix}.scan or "
                f"{prefix}.fori_loop with Python-int bounds (values are stacked per step), or "
                "reduce them into a State instead."
            )
        return new_value, [o.carry for o in outcomes]

    final, carries = primitives.while_loop(cond, body, (init_val, region.carries))
    none = [None] * len(carries)
    region.absorb(carries, none, steps=None, statics=none)
    return final


def _branches(
    branches: list[Callable[..., R]], kind: str, index: Any, *ops: Any, primitives: Primitives = JAX
) -> R:
    prefix = primitives.prefix
    region = Region(branches, name=f"{prefix}.{kind}")
    statics: list[list[Any]] = [[] for _ in branches]
    structures: list[Any] = [None for _ in branches]
    # The branches' static outcomes, once a first attempt traced them all and some
    # handler lays out its outcome alike in every branch from them (a recorder of
    # taps: the sites of every branch, masked): `Records.align_branch`.
    layout: list[list[Any]] | None = None

    def make(i: int, branch: Callable[..., R]) -> Callable[..., Any]:
        def run_branch(handler_carries: Any, *ops: Any) -> Any:
            out, outcomes = region.run(branch, handler_carries, ops)
            statics[i] = [o.static for o in outcomes]
            if layout is not None:
                outcomes = [
                    o if records is None else records.align_branch(o, per_branch)
                    for records, o, per_branch in zip(
                        aligning, outcomes, zip(*layout, strict=True), strict=True
                    )
                ]
                statics[i] = [o.static for o in outcomes]
            values = [o.values for o in outcomes]
            structures[i] = [signature(v) for v in values]
            return out, [o.carry for o in outcomes], values

        return run_branch

    aligning = [cast(Records, h) if issubclass(type(h), Records) else None for h in region.handlers]

    def attempt() -> Any:
        # (new functions each attempt: JAX caches traced branches by identity)
        wrapped = [make(i, b) for i, b in enumerate(branches)]
        # Under a vmap with a batched index every branch runs and the results are
        # selected per element, so every carry comes out batched, also one that all
        # branches update the same way: compute those outside the selection. A
        # traced index under a vmap may be batched later (by the vmap around the
        # jit, checkpoint, scan or grad this cond is traced in), so it is done there
        # too (an extra trace of each branch, only where a vmap is around).
        shared = (
            _same_in_every_branch(wrapped, region.carries, ops)
            if _trace.batched_here(index)
            or (
                _trace.is_tracer(index)
                and jax.tree.leaves(region.carries)
                and _trace.batching_around()
            )
            else {}
        )
        if kind == "cond":
            result = primitives.cond(index, wrapped[0], wrapped[1], region.carries, *ops)
        else:
            result = primitives.switch(index, wrapped, region.carries, *ops)
        return result, shared

    def differ() -> bool:
        traced = all(len(s) == len(region.handlers) for s in statics)
        return traced and any(
            a and any(s[j] != statics[0][j] for s in statics) for j, a in enumerate(aligning)
        )

    try:
        (out, carries, values), shared = attempt()
    except TypeError as error:
        if differ():
            layout = [list(s) for s in statics]
            (out, carries, values), shared = attempt()
        else:
            mismatch = _emit_mismatch(region.plan, structures)
            if mismatch is not None:
                effect, described = mismatch
                raise EffectUsageError(
                    f"{effect!r} emitted different numbers or kinds of values in the "
                    f"branches of {prefix}.{kind} ({described}). Every branch must emit the "
                    "same structure, shapes and dtypes (emit a zero placeholder of the same "
                    "type in the other branch, cast with .astype, or collect into a State "
                    "instead)."
                ) from error
            raise
    else:
        if differ():
            layout = [list(s) for s in statics]
            (out, carries, values), shared = attempt()
    if shared:
        leaves, treedef = jax.tree.flatten(carries)
        carries = jax.tree.unflatten(
            treedef, [shared.get(k, leaf) for k, leaf in enumerate(leaves)]
        )
    # A static outcome survives only if every branch agrees on it (e.g. the same
    # number of keys drawn); otherwise the handler takes the traced carry.
    merged = [
        per_branch[0] if all(s == per_branch[0] for s in per_branch) else None
        for per_branch in zip(*statics, strict=True)
    ]
    region.absorb(carries, values, steps=1, statics=merged)
    return out  # type: ignore[no-any-return]


def _same_in_every_branch(
    wrapped: Sequence[Callable[..., Any]], carries: Any, operands: tuple[Any, ...]
) -> dict[int, Any]:
    """The handler carries (by flat index) that every branch computes the same way
    from the same inputs, each computed once, outside the branches."""
    args = (carries, *operands)
    traced = [jax.make_jaxpr(branch, return_shape=True)(*args) for branch in wrapped]
    _, shape = traced[0]
    n_out = len(jax.tree.leaves(shape[0]))
    flat_args = jax.tree.leaves(args)
    shared = {}
    for k in range(len(jax.tree.leaves(shape[1]))):
        programs = [_trace.output_program(closed, n_out + k) for closed, _ in traced]
        if all(p[0] == programs[0][0] for p in programs):
            _, evaluate, used = programs[0]
            shared[k] = evaluate(*(a for a, u in zip(flat_args, used, strict=True) if u))
    return shared


def _emit_mismatch(plan: Plan, structures: Sequence[Any]) -> tuple[Effect[Any], str] | None:
    """The effect whose emitted values differ between branches, and how."""
    traced = [s for s in structures if s is not None]
    for i, effect in enumerate(plan.effects):
        per_branch = [s[i] for s in traced]
        if len(set(per_branch)) > 1:
            return effect, "; ".join(
                f"branch {b}: {describe_signature(sig)}" for b, sig in enumerate(per_branch)
            )
    return None


@_trace.api_boundary
def cond(pred: Any, true_fun: Callable[..., R], false_fun: Callable[..., R], *operands: Any) -> R:
    """`jax.lax.cond` that plumbs handlers through both branches.

    Each branch sees the same handler state; the taken branch's updates come out.
    If the branches draw different numbers of keys, the key counter becomes a
    traced int32 (so later draws still match an eager `if`/`else`). Branches must
    emit the same structure of values.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> hits = effax.State[jnp.ndarray]("hits")
    >>> with hits.init(jnp.int32(0)) as cell:
    ...     for x in [1.0, -1.0, 2.0]:
    ...         _ = effax.cond(x > 0, lambda: hits.set(hits.get() + 1), lambda: None)
    >>> int(cell.value)
    2

    """
    if pred is None or isinstance(pred, (str, bytes)):
        raise EffectTypeError(
            f"effax.cond takes pred as a boolean scalar (a Python bool or a scalar array), "
            f"but got {type(pred).__name__}: {pred!r}."
        )
    check_unleaked(pred, "pred", "effax.cond")
    check_callables([true_fun, false_fun], "(true_fun, false_fun)", "effax.cond")
    check_traceable(operands, "operands", "effax.cond")
    return _eager.run(_branches, [true_fun, false_fun], "cond", pred, *operands)  # type: ignore[no-any-return]


@_trace.api_boundary
def switch(index: Any, branches: Sequence[Callable[..., R]], *operands: Any) -> R:
    """`jax.lax.switch` that plumbs handlers through every branch, as `effax.cond`.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> log = effax.Emit[jnp.ndarray]("log")
    >>> with log.collect() as collected:
    ...     effax.switch(1, [lambda: log.emit(jnp.float32(0)), lambda: log.emit(jnp.float32(1))])
    >>> float(collected.values[0])
    1.0

    """
    check_index(index, "index", "effax.switch")
    check_callables(branches, "branches", "effax.switch")
    check_traceable(operands, "operands", "effax.switch")
    return _eager.run(_branches, list(branches), "switch", index, *operands)  # type: ignore[no-any-return]
