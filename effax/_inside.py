"""Inside a traced region: the plumbed handlers rebuilt, and what they send out.

`handle`, the control-flow wrappers and the transformation wrappers all cross a
boundary the same way, over the `Handler` protocol: outside, the handlers to plumb
are chosen (`_visible`, `_environment`) and exported; inside, `enter_inside`
rebuilds them from their plan (`_plan`) and installs them, the user's function
runs, and `outcomes_of` collects what each inner handler sends out; after the
region, its caller writes the outcomes back (`_writeback`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax

from . import _context, _trace
from ._boundary import GrowingCarry, check_outcome
from ._context import Blocked, Entry, Tracked
from ._effect import Effect
from ._plan import Plan
from ._protocol import Handler, Outcome

__all__ = ["enter_inside", "outcomes_of", "passed_through", "run_inside"]

R = TypeVar("R")


def run_inside(
    plan: Plan,
    dynamic: Sequence[tuple[Any, Any]],
    fn: Callable[..., R],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    track: set[Effect[Any]] | None = None,
    plumbed: set[Effect[Any]] | None = None,
    standins: Sequence[Handler[Any]] = (),
    recorder: set[Effect[Any]] | None = None,
    blocked: Mapping[Effect[Any], Entry] | None = None,
    hidden: Mapping[Effect[Any], Blocked] | None = None,
    before: Callable[[list[Handler[Any]]], None] | None = None,
) -> tuple[R, list[Handler[Any]]]:
    """Rebuild the plumbed handlers inside a region, run `fn` under them.

    Returns `fn`'s result and the inner handlers. With `track`, the inner handlers
    (and the `standins`: handlers visible outside but not plumbed, rebuilt from
    their current values so that performing them changes nothing outside) record
    into it which of them were performed (and into `plumbed`, if given, which were
    only looked up to be plumbed further in); with `recorder`, lookups that find no
    usable handler are recorded there; `hidden` holds the markers (of a function's
    row) that hid plumbed handlers outside, installed again over them (handler code
    installed outside the row sees through them); `before`, if given, is called
    with the inner handlers before `fn` (`effax.grad` prepares the handlers that
    take part in differentiation).
    """
    token, inner = enter_inside(
        plan,
        dynamic,
        track=track,
        plumbed=plumbed,
        standins=standins,
        recorder=recorder,
        blocked=blocked,
        hidden=hidden,
    )
    try:
        if before is not None:
            before(inner)
        out = fn(*args, **kwargs)
    finally:
        _context.pop(token)
    return out, inner


def enter_inside(
    plan: Plan,
    dynamic: Sequence[tuple[Any, Any]],
    *,
    track: set[Effect[Any]] | None = None,
    plumbed: set[Effect[Any]] | None = None,
    standins: Sequence[Handler[Any]] = (),
    recorder: set[Effect[Any]] | None = None,
    blocked: Mapping[Effect[Any], Entry] | None = None,
    hidden: Mapping[Effect[Any], Blocked] | None = None,
) -> tuple[Any, list[Handler[Any]]]:
    """`run_inside` without the call: install the rebuilt handlers (and the
    `blocked` entries, which hide handlers that cannot enter); returns the token
    that `_context.pop` takes to remove them, and the inner handlers (those that
    crossed: an interceptor chain's target, installed inside its wrappers)."""
    inner = plan.rebuild(dynamic)
    ref = (
        _trace.current_trace_ref()
        if track is None
        else Tracked(_trace.current_trace_ref(), track, plumbed)
    )
    entries = dict(blocked or {})
    entries.update({handler.effect: (handler, ref) for handler in standins})
    entries.update(
        {s.effect: (s.wrap(handler), ref) for s, handler in zip(plan.slots, inner, strict=True)}
    )
    if not hidden:
        return _context.push_entries(entries, recorder=recorder), list(inner)
    over = {e: (entries[e][0], marker) for e, marker in hidden.items() if e in entries}
    return _context.push_entries(entries, over, recorder=recorder), list(inner)


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
    for slot, (_, carry), handler in zip(plan.slots, dynamic, inner, strict=True):
        result = handler.outcome(carry_required=carry_required)
        # (a region that is not a loop: a carry may gain entries, a StateDict's)
        grows = None
        if not carry_required and issubclass(slot.cls, GrowingCarry):
            grows = slot.cls.carry_entered
        check_outcome(slot.effect, carry, result, where, grows=grows)
        results.append(result)
    return results


def passed_through(carry: Any, out: Any) -> bool:
    """Whether a region's handler carry came out as it went in (the very same
    leaves): the handler only read it, and keeps its value after the region."""
    if out is None:
        return carry is None
    leaves, tree = jax.tree.flatten(carry)
    out_leaves, out_tree = jax.tree.flatten(out)
    # (the same structure too: a dict carry may gain entries that hold no array)
    return bool(operator.eq(tree, out_tree)) and all(
        a is b for a, b in zip(leaves, out_leaves, strict=True)
    )
