"""Compiled programs of a handled function, one per trace environment.

A compiled handled function keeps one *program* (the transformed plumbing wrapper)
per **environment** (`_environment`): what every handler lookup made while tracing
it found.

The set of effects looked up, the *row*, is learnt by tracing (`Function.learn`).
Any trace (``jax.jit`` traces again for new shapes) that looks up an effect outside
its program's environment aborts once the user's function has returned, before
anything is compiled (`Retrace`), and the call is retried under the widened row: no
exception of effax's ever passes through user code, whose ``try``/``except`` around
a perform cannot change which program runs. Handlers visible but not plumbed are
seen inside as *stand-ins* (rebuilt from their current values), so a lookup of one
is recorded, not raised. How a call finds its program is `_callpath`'s business.
"""

from __future__ import annotations

import contextvars
import functools as ft
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import jax

from . import _context, _trace, _warmpath
from ._context import Blocked, Tracked
from ._effect import Effect
from ._environment import (
    Plan,
    Resolved,
    plumbed_keys,
    slots,
)
from ._plumb import Transform, apply_transform, normalize_transform
from ._protocol import Export, Handler, Outcome
from ._region import outcomes_of, run_inside, unsplit

__all__ = ["LOCK", "PENDING", "Function", "Pending", "Program", "Retrace"]

LOCK = threading.RLock()


# --- one program per environment ------------------------------------------------------


@jax.tree_util.register_static
class _StaticOut:
    """A pytree node with no leaves: carries a trace's output layout (what its
    handlers' outcomes were at trace time) out of every call of the cached program
    at no device cost. Interned per program, so that the warm path recognises its
    layout by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Hashable) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is _StaticOut and other.value == self.value


# Per plumbed handler: its outcome's static part, whether a carry and values came out.
Layout = tuple[tuple[Hashable, bool, bool], ...]


class Retrace(BaseException):
    """Internal: a trace looked up an effect outside its program's environment.

    Raised by the plumbing wrapper after the user's function returned (never
    through user code), so that the trace is dropped before anything is compiled;
    caught where the program was called, which retries under the widened row.
    """


class Pending(NamedTuple):
    """What the caller of a program tells its wrapper's next trace: `discover`,
    learn the row (never retrace); `replay`, a traced jaxpr that stands in for the
    body (see `Function.replay`)."""

    program: Program
    discover: bool
    replay: Callable[..., Any] | None


PENDING: contextvars.ContextVar[Pending | None] = contextvars.ContextVar(
    "effax.pending", default=None
)


class Program:
    """The transformed plumbing wrapper of one environment (`plan`).

    A call takes the plumbed handlers' slots, then `fn`'s arguments, and returns
    ``(out, outputs)``: the carries and values of the outcomes that have them. The
    first trace's layout is implied by `outputs` being a tuple; a trace with another
    layout (other shapes can draw another number of keys) returns a list that ends
    with its layout as a static node, so the common case costs no extra node.
    """

    def __init__(self, function: Function, plan: Plan) -> None:
        self.plan = plan
        self.keyed = {key[0] for key in plan}
        plumbed = plumbed_keys(plan)
        self.plumbed = frozenset(key[0] for key in plumbed)
        self.inner_plan = tuple((e, what[0], None if s is None else s[1]) for e, what, s in plumbed)
        self.slots = [slots(*what) for _, what, _ in plumbed]
        self.n_in = sum(a + b for a, b in self.slots)
        self.first: Layout | None = None
        self.layouts: dict[Layout, _StaticOut] = {}
        # generated warm paths, by (layout node, handler fields, depends on the stack)
        self.warm: dict[Any, _warmpath.Template] = {}
        self.abstract = function.abstract
        # The shardings of the plumbed carries at the first call (None: let XLA
        # choose), which the carries keep coming out with (`keep_shardings`).
        self.carry_shardings: list[Any] | None = None
        self.fn = function.transformed(self)

    def carry_positions(self) -> tuple[int, ...]:
        """The positions of the carries among the plumbed inputs."""
        positions, i = [], 0
        for has_const, has_carry in self.slots:
            i += has_const
            if has_carry:
                positions.append(i)
            i += has_carry
        return tuple(positions)

    def note_shardings(self, flat: Sequence[Any]) -> None:
        """Record the plumbed carries' shardings, once, before the first trace."""
        if self.carry_shardings is None:
            self.carry_shardings = [
                jax.tree.map(_committed_sharding, flat[i]) for i in self.carry_positions()
            ]

    def keep_shardings(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Inside a trace: constrain each carry that comes out to the sharding it
        went in with (a state must not come back resharded by XLA's choice)."""
        shardings = iter(self.carry_shardings or ())
        kept = []
        for (_, has_carry), outcome in zip(self.slots, outcomes, strict=True):
            sharding = next(shardings, None) if has_carry else None
            if sharding is not None and outcome.carry is not None:
                outcome = outcome._replace(carry=_constrain(outcome.carry, sharding))
            kept.append(outcome)
        return kept

    def outputs(self, layout: Layout, outputs: list[Any]) -> tuple[Any, ...] | list[Any]:
        """What a trace with `layout` returns (the first layout seen is implied)."""
        with LOCK:
            if self.first is None:
                self.first = layout
        if layout == self.first:
            return tuple(outputs)
        with LOCK:
            node = self.layouts.setdefault(layout, _StaticOut(layout))
        return [*outputs, node]

    def layout(self, outputs: tuple[Any, ...] | list[Any]) -> tuple[Layout, Sequence[Any]]:
        """The layout of a call's `outputs`, and the outputs without it."""
        if type(outputs) is tuple:
            assert self.first is not None
            return self.first, outputs
        return outputs[-1].value, outputs[:-1]

    def outcomes(self, outputs: tuple[Any, ...] | list[Any]) -> list[Outcome]:
        """The plumbed handlers' outcomes, from a call's `outputs`."""
        layout, parts = self.layout(outputs)
        remaining = iter(parts)
        return [
            Outcome(
                static,
                next(remaining) if has_carry else None,
                next(remaining) if has_values else None,
            )
            for static, has_carry, has_values in layout
        ]

    def pack(self, outcomes: Sequence[Outcome]) -> tuple[Any, ...] | list[Any]:
        """The `outputs` a trace returns for its handlers' `outcomes`."""
        outputs: list[Any] = []
        layout = []
        for outcome in outcomes:
            has_carry, has_values = outcome.carry is not None, _present(outcome.values)
            if has_carry:
                outputs.append(outcome.carry)
            if has_values:
                outputs.append(outcome.values)
            layout.append((outcome.static, has_carry, has_values))
        return self.outputs(tuple(layout), outputs)


def _committed_sharding(x: Any) -> Any:
    """`x`'s sharding if it was placed explicitly (a committed array), else None."""
    if isinstance(x, jax.Array) and not _trace.is_tracer(x) and x.committed:
        return (x.sharding, x.shape)
    return None


def _constrain(carry: Any, shardings: Any) -> Any:
    leaves, treedef = jax.tree.flatten(carry)
    placed = jax.tree.leaves(shardings, is_leaf=lambda s: s is None or isinstance(s, tuple))
    if len(placed) != len(leaves):
        return carry
    return jax.tree.unflatten(
        treedef,
        [
            _place(x, s[0]) if s is not None and x.shape == s[1] else x
            for x, s in zip(leaves, placed, strict=True)
        ],
    )


def _place(x: Any, sharding: Any) -> Any:
    return jax.lax.with_sharding_constraint(x, sharding)  # type: ignore[no-untyped-call]


def _present(values: Any) -> bool:
    return values is not None and not (isinstance(values, (tuple, list)) and not values)


class Function:
    """Everything compiled for one function under one transformation: the row it
    was seen to look up and a program per environment. Shared by every `handle`
    of the same function and transformation (`_shared`), so that ``effax.jit(f)``
    written inline reuses its programs as ``jax.jit(f)`` does; it holds `fn` weakly
    where it can, so that the cache does not keep `fn` alive."""

    def __init__(
        self,
        fn: Callable[..., Any],
        transform: Transform,
        own: tuple[Handler[Any], ...],
        *,
        donate_state: bool = False,
    ) -> None:
        try:
            self.fn_ref: Callable[[], Callable[..., Any] | None] = weakref.ref(fn)
        except TypeError:
            self.fn_ref = lambda: fn
        self.transform, self.abstract = _abstract(transform)
        self.donate_state = donate_state
        self.own = own
        own_effects = {h.effect for h in own}
        # The outer effects the function looks up, in a fixed order (the plan's
        # order is part of the cache key); None until the first trace.
        self.row: dict[Effect[Any], None] | None = None
        declared = getattr(fn, "__effax_row__", None)  # set by `effax.uses`
        if declared is not None:
            self.row = {e: None for e in declared if e not in own_effects}
        self.own_effects = frozenset(own_effects)
        self.programs: dict[Plan, Program] = {}

    def target(self) -> Callable[..., Any]:
        """The handled function (alive: its handled function is being called)."""
        fn = self.fn_ref()
        assert fn is not None, "effax internal error: a handled function was collected"
        return fn

    def learn(self, effects: Sequence[Effect[Any]]) -> None:
        with LOCK:
            if self.row is None:
                self.row = {}
            for effect in effects:
                if effect not in self.own_effects:
                    self.row.setdefault(effect, None)

    def program(self, plan: Plan) -> Program:
        program = self.programs.get(plan)
        if program is None:
            with LOCK:
                program = self.programs.get(plan)
                if program is None:
                    program = self.programs[plan] = Program(self, plan)
        return program

    def transformed(self, program: Program) -> Callable[..., Any]:
        """Apply the transformation to the plumbing wrapper of `program`."""
        target = self.target
        function = self

        def wrapper(*flat: Any, **kwargs: Any) -> Any:
            pending = PENDING.get()
            if pending is not None and pending.program is program and pending.replay:
                replayed = pending.replay(flat, kwargs)
                if replayed is not None:
                    return replayed
            inputs = iter(flat[: program.n_in])
            dynamic = [
                (next(inputs) if has_const else None, next(inputs) if has_carry else None)
                for has_const, has_carry in program.slots
            ]
            used: set[Effect[Any]] = set()
            missing: set[Effect[Any]] = set()
            out, inner = run_inside(
                program.inner_plan,
                dynamic,
                target(),
                flat[program.n_in :],
                kwargs,
                track=used,
                standins=_standins(program),
                recorder=missing,
            )
            outcomes = outcomes_of(
                program.inner_plan, dynamic, inner, carry_required=False, where="a compiled call"
            )
            outcomes = program.keep_shardings(outcomes)
            looked = [key[0] for key in program.plan if key[0] in used]
            looked += [e for e in used if e not in program.keyed]
            looked += [e for e in missing if e not in used]
            function.learn(looked)
            discovering = pending is not None and pending.program is program and pending.discover
            if not discovering and not program.keyed.issuperset(looked):
                raise Retrace  # this trace depends on more than its program's key
            return out, program.pack(outcomes)

        n = program.n_in
        donate = program.carry_positions() if self.donate_state else ()
        return apply_transform(
            self.transform, wrapper, self.target(), lambda o: (o, None), n, donate=donate
        )

    @staticmethod
    def replay(
        wide: Program,
        wide_exports: Sequence[Export],
        program: Program,
        resolved: Resolved,
        traced: Any,
    ) -> Callable[..., Any] | None:
        """A replay of `wide`'s traced jaxpr for the narrower `program` of `resolved`.

        The body was traced once with every reachable handler plumbed in; the
        handlers `program` leaves out were not looked up, so once the outputs that
        only they need are pruned, what is left reads none of their inputs. It is
        evaluated with the narrower program's inputs. Returns None if that does not
        hold (the narrower program then traces the body itself).
        """
        jaxpr = getattr(traced, "jaxpr", None)
        out_tree = getattr(traced, "out_tree", None)
        if jaxpr is None or out_tree is None:
            return None
        index = {key[0]: i for i, key in enumerate(plumbed_keys(wide.plan))}
        if any(h.effect not in index for h in resolved.handlers):
            return None  # a handler the wide trace saw as a stand-in only
        chosen = [index[h.effect] for h in resolved.handlers]
        if chosen != sorted(chosen):  # pragma: no cover - the row keeps the wide order
            return None
        # Which output leaves to keep: the function's, and the chosen handlers'.
        numbered = jax.tree.unflatten(out_tree, range(out_tree.num_leaves))
        outcomes = wide.outcomes(numbered[1])
        keep = set(jax.tree.leaves(numbered[0]))
        for i in chosen:
            keep.update(jax.tree.leaves((outcomes[i].carry, outcomes[i].values)))
        evaluate, used = _trace.prune(jaxpr, [i in keep for i in range(out_tree.num_leaves)])
        # Which input leaves belong to a chosen handler: they must be the only
        # handler inputs still used.
        owner = [
            i
            for i, (has, export) in enumerate(zip(wide.slots, wide_exports, strict=True))
            for _ in jax.tree.leaves(_parts(has, export))
        ]
        if any(u and owner[i] not in chosen for i, u in enumerate(used[: len(owner)])):
            return None
        in_avals = list(jaxpr.in_avals)

        def replay(flat: Sequence[Any], kwargs: dict[str, Any]) -> Any:
            n = program.n_in
            args = [
                leaf
                for leaf in jax.tree.leaves((flat[n:], kwargs))
                if isinstance(leaf, jax.core.Tracer)
            ]
            slot_leaves = iter(jax.tree.leaves(flat[:n]))
            leaves = [next(slot_leaves) if owner[i] in chosen else None for i in range(len(owner))]
            leaves += args
            if len(leaves) != len(in_avals) or any(
                u and jax.typeof(leaf) != aval
                for leaf, aval, u in zip(leaves, in_avals, used, strict=True)
            ):
                return None
            results = iter(evaluate(*(leaf for leaf, u in zip(leaves, used, strict=True) if u)))
            outs = [next(results) if i in keep else None for i in range(out_tree.num_leaves)]
            out, outputs = jax.tree.unflatten(out_tree, outs)
            outcomes = wide.outcomes(outputs)
            return out, program.pack([outcomes[i] for i in chosen])

        return replay


def _parts(has: tuple[bool, bool], export: Export) -> list[Any]:
    return ([export.const] if has[0] else []) + ([export.carry] if has[1] else [])


def _standins(program: Program) -> list[Handler[Any]]:
    """Handlers visible at the call but not plumbed into `program`, rebuilt from
    their current values: performing one inside records the lookup (the trace is
    then dropped and the effect plumbed in) without raising through user code, and
    changes nothing outside."""
    standins = []
    for effect, (handler, ref) in _context.current_stack().items():
        if effect in program.plumbed or isinstance(ref, Blocked):
            continue
        if type(ref) is Tracked:
            ref = ref.ref
        if _trace.stagings_between(ref) not in (0, 1) or unsplit(handler, ref):
            continue  # behind the caller's own staging, or a raw vmap: lookups raise
        export = handler.export()
        standins.append(type(handler).rebuild(effect, export.static, export.const, export.carry))
    return standins


def _abstract(transform: Transform) -> tuple[Transform, bool]:
    """`transform` as a decorator, and whether its results are abstract.

    ``jax.eval_shape(fn, *args)`` is not a decorator: it is applied to the wrapper
    here, and its (abstract) outcomes are never absorbed.
    """
    transform = normalize_transform(transform)
    if transform is jax.eval_shape:
        return (lambda f: ft.partial(jax.eval_shape, f)), True
    return transform, False
