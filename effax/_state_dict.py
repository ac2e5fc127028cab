"""`StateDict`: named state created on first use, and `StateDictCell`, its handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import attrs
import jax
import jax.numpy as jnp

from ._arguments import check_unleaked
from ._context import here, run_at
from ._effect import Effect
from ._errors import EffectTypeError, EffectUsageError, StateTypeError
from ._protocol import BatchPolicy, Export, Fields, Handler, Outcome, PyTree

__all__ = ["StateDict", "StateDictCell"]

V = TypeVar("V")


class StateDict(Effect["StateDictCell[V]"], Generic[V]):
    """Named states, each created the first time it is read: Haiku's
    ``hk.get_state`` / ``hk.set_state``, for code that cannot declare one `State`
    per value up front (a module system that rebuilds its modules on every call).

    ``get(name, init=...)`` creates the entry from `init` (a value, or a function
    of no argument called only then) the first time it is read, and answers the
    stored value after that; ``set(name, value)`` replaces it (or creates it).
    Across a compiled call the entries go in and come back out, each keeping its
    structure, shapes and dtypes; an entry created inside a compiled call comes
    out as one more output, so the next call compiles once more, for the grown
    dict, and then runs warm. A loop body (``effax.scan``, ``fori_loop``,
    ``while_loop``) or a ``cond`` branch cannot grow its carry: an entry created
    there raises `StateTypeError` (create it before the loop: call the step once
    first, eagerly or compiled).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> stats = effax.StateDict[jnp.ndarray]("stats")
    >>> @effax.jit
    ... def observe(x):
    ...     mean = stats.get("mean", init=lambda: jnp.zeros_like(x))
    ...     stats.set("mean", 0.9 * mean + 0.1 * x)
    >>> with stats.init() as cell:
    ...     for _ in range(3):
    ...         observe(jnp.ones(2))
    >>> [round(float(m), 3) for m in cell.value["mean"]]
    [0.271, 0.271]

    """

    __slots__ = ()

    handler_hint = "{name}.init()"
    operations = ("get", "set")

    def get(self, name: str, init: V | Callable[[], V] | None = None) -> V:
        """The entry `name`; created from `init` (a value, or a function of no
        argument) if there is none yet. Without `init`, a missing entry raises
        `EffectUsageError`."""
        handler = self.handler()
        # a function `init` is the performer's code: it runs under the performer's handlers
        return run_at(self, handler, handler.get, name, here(init) if callable(init) else init)

    def set(self, name: str, value: V) -> None:
        """Replace the entry `name` by `value` (creating it if there is none)."""
        handler = self.handler()
        run_at(self, handler, handler.set, name, value)

    def init(self, entries: Mapping[str, V] | None = None) -> StateDictCell[V]:
        """A cell handler holding `entries` (none by default); it keeps them, and the
        entries created under it, across calls."""
        entries = {} if entries is None else entries
        if not isinstance(entries, Mapping):
            raise EffectTypeError(
                f"{self!r}.init(entries) takes a dict of named states, not a "
                f"{type(entries).__name__}."
            )
        for name in entries:
            _check_name(self, name)
        check_unleaked(dict(entries), "its entries", f"{self!r}.init(...)")
        return StateDictCell(self, dict(entries))


def _check_name(effect: StateDict[Any], name: object) -> None:
    if not isinstance(name, str):
        raise EffectTypeError(
            f"The entries of {effect!r} are named by str, not by a {type(name).__name__} "
            f"({name!r})."
        )


@attrs.define(eq=False)
class StateDictCell(Handler[StateDict[V]]):
    """The handler of a :class:`StateDict`: a cell whose `.value` is the dict of
    entries. Made by `StateDict.init`; installing it again continues from there.

    Under ``effax.vmap(state="batched")`` every entry carries the batch along its
    leading axis (an entry created inside gets one row per element); with
    ``state="shared"`` an entry created inside must be the same for every element.
    """

    effect: StateDict[V]
    entries: dict[str, V]
    # the names a rebuilt cell entered its traced region with (None: not rebuilt)
    entered: frozenset[str] | None = None
    fields = Fields(carry="entries")

    def get(self, name: str, init: V | Callable[[], V] | None = None) -> V:
        _check_name(self.effect, name)
        entries = self.entries
        if name in entries:
            return entries[name]
        if init is None:
            raise EffectUsageError(
                f"{self.effect!r} has no entry {name!r} yet (it has {sorted(entries)}). "
                f"Give {self.effect.name}.get({name!r}, init=...) a value or a function "
                "making one, to create it the first time it is read."
            )
        value = init() if callable(init) else init
        self._store(name, value, "get")
        return value

    def set(self, name: str, value: V) -> None:
        _check_name(self.effect, name)
        self._store(name, value, "set")

    def _store(self, name: str, value: V, operation: str) -> None:
        self.effect.check_store(self, value, operation)
        # a new dict: what a compiled call was given must not change under it
        self.entries = {**self.entries, name: value}

    @property
    def value(self) -> dict[str, V]:
        return self.entries

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> StateDictCell[V]:
        return cls(effect, dict(carry), frozenset(carry))

    def outcome(self, *, carry_required: bool) -> Outcome:
        created = sorted(set(self.entries) - (self.entered or frozenset()))
        if carry_required and created:
            raise StateTypeError(
                f"{self.effect!r} created the entries {created} inside a loop body or a "
                "cond branch, whose carry cannot grow. Create them before the loop: run "
                "the step once first (eagerly or compiled), or give them to "
                f"{self.effect.name}.init({{...}})."
            )
        return Outcome(carry=self.entries)

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        return self.export(), 0 if policy.state == "batched" else None

    @staticmethod
    def carry_entered(before: Any, after: Any) -> Any:
        # (`_boundary.GrowingCarry`) entries created inside a compiled call come out
        # beside those that went in: the ones that went in are compared
        if isinstance(before, dict) and isinstance(after, dict) and before.keys() <= after.keys():
            return {name: after[name] for name in before}
        return after

    def snapshot_like(self, snapshot: PyTree) -> PyTree:
        # restoring replaces the entries by the snapshot's: those the cell holds
        # must match, the others are taken as saved (a fresh run starts empty)
        if not isinstance(snapshot, dict):
            return self.entries
        return {
            name: self.entries[name] if name in self.entries else jax.tree.map(jnp.asarray, saved)
            for name, saved in snapshot.items()
        }
