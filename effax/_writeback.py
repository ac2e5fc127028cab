"""Writing a traced region's outcomes back into the handlers around it.

Every write is checked before any is made (`check_writes`): an outcome that would
leave a tracer in a handler installed under an outer trace is refused, so a
refused write leaves every handler as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import jax

from . import _context, _trace
from ._effect import check_write
from ._errors import OWN_WRITE_LEAK, EffectLeakError
from ._protocol import BatchPolicy, Handler, Outcome, RefusesOutcomes, home_of

__all__ = ["Home", "absorb_all", "check_writes", "outer_homes"]


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
        # (a plumbed handler is the one an interceptor chain reaches: installed
        # under the interceptors, or held by one given to `handle`)
        entry = next(
            (
                e
                for e in _context.chain(stack, handler.effect)
                if e[0] is handler and not _context.is_marker(e[1])
            ),
            None,
        )
        if entry is not None:
            home, own = _context.home_trace(entry[1]), False
        else:
            home, own = home_of(handler), True
        homes.append(None if home is None or home is trace else Home(home, own))
    return homes


def check_writes(
    handlers: Sequence[Handler[Any]], outcomes: Sequence[Outcome], homes: Sequence[Home | None]
) -> None:
    """Refuse (before anything is absorbed) outcomes that would leave a tracer in a
    handler installed under an outer trace: it could not outlive its trace; and
    those a handler refuses itself (`RefusesOutcomes`)."""
    for handler, outcome, home in zip(handlers, outcomes, homes, strict=True):
        if issubclass(type(handler), RefusesOutcomes):
            cast(RefusesOutcomes, handler).check_absorb(outcome)
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
