"""`effax.uses`: a function's effect row, declared once and checked at run time.

A row names the effects a function may perform, itself or through its callees,
minus those it handles inside. While the function runs, every handler visible from
its caller whose effect is not in the row is hidden behind an :class:`Undeclared`
stack-entry marker: performing that effect raises
:class:`effax.UndeclaredEffectError`, and `effax.handle` / `effax.jit` do not plumb
it. Handlers installed inside the function shadow the marker as usual.

The row is also published on the decorated function (`_effect.declared_row`
reads it), so that `effax.handle` and the wrappers plumb exactly those effects
into a compiled function; the mypy plugin (`effax_stubs.mypy_plugin`) reads the
decorator itself to check rows statically.
"""

from __future__ import annotations

import functools as ft
import inspect
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

from . import _context
from ._context import Blocked
from ._effect import Effect, declare_row
from ._errors import EffectTypeError, UndeclaredEffectError

__all__ = ["Undeclared", "uses"]

P = ParamSpec("P")
R = TypeVar("R")


_PARENTHESES = " Write `@effax.uses()` with parentheses to declare a pure function."


def _row_text(row: tuple[Effect[Any], ...]) -> str:
    return f"effax.uses({', '.join(repr(effect) for effect in row)})"


class Undeclared(Blocked):
    """Marks a handler hidden by a function's declared row: performing its effect
    inside the function raises `UndeclaredEffectError`."""

    __slots__ = ("function", "row")
    handler_code_sees = True

    def __init__(self, function: str, row: tuple[Effect[Any], ...]) -> None:
        self.function = function
        self.row = row

    def raise_for(self, effect: Effect[Any]) -> NoReturn:
        declared = _row_text(self.row)
        if not self.row:
            declared += " (a pure entry point)"
        raise UndeclaredEffectError(
            f"{self.function} performed {effect!r}, which is not in its effect row "
            f"{declared}. Add it to the row (@{_row_text((*self.row, effect))}) so that "
            f"callers handle it, or handle it inside {self.function} "
            f"(`with {effect.handler_example()}: ...`){effect.where_variable()}."
        )


def uses(*effects: Effect[Any]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Declare the effect row of a function: the effects it may perform.

    The row lists the effects the function performs itself or through its callees,
    minus those it handles inside; ``@effax.uses()`` marks a pure entry point. The
    decorated function keeps its signature.

    - At run time, performing an effect outside the innermost declared row (and not
      handled inside the function) raises :class:`effax.UndeclaredEffectError`,
      naming the function, the effect and the row. An effect with no handler at all
      raises :class:`effax.UnhandledEffectError` as usual.
    - `effax.handle`, `effax.jit` and the effect-aware control-flow and transform
      wrappers plumb only the declared effects into a compiled function, so
      unrelated handlers around the call cost nothing (no extra inputs, no retrace
      when their values change).
    - The mypy plugin ``effax_stubs.mypy_plugin`` checks the same rows statically.
      A row is what the function *may* perform, so the plugin holds every call to
      the whole row: a caller handles each of its effects, or lists it in its own
      row, even an effect that call's path never reaches (a key drawn only in
      training) and an ``Ask`` with a default (which needs no handler, but is still
      performed).
    - An ``async def`` function's row holds while its body runs (when awaited, in
      the awaiting task); a generator function cannot declare one (its body runs a
      step at a time, after the call): `EffectTypeError`.

    **Arguments:**

    - `*effects`: the effects of the row (order kept, duplicates dropped).

    **Returns:** a decorator that returns a function with the same signature.

    **Example:**

    >>> import effax
    >>> temperature = effax.Ask[float]("temperature")
    >>> steps = effax.State[int]("steps")
    >>> @effax.uses(temperature)
    ... def scaled(x: float) -> float:
    ...     return x * temperature.ask()
    >>> @effax.uses(temperature)
    ... def sneaky(x: float) -> float:
    ...     steps.set(steps.get() + 1)
    ...     return scaled(x)
    >>> with effax.handlers(temperature.provide(2.0), steps.init(0)):
    ...     scaled(3.0)
    6.0
    >>> with effax.handlers(temperature.provide(2.0), steps.init(0)):
    ...     sneaky(3.0)
    Traceback (most recent call last):
    ...
    effax.UndeclaredEffectError: sneaky performed State('steps'), which is not in its effect row ...

    """
    for effect in effects:
        if not isinstance(effect, Effect):
            raise EffectTypeError(
                "effax.uses(...) takes effects (e.g. `@effax.uses(temperature, steps)`), "
                f"but got {type(effect).__name__}: {effect!r}."
                + (_PARENTHESES if callable(effect) else "")
            )
    row = tuple(dict.fromkeys(effects))
    declared = frozenset(row)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if not callable(fn):
            raise EffectTypeError(
                f"effax.uses(...) decorates functions, but got {type(fn).__name__}: {fn!r}."
            )
        name = getattr(fn, "__qualname__", None) or repr(fn)
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise EffectTypeError(
                f"effax.uses(...) decorates {name}, a generator function, whose body "
                "runs a step at a time after the call returns, where a row cannot hide "
                "the handlers outside it. Declare the row on a function that returns "
                "the values, or on the function that consumes the generator."
            )
        # One marker per decorated function: it is immutable, so each call only
        # copies the stack.
        marker = Undeclared(name, row)

        def hiding() -> Any:
            """The current stack's handlers of effects outside the row, hidden (the
            token to pop), or None where there are none."""
            hidden = {
                effect: (handler, marker)
                for effect, (handler, ref) in _context.current_stack().items()
                if effect not in declared and ref is not marker
            }
            return _context.push_entries(hidden) if hidden else None

        if inspect.iscoroutinefunction(fn):
            # its body runs when awaited, in the awaiting task: the row applies there
            @ft.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                token = hiding()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    if token is not None:
                        _context.pop(token)

            declare_row(run_async, row)
            return run_async  # type: ignore[return-value]

        @ft.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            token = hiding()
            try:
                return fn(*args, **kwargs)
            finally:
                if token is not None:
                    _context.pop(token)

        # After `ft.wraps`, which copies a wrapped function's own declared row.
        declare_row(wrapper, row)
        return wrapper

    return decorate
