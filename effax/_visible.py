"""Which handlers around a call a traced region plumbs in.

A region (a loop body, a branch, a batched or differentiated function, a compiled
call before it knows its row) plumbs the handlers visible at its call that can be
used there: `_context.obstacle` decides for each stack entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import _context
from ._effect import Effect, raise_obstacle
from ._protocol import Handler

__all__ = ["outer_handlers"]


def outer_handlers(
    stack: _context.Stack,
    *,
    skip: Iterable[Effect[Any]] = (),
    row: Iterable[Effect[Any]] | None = None,
) -> list[Handler[Any]]:
    """The handlers around the call that a region may plumb in.

    With `row` (the effects the region is known to perform), only those, in that
    order; an effect of the row whose handler cannot be used here raises the error
    that explains why (and an enclosing region that rebuilt its handler learns
    that it is performed). Without it, every handler usable here, in stack order.
    Handlers hidden by a `Blocked` marker are never plumbed.
    """
    skip = frozenset(skip)
    handlers: list[Handler[Any]] = []
    # `row` may grow while another thread traces: iterate over a snapshot.
    for effect in stack if row is None else tuple(row):
        if effect in skip:
            continue
        entry = stack.get(effect)
        if entry is None:
            continue
        why = _context.obstacle(effect, entry, track=row is not None)
        if why is None:
            handlers.append(entry[0])
        elif row is not None and not isinstance(why, _context.Blocked):
            _context.note_missing(effect)
            raise_obstacle(effect, why)
    return handlers
