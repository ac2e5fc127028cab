"""The environment of a compiled call: what each handler lookup finds.

A compiled handled function keeps one program per environment (`_program`). For
each effect the function looks up, the environment records

- a plumbed handler: its effect, class and `Fields`, and its static export,
  compared as ``jax.jit`` compares static arguments (type included). Its const and
  carry are passed in as arguments (`flat_inputs`), so their tree structure,
  shapes, dtypes and None-ness are part of ``jax.jit``'s own cache key;
- or why there was none to plumb: no handler (``None``), a `Blocked` marker, or a
  handler installed behind a staging trace or a raw ``jax.vmap`` (`UNREACHABLE`).

`resolve` computes it under a handler stack.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from . import _context, _trace
from ._context import Blocked, Tracked
from ._effect import Effect
from ._errors import EffectTypeError
from ._protocol import Export, Fields, Handler, check_home
from ._region import unplumbable, unsplit

__all__ = [
    "UNREACHABLE",
    "Key",
    "Plan",
    "Resolved",
    "flat_inputs",
    "plumbed_keys",
    "resolve",
    "slots",
    "static_key",
]

# Why a looked-up effect has no plumbed handler (besides None: no handler at all, and
# a `Blocked` marker): its handler was installed behind a staging trace.
UNREACHABLE = "unreachable"

# One looked-up effect: (effect, what was found, static export). `what` is
# (class, fields) for a plumbed handler, else None, a `Blocked` marker or
# `UNREACHABLE`; the static export is ``(type, value)`` or None.
Key = tuple[Effect[Any], Any, Any]
Plan = tuple[Key, ...]


def static_key(static: Hashable) -> Any:
    """A static export as a cache key: ``1``, ``1.0`` and ``True`` stay apart."""
    return None if static is None else (type(static), static)


def slots(cls: type[Handler[Any]], fields: Fields | None) -> tuple[bool, bool]:
    """Whether a handler of this kind passes a const and a carry in (in that order).

    Derived from the kind alone, so that the inputs of a program follow from its
    plan: fields-based exports pass the fields they name, others both parts.
    """
    if fields is not None and cls.export is Handler.export:
        return fields.const is not None, fields.carry is not None
    return True, True


class Resolved(NamedTuple):
    """An environment under a handler stack: its plan, and the handlers to plumb
    (with their exports) in the plan's order."""

    plan: Plan
    handlers: tuple[Handler[Any], ...]
    exports: tuple[Export, ...]


def resolve(
    stack: _context.Stack,
    effects: Sequence[Effect[Any]],
    own: Sequence[Handler[Any]],
    *,
    note: bool,
) -> Resolved:
    """What a lookup of each of `effects` finds under `stack`, then `own`.

    With `note`, the enclosing traced regions and recorders learn that the call
    depends on these lookups (a compiled call inside a traced body).
    """
    trace = _trace.current_trace_ref()
    keys: list[Key] = []
    handlers: list[Handler[Any]] = []
    for effect in effects:
        entry = stack.get(effect)
        why: Any = None
        if entry is not None:
            handler, ref = entry
            if ref is not trace:
                if isinstance(ref, Blocked):
                    why = ref
                elif type(ref) is Tracked:
                    if note:
                        ref.used.add(effect)
                    ref = ref.ref
                if (
                    why is None
                    and ref is not trace
                    and (_trace.reachability(ref) != "ok" or unsplit(handler, ref))
                ):
                    why = UNREACHABLE
            if why is None:
                handlers.append(handler)
                continue
        if note:
            _context.note_missing(effect)
        keys.append((effect, why, None))
    for handler in own:
        check_home(handler)
    handlers.extend(own)
    exports = tuple(h.export() for h in handlers)
    for handler, export in zip(handlers, exports, strict=True):
        if export.static is not None:
            why = unplumbable(handler.effect, export, "a compiled call", keyed=True)
            if why is not None:
                raise EffectTypeError(why)
    keys.extend(
        (h.effect, (type(h), h.fields), static_key(e.static))
        for h, e in zip(handlers, exports, strict=True)
    )
    return Resolved(tuple(keys), tuple(handlers), exports)


def flat_inputs(plan: Plan, exports: Sequence[Export]) -> list[Any]:
    """The plumbed arguments of a call: each handler's const and carry slots."""
    flat = []
    for (_, (cls, fields), _), export in zip(plumbed_keys(plan), exports, strict=True):
        has_const, has_carry = slots(cls, fields)
        if has_const:
            flat.append(export.const)
        if has_carry:
            flat.append(export.carry)
    return flat


def plumbed_keys(plan: Plan) -> list[Key]:
    return [key for key in plan if type(key[1]) is tuple]
