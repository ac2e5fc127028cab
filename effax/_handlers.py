"""`handlers(...)`: installing several handlers at once, and `Handlers`, the bundle."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, overload

from . import _context
from ._ask import Ask
from ._effect import Effect
from ._emit import Emit
from ._errors import EffectTypeError, EffectUsageError
from ._protocol import Handler, check_home
from ._random_key import KeyState, RandomKey
from ._state import State

__all__ = ["Handlers", "handlers"]

T = TypeVar("T")
S = TypeVar("S")
H = TypeVar("H", bound="Handler[Any]")


class Handlers(Mapping[Effect[Any], Any]):
    """The installed handlers, keyed by effect: ``hs[effect]`` is that handler's state.

    For a `State` it is the (final) value, for an `Emit` the list of collected
    values, for an `Ask` the provided value, for a `RandomKey` its `KeyState`.
    Made by `effax.handlers`; a context manager that installs them all (later ones
    innermost), and a read-only mapping that stays readable after its scope ends.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> steps = effax.State[jnp.ndarray]("steps")
    >>> log = effax.Emit[int]("log")
    >>> with effax.handlers(steps.init(jnp.int32(0)), log.collect(), effax.rng.seed(0)) as hs:
    ...     steps.set(steps.get() + 1)
    ...     log.emit(7)
    ...     _ = effax.rng.next_key()
    >>> int(hs[steps]), hs[log], hs[effax.rng].counter
    (1, [7], 1)
    >>> len(hs), type(hs.handler(log)).__name__
    (3, 'Collector')

    """

    __slots__ = ("_all", "_handlers")

    def __init__(self, handlers: tuple[Handler[Any], ...]) -> None:
        for handler in handlers:
            if not isinstance(handler, Handler):
                raise EffectTypeError(
                    "effax.handlers(...) takes handlers (e.g. `temperature.provide(0.5)`, "
                    f"`steps.init(0)`), but got {type(handler).__name__}: {handler!r}."
                )
        self._all = handlers
        # Per effect: the handler whose state `hs[effect]` shows. Interceptors
        # (`forwards`) may follow the handler they forward to.
        self._handlers: dict[Effect[Any], Handler[Any]] = {}
        for handler in handlers:
            before = self._handlers.get(handler.effect)
            if before is None:
                self._handlers[handler.effect] = handler
            elif not handler.forwards:
                raise EffectUsageError(
                    f"effax.handlers(...) got two handlers of {handler.effect!r}"
                    + (
                        f"; {before!r} comes first, so it is outside the other and no "
                        "operation would reach it. Put an interceptor after the handler it "
                        "forwards to."
                        if before.forwards
                        else "; only one of them could be installed. Pass one handler per "
                        "effect, or nest two `with` blocks if the inner one should shadow "
                        "the outer one."
                    )
                )

    @overload
    def __getitem__(self, effect: State[S]) -> S: ...
    @overload
    def __getitem__(self, effect: Emit[T]) -> list[T]: ...
    @overload
    def __getitem__(self, effect: Ask[T]) -> T: ...
    @overload
    def __getitem__(self, effect: RandomKey) -> KeyState: ...
    @overload
    def __getitem__(self, effect: Effect[Any]) -> Any: ...
    def __getitem__(self, effect: Effect[Any]) -> Any:
        try:
            return self._handlers[effect].value
        except KeyError:
            raise KeyError(f"No handler for {effect!r} among these handlers.") from None

    def handler(self, effect: Effect[H]) -> H:
        """The handler object installed for `effect`."""
        return self._handlers[effect]  # type: ignore[return-value]

    def __iter__(self) -> Iterator[Effect[Any]]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)

    def __enter__(self) -> Handlers:
        for handler in self._all:
            check_home(handler)
        _context.enter_block(self, self._all)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _context.exit_block(self)


def handlers(*handlers: Handler[Any]) -> Handlers:
    """Install several handlers at once (later ones innermost).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[float]("scale")
    >>> total = effax.State[jnp.ndarray]("total")
    >>> with effax.handlers(scale.provide(2.0), total.init(jnp.float32(0))) as hs:
    ...     total.set(total.get() + scale.ask())
    ...     total.set(total.get() + scale.ask())
    >>> float(hs[total])
    4.0

    """
    return Handlers(handlers)
