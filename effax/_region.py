"""Running a function inside a traced region under rebuilt handlers.

`handle`, the control-flow wrappers and the transformation wrappers all cross a
boundary the same way, over the `Handler` protocol:

1. the handlers visible at the call that may be plumbed are picked
   (`outer_handlers` here; `_callpath.resolve` for `handle`);
2. each is asked for its `Export` (static / const / carry);
3. inside the region, `run_inside` rebuilds them and runs the user's function;
4. `outcomes_of` collects each inner handler's `Outcome`, checking that carries
   kept their types;
5. after the region, the caller absorbs the outcomes into the outer handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from . import _context, _trace
from ._ask import Ask
from ._context import Blocked, Entry, Tracked
from ._effect import Effect, check_write
from ._errors import OWN_WRITE_LEAK, EffectLeakError, EffectTypeError, StateTypeError
from ._protocol import BatchPolicy, Export, Handler, Outcome, home_of

__all__ = [
    "Home",
    "Plan",
    "Region",
    "Uncompilable",
    "absorb_all",
    "check_carry",
    "check_writes",
    "enter_inside",
    "note_used",
    "outcomes_of",
    "outer_handlers",
    "outer_homes",
    "run_inside",
    "unplumbable",
    "unsplit",
]

R = TypeVar("R")

# What identifies a region's handlers at trace time: for each, its effect, its
# class (whose `rebuild` makes the inner handler) and its static export.
Plan = tuple[tuple[Effect[Any], type[Handler[Any]], Hashable], ...]


def outer_handlers(
    stack: _context.Stack,
    *,
    skip: Iterable[Effect[Any]] = (),
    row: Iterable[Effect[Any]] | None = None,
) -> list[Handler[Any]]:
    """The handlers around the call that a region may plumb in.

    With `row` (the effects the region is known to perform), only those, in that
    order; an effect of the row whose handler cannot be read here raises the error
    that explains why. Without it, every handler reachable from here, in stack
    order. Handlers hidden by a `Blocked` marker are never plumbed.
    """
    ref = _trace.current_trace_ref()
    skip = frozenset(skip)
    handlers: list[Handler[Any]] = []
    # `row` may grow while another thread traces: iterate over a snapshot.
    for effect in stack if row is None else tuple(row):
        if effect in skip:
            continue
        entry = stack.get(effect)
        if entry is None:
            continue
        handler, entry_ref = entry
        if entry_ref is not ref:
            if isinstance(entry_ref, Blocked):
                continue
            if type(entry_ref) is Tracked:
                if row is not None:
                    entry_ref.used.add(effect)  # the enclosing region performs it too
                entry_ref = entry_ref.ref
            if entry_ref is not ref and (
                _trace.reachability(entry_ref) != "ok" or unsplit(handler, entry_ref)
            ):
                if row is not None:
                    effect.handler()  # raises the error that explains why
                continue
        handlers.append(handler)
    return handlers


_INPUT_TYPES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def _uncompilable_leaf(tree: Any) -> Any:
    """A leaf of `tree` that cannot cross a traced region's boundary (not an array
    or a Python number), or None."""
    for leaf in jax.tree.leaves(tree):
        if not isinstance(leaf, _INPUT_TYPES):
            return leaf
    return None


def unplumbable(effect: Effect[Any], export: Export, where: str, *, keyed: bool) -> str | None:
    """Why `effect`'s handler, exporting `export`, cannot be plumbed into `where`
    (a message), or None. With `keyed`, its static export must also be hashable
    (it is part of a compilation cache key)."""
    leaf = _uncompilable_leaf((export.const, export.carry))
    if leaf is not None:
        return uncompilable_message(effect, leaf, where)
    if keyed:
        try:
            hash(export.static)
        except TypeError:
            return (
                f"The handler of {effect!r} exports a static value of type "
                f"{type(export.static).__name__}, which is not hashable, so it cannot be "
                f"part of the cache key of {where}. Make it hashable (a tuple, a frozen "
                "dataclass), or export it as a const (an array) instead."
            )
    return None


def uncompilable_message(effect: Effect[Any], leaf: Any, where: str) -> str:
    """Why `effect`'s handler, holding `leaf`, cannot be plumbed into `where`."""
    fix = (
        f"Declare the effect with static=True (`Ask[...]({effect.name!r}, static=True)`) "
        "to pass a hashable Python value as part of the cache key, or provide an array."
        if isinstance(effect, Ask)
        else f"Hold an array (or a Python number) in it, or use it outside {where}."
    )
    return (
        f"{effect!r} holds a {type(leaf).__name__}, which cannot cross {where}: the "
        "values a traced function or loop body reads from its handlers (an Ask's value, a "
        f"State, a key stream) are passed in as arrays or Python numbers. {fix}"
    )


class Uncompilable(Blocked):
    """Marks a handler that cannot enter a region: performing its effect inside
    raises `EffectTypeError` with `message` (unused, it is no obstacle)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def raise_for(self, effect: Effect[Any]) -> NoReturn:
        raise EffectTypeError(self.message)


def unsplit(handler: Handler[Any], ref: _trace.TraceRef) -> bool:
    """Whether `handler` must give each batch element its own result but a raw
    ``jax.vmap`` lies between its trace `ref` and here (so it is not plumbed)."""
    return handler.batch_distinct and _trace.batching_between(ref)


def note_used(stack: _context.Stack, used: Iterable[Effect[Any]]) -> None:
    """Tell enclosing traced regions that effects they plumbed were performed."""
    for effect in used:
        entry = stack.get(effect)
        if entry is not None and type(entry[1]) is Tracked:
            entry[1].used.add(effect)


def _signature(tree: Any) -> tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((jnp.shape(x), jnp.result_type(x)) for x in leaves)


def check_carry(effect: Effect[Any], before: Any, after: Any) -> None:
    """Raise `StateTypeError` if a carry changed structure, shape or dtype."""
    if after is None or before is None:
        return
    sig_before, sig_after = _signature(before), _signature(after)
    if sig_before != sig_after:
        raise StateTypeError(
            f"{effect!r} changed its type across a traced boundary: it entered as "
            f"{_describe(sig_before)} and left as {_describe(sig_after)}. A state must "
            "keep its pytree structure, shapes and dtypes; cast the new value (e.g. "
            "`x.astype(old.dtype)`) or initialise the state with the final type."
        )


def _describe(sig: tuple[Any, tuple[tuple[tuple[int, ...], Any], ...]]) -> str:
    treedef, leaves = sig
    # key dtypes (`key<fry>`) are not numpy dtypes: name them as JAX prints them
    avals = ", ".join(f"{_dtype_name(d)}{list(s)}" for s, d in leaves)
    return f"{treedef} with leaves [{avals}]"


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", None) or jnp.dtype(dtype).name)


def run_inside(
    plan: Plan,
    dynamic: Sequence[tuple[Any, Any]],
    fn: Callable[..., R],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    track: set[Effect[Any]] | None = None,
    standins: Sequence[Handler[Any]] = (),
    recorder: set[Effect[Any]] | None = None,
    blocked: Mapping[Effect[Any], Entry] | None = None,
) -> tuple[R, list[Handler[Any]]]:
    """Rebuild the plumbed handlers inside a region, run `fn` under them.

    Returns `fn`'s result and the inner handlers. With `track`, the inner handlers
    (and the `standins`: handlers visible outside but not plumbed, rebuilt from
    their current values so that performing them changes nothing outside) record
    into it which of them were performed; with `recorder`, lookups that find no
    usable handler are recorded there.
    """
    token, inner = enter_inside(
        plan, dynamic, track=track, standins=standins, recorder=recorder, blocked=blocked
    )
    try:
        out = fn(*args, **kwargs)
    finally:
        _context.pop(token)
    return out, inner


def enter_inside(
    plan: Plan,
    dynamic: Sequence[tuple[Any, Any]],
    *,
    track: set[Effect[Any]] | None = None,
    standins: Sequence[Handler[Any]] = (),
    recorder: set[Effect[Any]] | None = None,
    blocked: Mapping[Effect[Any], Entry] | None = None,
) -> tuple[Any, list[Handler[Any]]]:
    """`run_inside` without the call: install the rebuilt handlers (and the
    `blocked` entries, which hide handlers that cannot enter); returns the token
    that `_context.pop` takes to remove them, and the inner handlers."""
    inner = tuple(
        cls.rebuild(effect, static, const, carry)
        for (effect, cls, static), (const, carry) in zip(plan, dynamic, strict=True)
    )
    ref = (
        _trace.current_trace_ref() if track is None else Tracked(_trace.current_trace_ref(), track)
    )
    entries = dict(blocked or {})
    entries.update({handler.effect: (handler, ref) for handler in (*standins, *inner)})
    return _context.push_entries(entries, recorder=recorder), list(inner)


def outcomes_of(
    plan: Plan,
    dynamic: Sequence[tuple[Any, Any]],
    inner: Sequence[Handler[Any]],
    *,
    carry_required: bool,
    where: str | None = None,
) -> list[Outcome]:
    """What the inner handlers send out; checked to leave `where` (a traced region,
    named for messages) if given."""
    results = []
    for (effect, _, _), (_, carry), handler in zip(plan, dynamic, inner, strict=True):
        result = handler.outcome(carry_required=carry_required)
        leaf = None if where is None else _uncompilable_leaf((result.carry, result.values))
        if leaf is not None:
            raise EffectTypeError(
                f"{effect!r} was given a {type(leaf).__name__} inside {where}, which "
                "cannot leave it: what a traced function or loop body sends out "
                "through its handlers (a State's new value, emitted values) must be "
                f"arrays or Python numbers. Convert it to an array, or perform "
                f"{effect!r} outside {where}."
            )
        check_carry(effect, carry, result.carry)
        results.append(result)
    return results


class Home(NamedTuple):
    """Where a plumbed handler was installed, when that is not the current trace."""

    trace: _trace.TraceRef
    own: bool  # passed to `handle` (not found on the stack)


def outer_homes(stack: _context.Stack, handlers: Sequence[Handler[Any]]) -> list[Home | None]:
    """For each handler, where it was installed if that is not the current trace
    (a raw ``jax.grad`` or ``jax.vmap`` runs around the call), else None. What a
    call writes into such a handler must hold no tracer of the current trace."""
    trace = _trace.current_trace_ref()
    homes: list[Home | None] = []
    for handler in handlers:
        entry = stack.get(handler.effect)
        if entry is not None and entry[0] is handler:
            home, own = entry[1], False
        else:
            home, own = home_of(handler), True
        if type(home) is Tracked:
            home = home.ref
        homes.append(None if home is None or home is trace else Home(home, own))
    return homes


def check_writes(
    handlers: Sequence[Handler[Any]], outcomes: Sequence[Outcome], homes: Sequence[Home | None]
) -> None:
    """Refuse (before anything is absorbed) outcomes that would leave a tracer in a
    handler installed under an outer trace: it could not outlive its trace."""
    for handler, outcome, home in zip(handlers, outcomes, homes, strict=True):
        if home is None:
            continue
        written = (outcome.carry, outcome.values)
        if not home.own:
            check_write(handler.effect, written, home.trace)
        elif _trace.foreign_tracers(jax.tree.leaves(written), home.trace):
            raise EffectLeakError(OWN_WRITE_LEAK.format(effect=handler.effect))


def absorb_all(
    stack: _context.Stack,
    handlers: Sequence[Handler[Any]],
    outcomes: Sequence[Outcome],
    *,
    steps: int | None,
    policy: BatchPolicy | None = None,
) -> list[Home | None]:
    """Write outcomes back into the handlers around a region (`stack` is where it
    was called): every write is checked first (`check_writes`), so a refused one
    leaves every handler as it was; empty outcomes are skipped. Returns the
    handlers' `outer_homes`."""
    homes = outer_homes(stack, handlers)
    check_writes(handlers, outcomes, homes)
    for handler, outcome in zip(handlers, outcomes, strict=True):
        if policy is not None:
            handler.batch_absorb(outcome, policy)
        elif outcome.static is not None or outcome.carry is not None or outcome.values is not None:
            handler.absorb(outcome, steps=steps)
    return homes


def _strong(tree: Any) -> Any:
    """Strip weak types from carry leaves, so that a loop's carry keeps its type."""

    def leaf(x: Any) -> Any:
        if isinstance(x, (bool, int, float, complex)):
            return jnp.asarray(x, dtype=jnp.result_type(x))
        if getattr(x, "weak_type", False):
            return x.astype(x.dtype)
        return x

    return jax.tree.map(leaf, tree)


class Region:
    """The handlers visible at a control-flow call, plumbed into its bodies."""

    def __init__(
        self,
        fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: BatchPolicy | None = None,
        *,
        name: str,
    ) -> None:
        """`name` is the wrapper's, for messages (e.g. ``"effax.scan"``)."""
        self.name = name
        self.stack = _context.current_stack()
        fns = [fn] if callable(fn) else list(fn)
        # Declared rows (`effax.uses`) narrow what is plumbed; otherwise every
        # reachable handler is, since the bodies are traced only once, inside.
        rows = [getattr(f, "__effax_row__", None) for f in fns]
        row = None
        if all(r is not None for r in rows):
            row = list(dict.fromkeys(e for r in rows if r is not None for e in r))
        handlers = outer_handlers(self.stack, row=row)
        self.policy = policy
        exports_axes: list[tuple[Export, int | None]]
        if policy is None:
            exports_axes = [(h.export(), None) for h in handlers]
        else:
            exports_axes = [h.batch_export(policy) for h in handlers]
        # Handlers whose values cannot be inputs stay outside; performing one inside
        # raises an error naming it.
        self.blocked: dict[Effect[Any], Entry] = {}
        self.handlers: list[Handler[Any]] = []
        exports: list[Export] = []
        self.carry_axes: list[int | None] = []
        for handler, (export, axis) in zip(handlers, exports_axes, strict=True):
            why = unplumbable(handler.effect, export, name, keyed=False)
            if why is None:
                self.handlers.append(handler)
                exports.append(export)
                self.carry_axes.append(axis)
            else:
                self.blocked[handler.effect] = (handler, Uncompilable(why))
        self.plan: Plan = tuple(
            (h.effect, type(h), e.static) for h, e in zip(self.handlers, exports, strict=True)
        )
        self.consts = [e.const for e in exports]
        self.carries = [_strong(e.carry) for e in exports]
        self.used: set[Effect[Any]] = set()
        self.statics: list[Any] = [None] * len(self.handlers)
        if policy is not None:
            # A handler that absorbs a batched region its own way (a key stream
            # draws the key it splits) is changed by the region whether or not the
            # body performs it: the region performs it.
            self.used.update(
                h.effect for h in self.handlers if type(h).batch_absorb is not Handler.batch_absorb
            )

    def run(
        self,
        fn: Callable[..., R],
        carries: Sequence[Any],
        args: Sequence[Any],
        kwargs: dict[str, Any] | None = None,
        *,
        consts: Sequence[Any] | None = None,
        carry_required: bool = True,
    ) -> tuple[R, list[Outcome]]:
        """Inside a body: rebuild the handlers from `carries`, run `fn(*args)`."""
        consts = self.consts if consts is None else consts
        dynamic = list(zip(consts, carries, strict=True))
        out, inner = run_inside(
            self.plan, dynamic, fn, args, kwargs or {}, track=self.used, blocked=self.blocked
        )
        return out, outcomes_of(
            self.plan, dynamic, inner, carry_required=carry_required, where=self.name
        )

    def split(self, outcomes: Sequence[Outcome]) -> tuple[list[Any], list[Any]]:
        """Inside a body: keep the outcomes' static parts (known at trace time), and
        return their carries and values, which leave the body as its outputs."""
        self.statics = [o.static for o in outcomes]
        return [o.carry for o in outcomes], [o.values for o in outcomes]

    def absorb(
        self,
        carries: Sequence[Any],
        values: Sequence[Any],
        *,
        steps: int | None,
        statics: Sequence[Any] | None = None,
    ) -> None:
        """After the region: write what its body's handlers sent out (the static
        parts kept by `split`, unless given) back into the handlers around it."""
        statics = self.statics if statics is None else statics
        if steps == 0:  # a loop that ran no step emitted nothing, as a Python loop
            values = [None] * len(values)
        outcomes = [Outcome(*o) for o in zip(statics, carries, values, strict=True)]
        note_used(self.stack, self.used)
        absorb_all(self.stack, self.handlers, outcomes, steps=steps, policy=self.policy)

    def effect_with_values(self, values: Sequence[Any]) -> Effect[Any] | None:
        for (effect, _, _), value in zip(self.plan, values, strict=True):
            if jax.tree.leaves(value):
                return effect
        return None
