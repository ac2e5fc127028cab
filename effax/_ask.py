"""`Ask`: a context value, and `Provider`, its handler."""

from __future__ import annotations

import enum
from typing import Any, Final, Generic, TypeVar

import attrs

from . import _trace
from ._arguments import check_bool, check_unleaked
from ._context import run_where
from ._effect import Effect
from ._errors import EffectTypeError, UnhandledEffectError
from ._protocol import Fields, Handler, PyTree

__all__ = ["NO_DEFAULT", "Ask", "Provider"]

T = TypeVar("T")


class _NoDefault(enum.Enum):
    """The type of `NO_DEFAULT`: an `Ask` declared without a default."""

    NO_DEFAULT = enum.auto()

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Final = _NoDefault.NO_DEFAULT


class Ask(Effect["Provider[T]"], Generic[T]):
    """A context value: library code asks for it, the program entry provides it.

    With `static=False` (the default) the value is a pytree of arrays and crosses
    ``jax.jit`` as an input, so changing it never retraces. With `static=True` it must
    be hashable; it becomes part of the compilation cache key and is a Python
    constant inside (use it for configuration that changes the traced code).

    With a `default`, `ask()` answers it where no handler is installed (as
    `contextvars.ContextVar` does); a compiled call traced without a handler is
    traced again once one is installed. A handler that cannot be read here (one
    outside a raw ``jax.jit``) is still an error, not the default, and so is an
    interceptor (`effax.intercept`) that forwards ``ask()`` to no handler outside it.

    **Example:**

    >>> import effax
    >>> temperature = effax.Ask[float]("temperature")
    >>> with temperature.provide(0.5):
    ...     temperature.ask()
    0.5
    >>> verbose = effax.Ask[bool]("verbose", static=True, default=False)
    >>> verbose.ask()
    False

    """

    __slots__ = ("default", "static")
    handler_hint = "{name}.provide(value)"
    operations = ("ask",)
    static: bool
    default: T | _NoDefault

    def __init__(
        self, name: str, *, static: bool = False, default: T | _NoDefault = NO_DEFAULT
    ) -> None:
        super().__init__(name)
        check_bool(static, "static", f"effax.Ask({name!r}, ...)")
        self.static = static
        if static and default is not NO_DEFAULT:
            _check_hashable(self, default, "default")
        if default is not NO_DEFAULT:
            check_unleaked(default, "its default", f"effax.Ask({name!r}, default=...)")
        self.default = default

    @_trace.api_boundary
    def ask(self) -> T:
        """The value provided by the innermost handler (or the default, if the
        effect has one and no handler is installed)."""
        default = self.default
        if default is NO_DEFAULT:
            handler = self.handler()
            return handler.ask() if handler._effax_own else run_where(self, handler, handler.ask)
        try:
            handler = self.handler()
        except UnhandledEffectError:
            return default
        return handler.ask() if handler._effax_own else run_where(self, handler, handler.ask)

    def provide(self, value: T) -> Provider[T]:
        """A handler that answers `ask()` with `value`."""
        if self.static:
            _check_hashable(self, value, "value")
        check_unleaked(value, "its value", f"{self!r}.provide(...)")
        return Provider(self, value)

    def uncompilable_fix(self, where: str) -> str:
        return (
            f"Declare the effect with static=True (`Ask[...]({self.name!r}, static=True)`) "
            "to pass a hashable Python value as part of the cache key, or provide an array."
        )

    def traced_value_hint(self) -> str:
        if self.static:  # already a Python constant inside
            return ""
        return (
            f"{self!r} crosses the compiled call as a traced input, so its value is not "
            "known to Python control flow (if, while, int(), indexing with it) while "
            f"tracing. Declare it with static=True (`Ask[...]({self.name!r}, "
            "static=True)`): its value is then a Python constant and part of the cache "
            "key (a new value retraces); or use jnp.where / effax.cond on it."
        )


def _check_hashable(effect: Ask[Any], value: Any, what: str) -> None:
    try:
        hash(value)
    except TypeError as exc:
        raise EffectTypeError(
            f"{effect!r} is static, so its {what} must be hashable (it is part of the "
            f"jit cache key), but got an unhashable {type(value).__name__}: {exc}. "
            "Pass a hashable value (a tuple, a frozen dataclass), or declare the "
            "effect with static=False to pass arrays as traced inputs."
        ) from None


@attrs.define(eq=False)
class Provider(Handler[Ask[T]]):
    """The handler of an :class:`Ask`: answers with a fixed value.

    Made by `Ask.provide`; its `value` is the provided value.

    **Example:**

    >>> import effax
    >>> lr = effax.Ask[float]("lr")
    >>> with lr.provide(0.1) as provider:
    ...     lr.ask()
    0.1
    >>> provider.value, provider.effect
    (0.1, Ask('lr'))

    """

    effect: Ask[T]
    provided: T

    @property
    def value(self) -> T:
        return self.provided

    def ask(self) -> T:
        """The operation of `Ask`: the provided value."""
        return self.provided

    @property
    def fields(self) -> Fields:
        return _STATIC_PROVIDED if self.effect.static else _TRACED_PROVIDED

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Provider[T]:
        return cls(effect, static if effect.static else const)


# A static value is part of the cache key; a traced one is an input of the region.
_STATIC_PROVIDED = Fields(static="provided")
_TRACED_PROVIDED = Fields(const="provided")
