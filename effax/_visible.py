"""Which handlers around a call a traced region plumbs in.

A region (a loop body, a branch, a batched or differentiated function, a compiled
call before it knows its row) plumbs the handlers visible at its call that can be
used there: `_context.obstacle` decides for each stack entry. For an interceptor,
what is plumbed is its chain (`_intercept.chain_of`): the handler it reaches, and
the interceptors as static wrappers.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

from . import _context, _intercept
from ._effect import Effect, raise_obstacle
from ._intercept import Chain
from ._protocol import Handler

__all__ = ["Chains", "chain_of", "outer_handlers"]

# The chains of one call or region, by the identity of the handler found: each
# resolved once.
Chains = MutableMapping[int, Chain]


def chain_of(handler: Handler[Any], chains: Chains | None = None) -> Chain:
    """`handler`'s chain (`_intercept.chain_of`), resolved once per `chains`."""
    if not handler.forwards:  # (no interceptor: nothing to resolve)
        return Chain(handler, ())
    if chains is None:
        return _intercept.chain_of(handler)
    chain = chains.get(id(handler))
    if chain is None:
        chain = chains[id(handler)] = _intercept.chain_of(handler)
    return chain


def outer_handlers(
    stack: _context.Stack,
    *,
    skip: Iterable[Effect[Any]] = (),
    row: Iterable[Effect[Any]] | None = None,
    chains: Chains | None = None,
    hidden: dict[Effect[Any], _context.Blocked] | None = None,
) -> list[Chain]:
    """The chains of the handlers around the call that a region may plumb in
    (resolved once per `chains`, if given).

    With `row` (the effects the region is known to perform), only those, in that
    order; an effect of the row whose handler cannot be used here raises the error
    that explains why (and an enclosing region that rebuilt its handler learns
    that it is performed). Without it, every handler usable here, in stack order.
    Handlers hidden by a `Blocked` marker are not plumbed; with `hidden` (a region
    that may run handler code: an interceptor's function sees the handlers outside
    a function's row), those behind a marker that handler code sees through are,
    and `hidden` gains their markers, to hide them again inside.
    """
    skip = frozenset(skip)
    handlers: list[Chain] = []
    # `row` may grow while another thread traces: iterate over a snapshot.
    for effect in stack if row is None else tuple(row):
        if effect in skip:
            continue
        entry = stack.get(effect)
        if entry is None:
            continue
        why = _context.obstacle(effect, entry, track=row is not None)
        if hidden is not None and (seen := _context.seen_through(stack, effect, why)):
            (hidden[effect], entry), why = seen, None
        if why is None:
            handlers.append(chain_of(entry[0], chains))
        elif row is not None and not _context.is_marker(why):
            _context.note_missing(effect)
            raise_obstacle(effect, why)
    return handlers
