"""`Effect`: the base class of effect declarations, and how a perform finds its handler.

An *effect* is a typed token declared once at module level (`Ask[float]("t")`).
Library code *performs* it (`t.ask()`): the operation looks up the innermost
handler of the effect (`Effect.handler`), which is where trace safety of reads is
enforced; an operation that stores a value (`set`, `emit`) goes through
`Effect.handler_for_write`, where trace safety of writes is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import jax

from . import _context, _trace
from ._context import Blocked, Tracked
from ._errors import (
    LEAK_EXPLANATION,
    WRITE_LEAK_EXPLANATION,
    EffectLeakError,
    EffectTypeError,
    UnhandledEffectError,
)

if TYPE_CHECKING:
    from ._protocol import Handler

__all__ = ["Effect", "check_write", "init_effect"]

H = TypeVar("H", bound="Handler[Any]")


class Effect(Generic[H]):
    """Base class of effect declarations; effects are compared by identity.

    Two effects with the same name are different effects, each with its own handler.
    Subclass it to declare your own effect (see :class:`Handler`); its operations
    reach the innermost handler with :meth:`handler`.

    **Example:**

    >>> import effax
    >>> a, b = effax.Ask[int]("n"), effax.Ask[int]("n")
    >>> a == b, a == a
    (False, True)
    >>> with a.provide(1) as provider, b.provide(2):
    ...     a.ask(), b.ask(), a.handler() is provider
    (1, 2, True)

    """

    __slots__ = ("name",)
    # How a handler of this kind of effect is made, for messages; `{name}` is the
    # effect's name (e.g. "{name}.init(value)").
    handler_hint: ClassVar[str] = "a handler"
    name: str

    def __init__(self, name: str) -> None:
        init_effect(self, name)

    def handler_example(self) -> str:
        """How a handler of this effect is made, e.g. ``steps.init(value)`` (for
        messages that tell the user what to install)."""
        return self.handler_hint.format(name=self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def handler(self) -> H:
        """The innermost handler of this effect, checked for trace safety.

        Operations of user-defined effects call this (or `handler_for_write`, which
        also refuses a value that would leak a tracer) to reach their handler.
        Raises `UnhandledEffectError` if there is none, `EffectLeakError` if it was
        installed outside a staging transformation around this call.
        """
        entry = _context.current_stack().get(self)
        if entry is None:
            _context.note_missing(self)
            raise UnhandledEffectError(
                f"{self!r} was performed with no handler installed. Install one around "
                f"the call, e.g. `with {self.handler_example()}: ...` or "
                f"`effax.handle(fn, {self.handler_example()})`."
            )
        handler, ref = entry
        if ref is not _trace.current_trace_ref():
            self._check_entry(ref)
        return handler  # type: ignore[return-value]

    def _check_entry(self, ref: Any) -> None:
        if isinstance(ref, Blocked):
            _context.note_missing(self)
            ref.raise_for(self)
        if type(ref) is Tracked:
            ref.used.add(self)
            ref = ref.ref
        if ref is _trace.current_trace_ref():
            return
        reach = _trace.reachability(ref)
        if reach == "ok":
            return
        _context.note_missing(self)
        api = _trace.innermost_staging_api()
        if reach == "staged":
            where = f"inside {api[0]}" if api else "inside a staging JAX transformation"
            fix = api[1] if api else "the effax wrapper of that transformation"
        else:
            where = f"inside {api[0]}" if api else "under a JAX trace"
            where += ", which is not nested inside the trace of its handler"
            fix = api[1] if api else "effax.shard_map or effax.handle"
        raise EffectLeakError(
            f"{self!r} was performed {where}, but its handler was installed outside it. "
            f"Use {fix} instead. {LEAK_EXPLANATION}"
        )

    def handler_for_write(self, value: Any) -> H:
        """`handler()`, refusing `value` if it holds a tracer that would outlive its
        transformation once stored in the handler (raises `EffectLeakError`)."""
        handler = self.handler()
        ref = _context.current_stack()[self][1]
        if ref is not _trace.current_trace_ref():
            check_write(self, value, ref)
        return handler


def check_write(effect: Effect[Any], value: Any, ref: Any) -> None:
    """Refuse to store `value` in a handler of `effect` installed at trace `ref` if
    it holds a tracer that would outlive its transformation (`EffectLeakError`)."""
    if type(ref) is Tracked:
        ref = ref.ref
    if _trace.foreign_tracers(jax.tree.leaves(value), ref):
        raise EffectLeakError(
            f"Writing a traced value to {effect!r}, whose handler was installed outside "
            f"the JAX transformation that produced it. {WRITE_LEAK_EXPLANATION}"
        )


def init_effect(effect: Effect[Any], name: str) -> None:
    if not isinstance(name, str):
        raise EffectTypeError(f"An effect's name must be a string, got {type(name).__name__}.")
    object.__setattr__(effect, "name", name)
