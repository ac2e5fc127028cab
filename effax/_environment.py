"""The environment of a compiled call: what each handler lookup finds.

A compiled handled function keeps one program per environment (`_program`). For
each effect the function looks up, the environment records

- a plumbed handler: its effect, class and `Fields`, the interceptors around it
  (its chain's static wrappers, `_intercept.chain_of`: the handler plumbed for an
  interceptor is the one it reaches), and its static export, compared as
  ``jax.jit`` compares static arguments (type included); where handler code runs
  (an interceptor, a handler class of the user's), the install order of the
  handlers found, which decides what that code sees (`install_order`). Its const and
  carry are passed in as arguments (its program's `Plan` says which), so their
  tree structure, shapes, dtypes and None-ness are part of ``jax.jit``'s own cache
  key;
- or why there was none to plumb: no handler (``None``), a `Blocked` marker, or a
  handler installed behind a staging trace or a raw ``jax.vmap`` (`UNREACHABLE`).

`resolve` computes it under a handler stack.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence, Set as AbstractSet
from typing import Any, NamedTuple

import jax

from . import _context, _trace
from ._boundary import cannot_compile, placeholder, unplumbable
from ._effect import Effect
from ._intercept import Chain, wrapped
from ._plan import Plan
from ._protocol import Export, Handler, check_home, fields_of
from ._visible import Chains, chain_of

__all__ = [
    "UNREACHABLE",
    "Environment",
    "Exports",
    "Key",
    "export_of",
    "hidden_of",
    "install_order",
    "Resolved",
    "plan_of",
    "plumbed_keys",
    "resolve",
    "standins",
    "static_key",
]

# Why a looked-up effect has no plumbed handler (besides None: no handler at all, and
# a `Blocked` marker): its handler was installed behind a staging trace.
UNREACHABLE = "unreachable"

# One looked-up effect: (effect, what was found, static export). `what` is (class,
# fields, wrappers, install order or None, the marker of a row that hides it from
# the function or None) for a plumbed handler, else None, a `Blocked` marker or
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
    markers: list[_context.Blocked | None] = []
    for effect in effects:
        entry = stack.get(effect)
        why: Any = None
        if entry is not None:
            obstacle = _context.obstacle(effect, entry, track=note)
            marker = None
            if obstacle is not None:
                # (hidden by a function's row from its code, not from handler code
                # installed outside it: plumbed in, hidden again inside)
                seen = _context.seen_through(stack, effect, obstacle, track=note)
                if seen is not None:
                    (marker, entry), obstacle = seen, None
            if obstacle is None:
                if note:  # through the interceptors over it, to the handler it reaches
                    _context.mark_used(stack, (effect,))
                chains.append(chain_of(entry[0], exports.chains))
                markers.append(marker)
                continue
            why = obstacle if _context.is_marker(obstacle) else UNREACHABLE
        if note:
            _context.note_missing(effect)
        keys.append((effect, why, None))
    for handler in own:
        check_home(handler)
    chains.extend(chain_of(h, exports.chains) for h in own)
    markers += [None] * len(own)
    handlers = [c.target for c in chains]
    found = tuple(export_of(h, exports) for h in handlers)
    for handler, export in zip(handlers, found, strict=True):
        if export.static is not None:
            why = unplumbable(handler.effect, export, "a compiled call", keyed=True)
            if why is not None:
                raise cannot_compile(why)
    # Handler code (an interceptor's functions, a handler class's operations) sees
    # the handlers installed before it, not those after: where some runs, a program
    # traced under one install order is not another order's (`install_order`).
    runs_code = any(c.wrappers or not c.target._effax_own for c in chains)
    order = install_order(stack, effects) if runs_code else None
    keys.extend(
        (h.effect, (type(h), fields_of(h), c.wrappers, order, m), static_key(e.static))
        for h, c, e, m in zip(handlers, chains, found, markers, strict=True)
    )
    return Resolved(tuple(keys), tuple(handlers), found, tuple(chains))


def install_order(stack: _context.Stack, effects: Sequence[Effect[Any]]) -> tuple[Any, ...]:
    """What the handler code under `stack` can see: for each handler of `effects`
    that runs code of the user's (an interceptor, a handler class of theirs), the
    effects whose installed handler was installed before it (outside it), by their
    positions in `effects`. Install order is the stacks' (each `with` one, its
    handlers in their order), a shadowed handler (an interceptor's inner one) where
    it was installed; two stacks with the same answer run the same program."""
    index = {effect: i for i, effect in enumerate(effects)}
    levels: list[list[tuple[int, _context.Entry]]] = []
    node: _context.Stack | None = stack
    while node is not None:  # innermost first
        below = node.parent
        levels.append(
            [
                (index[effect], entry)
                for effect, entry in node.items()
                if effect in index and (below is None or below.get(effect) is not entry)
            ]
        )
        node = below
    sequence = [item for level in reversed(levels) for item in level]  # outermost first
    where = {id(entry): n for n, (_, entry) in enumerate(sequence)}
    # (a handler a row's marker hides is where it was installed: handler code sees it)
    heads = [(i, where[id(_context.beneath(stack, e))]) for e, i in index.items() if e in stack]
    seen: list[tuple[int, tuple[int, ...]]] = []
    for n, (i, entry) in enumerate(sequence):
        handler = entry[0]
        if _context.runs_code(handler):
            seen.append((i, tuple(sorted(j for j, at in heads if at < n))))
    return tuple(seen)


def standins(
    plumbed: AbstractSet[Effect[Any]], exports: Exports, hidden: dict[Effect[Any], _context.Blocked]
) -> list[Handler[Any]]:
    """Handlers visible at a compiled call but not `plumbed` into it, rebuilt from
    their current values: performing one inside records the lookup (the trace is
    then dropped and the effect plumbed in) without raising through user code, and
    changes nothing outside. Only handlers usable at the call count (through the
    call's own staging trace); lookups of the others raise as they would there.
    Where handler code may run, a handler a row hides from the function has one
    too, hidden again (`hidden` gains its marker): handler code outside the row
    reaches it."""
    standins = []
    stack = _context.current_stack()
    for effect, entry in stack.items():
        if effect in plumbed:
            continue
        why = _context.obstacle(effect, entry, track=False, through=1)
        found = _context.seen_through(stack, effect, why, through=1)
        if found is not None:
            (hidden[effect], entry), why = found, None
        if why is not None:
            continue
        with _trace.under(_context.home_trace(entry[1])):
            chain = chain_of(entry[0], exports.chains)
            export = export_of(chain.target, exports)
        # Zeros for tracers: a stand-in must not close over another trace (a
        # cached inner trace would keep it), and its values are never used (a
        # lookup drops this trace).
        const, carry = jax.tree.map(placeholder, (export.const, export.carry))
        target = type(chain.target).rebuild(effect, export.static, const, carry)
        standins.append(wrapped(chain.wrappers, effect, target))
    return standins


def plumbed_keys(environment: Environment) -> list[Key]:
    """The keys of the plumbed handlers, in order."""
    return [key for key in environment if type(key[1]) is tuple]


def hidden_of(environment: Environment) -> dict[Effect[Any], _context.Blocked]:
    """The plumbed handlers of `environment` that a row's marker hides from the
    function (handler code outside the row reaches them), by effect."""
    return {key[0]: key[1][4] for key in plumbed_keys(environment) if key[1][4] is not None}


def plan_of(environment: Environment) -> Plan:
    """The input layout of the program of `environment`."""
    return Plan(
        (effect, what[0], what[1], None if static is None else static[1], what[2])
        for effect, what, static in plumbed_keys(environment)
    )
