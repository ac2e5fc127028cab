"""The environment of a compiled call: what each handler lookup finds.

A compiled handled function keeps one program per environment (`_program`). For
each effect the function looks up, the environment records

- a plumbed handler: its effect, class and `Fields`, the interceptors around it
  (its chain's static wrappers, `_intercept.chain_of`: the handler plumbed for an
  interceptor is the one it reaches), and its static export, compared as
  ``jax.jit`` compares static arguments (type included). Its const and
  carry are passed in as arguments (its program's `Plan` says which), so their
  tree structure, shapes, dtypes and None-ness are part of ``jax.jit``'s own cache
  key;
- or why there was none to plumb: no handler (``None``), a `Blocked` marker, or a
  handler installed behind a staging trace or a raw ``jax.vmap`` (`UNREACHABLE`).

`resolve` computes it under a handler stack.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from . import _context
from ._boundary import cannot_compile, unplumbable
from ._effect import Effect
from ._intercept import Chain
from ._plan import Plan
from ._protocol import Export, Handler, check_home, fields_of
from ._visible import Chains, chain_of

__all__ = [
    "UNREACHABLE",
    "Environment",
    "Exports",
    "Key",
    "export_of",
    "Resolved",
    "plan_of",
    "plumbed_keys",
    "resolve",
    "static_key",
]

# Why a looked-up effect has no plumbed handler (besides None: no handler at all, and
# a `Blocked` marker): its handler was installed behind a staging trace.
UNREACHABLE = "unreachable"

# One looked-up effect: (effect, what was found, static export). `what` is
# (class, fields, wrappers) for a plumbed handler, else None, a `Blocked` marker or
# `UNREACHABLE`; the static export is ``(type, value)`` or None.
Key = tuple[Effect[Any], Any, Any]
Environment = tuple[Key, ...]


class Exports(dict[int, Export]):
    """The exports of one call, by handler identity, and the chains of the
    handlers it found (`chains`): each handler is asked once per call."""

    __slots__ = ("chains",)

    def __init__(self) -> None:
        super().__init__()
        self.chains: Chains = {}


def static_key(static: Hashable) -> Any:
    """A static export as a cache key: ``1``, ``1.0`` and ``True`` stay apart."""
    return None if static is None else (type(static), static)


class Resolved(NamedTuple):
    """An environment under a handler stack, and the handlers to plumb (with their
    exports and the chains they stand for) in its order."""

    environment: Environment
    handlers: tuple[Handler[Any], ...]  # the chains' targets
    exports: tuple[Export, ...]
    chains: tuple[Chain, ...]


def export_of(handler: Handler[Any], exports: Exports) -> Export:
    """`handler`'s export, asked once per call (`exports` holds the call's)."""
    export = exports.get(id(handler))
    if export is None:
        export = exports[id(handler)] = handler.export()
    return export


def resolve(
    stack: _context.Stack,
    effects: Sequence[Effect[Any]],
    own: Sequence[Handler[Any]],
    *,
    note: bool,
    exports: Exports | None = None,
) -> Resolved:
    """What a lookup of each of `effects` finds under `stack`, then `own`.

    With `note`, the enclosing traced regions and recorders learn that the call
    depends on these lookups (a compiled call inside a traced body). `exports`
    holds the exports the call already asked for, and gains the others.
    """
    exports = Exports() if exports is None else exports
    keys: list[Key] = []
    chains: list[Chain] = []
    for effect in effects:
        entry = stack.get(effect)
        why: Any = None
        if entry is not None:
            obstacle = _context.obstacle(effect, entry, track=note)
            if obstacle is None:
                if note:  # through the interceptors over it, to the handler it reaches
                    _context.mark_used(stack, (effect,))
                chains.append(chain_of(entry[0], exports.chains))
                continue
            why = obstacle if isinstance(obstacle, _context.Blocked) else UNREACHABLE
        if note:
            _context.note_missing(effect)
        keys.append((effect, why, None))
    for handler in own:
        check_home(handler)
    chains.extend(chain_of(h, exports.chains) for h in own)
    handlers = [c.target for c in chains]
    found = tuple(export_of(h, exports) for h in handlers)
    for handler, export in zip(handlers, found, strict=True):
        if export.static is not None:
            why = unplumbable(handler.effect, export, "a compiled call", keyed=True)
            if why is not None:
                raise cannot_compile(why)
    keys.extend(
        (h.effect, (type(h), fields_of(h), c.wrappers), static_key(e.static))
        for h, c, e in zip(handlers, chains, found, strict=True)
    )
    return Resolved(tuple(keys), tuple(handlers), found, tuple(chains))


def plumbed_keys(environment: Environment) -> list[Key]:
    """The keys of the plumbed handlers, in order."""
    return [key for key in environment if type(key[1]) is tuple]


def plan_of(environment: Environment) -> Plan:
    """The input layout of the program of `environment`."""
    return Plan(
        (effect, what[0], what[1], None if static is None else static[1], what[2])
        for effect, what, static in plumbed_keys(environment)
    )
