"""`Region`: the handlers visible at a control-flow or batching call, plumbed
into its bodies.

Every control-flow wrapper (`scan`, `while_loop`, `cond`, ...) and every
transformation wrapper (`grad`, `vmap`, `checkpoint`, `shard_map`) crosses its
boundary through one `Region`: it picks the handlers to plumb (`_visible`; a
declared row narrows them), exports them, hides those that cannot enter
(`_boundary`), rebuilds them inside each body (`_inside`) and writes what the
bodies sent out back into the handlers around the call (`_writeback`).

A `jax.Ref` a handler holds crosses by closure (JAX lets a body close over a ref,
not carry one): its consts are closed over anyway, and its carries are `pin`ned.
A write that JAX refuses (into a closed-over ref under vmap, of a differentiated
value under grad) raises `EffectUsageError` naming the handlers holding refs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax

from . import _context
from ._boundary import (
    Uncompilable,
    check_module_updates,
    is_ref,
    module_values,
    pin,
    ref_refusal,
    strong,
    unpin,
    unplumbable,
)
from ._context import Blocked, Entry
from ._effect import Effect, declared_row
from ._errors import EffectUsageError
from ._inside import outcomes_of, passed_through, run_inside
from ._intercept import Chain
from ._plan import Plan
from ._protocol import BatchPolicy, Export, Handler, Outcome
from ._visible import outer_handlers
from ._writeback import absorb_all

__all__ = ["Region"]

R = TypeVar("R")


class Region:
    """The handlers visible at a control-flow call, plumbed into its bodies."""

    def __init__(
        self,
        fn: Callable[..., Any] | Sequence[Callable[..., Any]],
        policy: BatchPolicy | None = None,
        *,
        name: str,
        refs: bool = True,
    ) -> None:
        """`name` is the wrapper's, for messages (e.g. ``"effax.scan"``); without
        `refs`, a handler holding a `jax.Ref` cannot enter (JAX's shard_map)."""
        self.name = name
        self.stack = _context.current_stack()
        fns = [fn] if callable(fn) else list(fn)
        # Declared rows (`effax.uses`) narrow what is plumbed; otherwise every
        # reachable handler is, since the bodies are traced only once, inside.
        rows = [declared_row(f) for f in fns]
        row = None
        if all(r is not None for r in rows):
            row = list(dict.fromkeys(e for r in rows if r is not None for e in r))
            # handler code (an interceptor's, a handler class's of the user's) runs
            # where its handler is installed and may perform any effect visible
            # there, which the bodies' rows do not name: plumb them all
            if any((e := self.stack.get(effect)) and _context.runs_code(e[0]) for effect in row):
                row = None
        # Handler code (an interceptor's function, a handler class's operation) runs
        # where its handler is installed and sees the handlers there, also those a
        # function's row hides from the bodies: those cross, hidden again inside.
        self.hidden: dict[Effect[Any], Blocked] = {}
        # (for an interceptor, its chain: the handler it reaches crosses alone)
        chains = outer_handlers(self.stack, row=row, hidden=self.hidden if row is None else None)
        self.policy = policy
        exports_axes: list[tuple[Export, int | None]]
        if policy is None:
            exports_axes = [(c.target.export(), None) for c in chains]
        else:
            exports_axes = [c.target.batch_export(policy) for c in chains]
        # Handlers whose values cannot be inputs stay outside; performing one inside
        # raises an error naming it.
        self.blocked: dict[Effect[Any], Entry] = {}
        self.handlers: list[Handler[Any]] = []
        plumbed: list[Chain] = []
        exports: list[Export] = []
        self.carry_axes: list[int | None] = []
        for chain, (export, axis) in zip(chains, exports_axes, strict=True):
            handler = chain.target
            why = unplumbable(handler.effect, export, name, keyed=False, refs=refs)
            if why is None:
                self.handlers.append(handler)
                plumbed.append(chain)
                exports.append(export)
                self.carry_axes.append(axis)
            else:
                self.blocked[handler.effect] = (handler, Uncompilable(why))
        self.plan = Plan.of(plumbed, exports)
        self.consts = [e.const for e in exports]
        # refs cross by closure: each carry crosses without them (`pin`)
        pinned = [pin(strong(e.carry)) for e in exports]
        self.carries = [carry for carry, _ in pinned]
        self.pins = [p for _, p in pinned]
        self.ref_effects = [
            h.effect
            for h, e in zip(self.handlers, exports, strict=True)
            if any(is_ref(leaf) for leaf in jax.tree.leaves((e.const, e.carry)))
        ]
        # The effects the bodies performed, and those they only looked up to plumb
        # into a region further in (an interceptor's target): both are what the
        # traces depend on; a batched region splits only streams performed.
        self.used: set[Effect[Any]] = set()
        self.plumbed: set[Effect[Any]] = set()
        self.statics: list[Any] = [None] * len(self.handlers)
        # Per handler: whether every body run so far passed its carry through
        # unchanged (then the handler keeps its value: a read-only state stays the
        # value it was, not a loop output or a per-element selection of it).
        self.unchanged = [True] * len(self.handlers)

    def run(
        self,
        fn: Callable[..., R],
        carries: Sequence[Any],
        args: Sequence[Any],
        kwargs: dict[str, Any] | None = None,
        *,
        consts: Sequence[Any] | None = None,
        carry_required: bool = True,
        before: Callable[[list[Handler[Any]]], None] | None = None,
    ) -> tuple[R, list[Outcome]]:
        """Inside a body: rebuild the handlers from `carries`, run `fn(*args)`
        (calling `before` with the rebuilt handlers first, if given)."""
        consts = self.consts if consts is None else consts
        # (Flax NNX modules among the arguments: a Variable changed must come out)
        at_entry = [] if self.name.startswith("effax.nnx.") else module_values((args, kwargs))
        unpinned = [unpin(c, p) for c, p in zip(carries, self.pins, strict=True)]
        dynamic = list(zip(consts, unpinned, strict=True))
        try:
            out, inner = run_inside(
                self.plan,
                dynamic,
                fn,
                args,
                kwargs or {},
                track=self.used,
                plumbed=self.plumbed,
                blocked=self.blocked,
                hidden=self.hidden,
                before=before,
            )
        except Exception as error:
            refused = ref_refusal(error) if self.ref_effects else None
            if refused is None:
                raise
            raise self._ref_error(refused) from error
        if at_entry:
            check_module_updates(self.name, at_entry, out)
        outcomes = outcomes_of(
            self.plan, dynamic, inner, carry_required=carry_required, where=self.name
        )
        outcomes = [
            o if p is None else o._replace(carry=pin(o.carry)[0])
            for o, p in zip(outcomes, self.pins, strict=True)
        ]
        for i, (carry, outcome) in enumerate(zip(carries, outcomes, strict=True)):
            self.unchanged[i] = self.unchanged[i] and passed_through(carry, outcome.carry)
        return out, outcomes

    def _ref_error(self, refused: str) -> EffectUsageError:
        """The error of a write into a closed-over ref that JAX refused under
        `refused` ("vmap" or "grad")."""
        held = ", ".join(repr(e) for e in self.ref_effects)
        if refused == "vmap":
            return EffectUsageError(
                f"A write into a jax.Ref held by {held} inside {self.name} was refused by "
                f"JAX: the ref crosses {self.name} by closure, one ref for the whole "
                "batch, and a vmapped function may read such a ref but not write it "
                "(each element would write its own value). Read the ref inside "
                f"{self.name} and write into it outside (from what the function "
                "returns), or keep per-element values in a State (state='batched')."
            )
        return EffectUsageError(
            f"A differentiated value was written into a jax.Ref held by {held} inside "
            f"{self.name}: JAX cannot differentiate through a write into a ref that the "
            "differentiated function does not take as an argument. Write "
            "`jax.lax.stop_gradient(value)` instead, or keep the value in a State, "
            f"which {self.name} carries through."
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
        carries = [
            None if u else unpin(c, p)
            for u, c, p in zip(self.unchanged, carries, self.pins, strict=True)
        ]
        outcomes = [Outcome(*o) for o in zip(statics, carries, values, strict=True)]
        _context.mark_used(self.stack, self.used)
        _context.mark_used(self.stack, self.plumbed - self.used, plumbing=True)
        handlers = self.handlers
        if self.policy is not None:
            # A batched region absorbs into a handler its own way (a key stream split
            # per element draws the key it splits), but only into one the bodies
            # performed: one they never reached stays as it was, as it would with no
            # region, so what a region does never depends on unrelated handlers
            # installed around it (a compiled program is keyed on its lookups only).
            kept = [i for i, h in enumerate(handlers) if h.effect in self.used]
            handlers, outcomes = [handlers[i] for i in kept], [outcomes[i] for i in kept]
        absorb_all(self.stack, handlers, outcomes, steps=steps, policy=self.policy)

    def effect_with_values(self, values: Sequence[Any]) -> Effect[Any] | None:
        for effect, value in zip(self.plan.effects, values, strict=True):
            if jax.tree.leaves(value):
                return effect
        return None
