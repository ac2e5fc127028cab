"""`Plan`: the input layout of the handlers plumbed into a traced region.

For each plumbed handler, in order, a plan says what the inner handler is rebuilt
from (its effect, class and static export), which of its export's parts cross
as inputs: the const, the carry, or both (its *slots*), and the interceptors
re-made around it inside (its chain's static `Wrapper`s; the handler plumbed is
the one the chain reaches). A handler whose class derives `export` from `fields`
passes the fields it names; any other passes both. Derived from the handlers'
kinds alone, so that a compiled program's inputs follow from its environment.
Built once per region or program; everything that flattens exports into inputs,
or inputs back into parts, asks it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, NamedTuple

import jax

from ._effect import Effect
from ._intercept import Chain, Wrapper, wrapped
from ._protocol import Export, Fields, Handler, derives, fields_of

__all__ = ["Plan", "Slot"]


class Slot(NamedTuple):
    """One plumbed handler: how it is rebuilt and which parts cross."""

    effect: Effect[Any]
    cls: type[Handler[Any]]
    fields: Fields | None
    static: Hashable  # the static export, as `rebuild` takes it
    has_const: bool
    has_carry: bool
    wrappers: tuple[Wrapper, ...]  # the interceptors around it, innermost first

    def wrap(self, handler: Handler[Any]) -> Handler[Any]:
        """What is installed inside for the rebuilt `handler`: it, or its chain's
        interceptors re-made around it."""
        return wrapped(self.wrappers, self.effect, handler)

    def parts(self, export: Export) -> list[Any]:
        """The parts of `export` that cross as inputs, in order."""
        return [export.const] * self.has_const + [export.carry] * self.has_carry

    @property
    def names(self) -> list[str]:
        """The names of the slot's inputs, in order (for messages)."""
        f = self.fields or Fields(const="const", carry="carry")
        return [f.const or "const"] * self.has_const + [f.carry or "carry"] * self.has_carry


class Plan:
    """The input layout of a region's plumbed handlers (see the module docstring).

    **Arguments:** `entries`, one ``(effect, class, fields, static, wrappers)`` per
    handler.
    """

    __slots__ = ("carry_positions", "n_in", "slots")

    def __init__(
        self,
        entries: Iterable[
            tuple[Effect[Any], type[Handler[Any]], Fields | None, Hashable, tuple[Wrapper, ...]]
        ],
    ) -> None:
        slots = []
        for effect, cls, fields, static, wrappers in entries:
            if fields is not None and derives(cls, "export"):
                has = (fields.const is not None, fields.carry is not None)
            else:
                has = (True, True)
            slots.append(Slot(effect, cls, fields, static, *has, wrappers))
        self.slots: tuple[Slot, ...] = tuple(slots)
        self.n_in = sum(s.has_const + s.has_carry for s in self.slots)
        positions, i = [], 0
        for s in self.slots:
            i += s.has_const
            if s.has_carry:
                positions.append(i)
            i += s.has_carry
        # The positions of the carries among the flat inputs.
        self.carry_positions: tuple[int, ...] = tuple(positions)

    @classmethod
    def of(cls, chains: Sequence[Chain], exports: Sequence[Export]) -> Plan:
        """The plan of plumbing the targets of `chains`, which exported `exports`."""
        return cls(
            (c.target.effect, type(c.target), fields_of(c.target), e.static, c.wrappers)
            for c, e in zip(chains, exports, strict=True)
        )

    @property
    def effects(self) -> list[Effect[Any]]:
        return [s.effect for s in self.slots]

    def flatten(self, exports: Sequence[Export]) -> list[Any]:
        """The flat inputs of a call: each handler's const and carry slots."""
        return [
            part
            for slot, export in zip(self.slots, exports, strict=True)
            for part in slot.parts(export)
        ]

    def leaf_owners(self, exports: Sequence[Export]) -> list[int]:
        """For each array leaf of the flat inputs of `exports`, in order, the index
        of the handler it belongs to."""
        return [
            i
            for i, (slot, export) in enumerate(zip(self.slots, exports, strict=True))
            for _ in jax.tree.leaves(slot.parts(export))
        ]

    def unflatten(self, flat: Sequence[Any]) -> list[tuple[Any, Any]]:
        """Each handler's ``(const, carry)`` from the flat inputs (None where a slot
        does not cross)."""
        inputs = iter(flat)
        return [
            (next(inputs) if s.has_const else None, next(inputs) if s.has_carry else None)
            for s in self.slots
        ]

    def rebuild(self, dynamic: Sequence[tuple[Any, Any]]) -> tuple[Handler[Any], ...]:
        """The inner handlers, from each handler's ``(const, carry)`` inside (to be
        installed as `Slot.wrap` makes them)."""
        return tuple(
            s.cls.rebuild(s.effect, s.static, const, carry)
            for s, (const, carry) in zip(self.slots, dynamic, strict=True)
        )

    def owners(self) -> list[tuple[Effect[Any], str]]:
        """For each flat input: its handler's effect and the input's name."""
        return [(s.effect, name) for s in self.slots for name in s.names]
