"""`intercept`: a handler that reinterprets some operations of an effect and
forwards the rest, and `Interceptor`, its class.

An interceptor answers the operations it names with ``fn(outer, *args)``, where
`outer` is the handler it shadows (`Handler.outer`), and forwards every other
operation to `outer` unchanged. It does not cross a traced boundary as a handler:
`chain_of` finds the handler its chain reaches, which crosses alone (plumbed,
rebuilt and written back as it would be without interceptors), and the chain is
recorded in the region's plan as static `Wrapper`s, re-made around the rebuilt
handler inside. A region whose body never performs the effect plumbs none of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar, overload

from ._context import Obstacle, run_at, run_where
from ._effect import Effect, raise_obstacle
from ._errors import EffectLeakError, EffectTypeError, EffectUsageError, UnhandledEffectError
from ._protocol import Fields, Handler, PyTree

if TYPE_CHECKING:
    import jax

    from ._ask import Ask, Provider
    from ._emit import Collector, Emit
    from ._random_key import KeyStream, RandomKey
    from ._recorder import TapHandler
    from ._state import State, StateCell
    from ._state_dict import StateDict, StateDictCell
    from ._tap import Tap

__all__ = ["Chain", "Interceptor", "Unreached", "Wrapper", "chain_of", "intercept", "wrapped"]

E = TypeVar("E", bound="Effect[Any]")
# Covariant, as `Handler`'s parameter is: `outer` is typed through it.
E_co = TypeVar("E_co", bound="Effect[Any]", covariant=True)
H_out = TypeVar("H_out", bound=Handler[Any])
T = TypeVar("T")

# The operations an interceptor answers: ((name, fn), ...) sorted by name. Static:
# part of a compiled call's cache key, compared by each function's identity.
Operations = tuple[tuple[str, Callable[..., Any]], ...]


def _outer_required(interceptor: Interceptor[Any], what: str) -> NoReturn:
    """Raise the error of `interceptor` using the handler outside it (`what` does,
    e.g. "forwards set() unchanged, which") where there is none."""
    effect = interceptor.effect
    raise UnhandledEffectError(
        f"{interceptor!r} {what} requires a handler of {effect!r} outside it, but none is "
        f"installed around it: install one, e.g. `with {effect.handler_example()}: ...`"
        f"{effect.where_variable()}. An interceptor's function that calls no operation "
        "of `outer` needs none."
    ) from None


class _NoOuter:
    """`outer`, for an interceptor's function where there is no handler outside
    the interceptor (or none that can be used here): the function may ignore it
    (`intercept(t, ask=lambda outer: 5.0)` answers 5.0); using it raises."""

    __slots__ = ("interceptor", "operation")

    def __init__(self, interceptor: Interceptor[Any], operation: str) -> None:
        self.interceptor = interceptor
        self.operation = operation

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            outer = self.interceptor.outer()  # raises why it cannot be used here
        except UnhandledEffectError:
            _outer_required(
                self.interceptor,
                f"answers {self.operation}() with a function that calls outer.{name}(), which",
            )
        return getattr(outer, name)

    def __repr__(self) -> str:
        return f"<no handler outside {self.interceptor!r}>"


class Interceptor(Handler[E_co]):
    """The handler `effax.intercept` makes: answers the operations it names with
    ``fn(outer, *args)``, forwards every other operation to the handler outside it.

    Inside a traced region (`effax.jit`, `effax.scan`, `effax.vmap`, ...) it is
    made again (without ``__init__``: from its operations and `parameters`) around
    the handler it forwards to, rebuilt there, which it then reaches directly;
    outside, `outer()` finds that handler on the installed stack. An
    interceptor has no state of its own: `value` (what ``hs[effect]`` shows) is
    that of the handler it forwards to, and snapshots leave it out. A forwarding
    handler of your own subclasses it and defines the operations it answers as
    methods (``def emit(self, v): self.outer().emit(2 * v)``).

    **Example:** nested interceptors of one `Emit`; the innermost sees the value first.

    >>> import effax
    >>> log = effax.Emit[float]("log")
    >>> double = effax.intercept(log, emit=lambda outer, v: outer.emit(2 * v))
    >>> plus1 = effax.intercept(log, emit=lambda outer, v: outer.emit(v + 1))
    >>> with effax.handlers(log.collect(), double, plus1) as hs:
    ...     log.emit(1.0)
    >>> hs[log]
    [4.0]

    """

    __slots__ = ("_effax_holds", "_ops", "effect", "operations")
    forwards = True

    def __init__(
        self, effect: E_co, operations: Operations, outer: Handler[Any] | None = None
    ) -> None:
        # It holds no arrays (its functions are static), so it may be installed
        # under any trace: it has no home trace to escape from.
        object.__setattr__(self, "_effax_home", None)
        self.effect = effect
        self.operations = operations
        self._ops = dict(operations)
        # The handler it forwards to when it holds it itself: inside a traced
        # region, the one rebuilt there (an `Unreached`: none it could use), or
        # one bound by `over`; None: the one outside it on the stack.
        self._effax_holds = outer

    def __repr__(self) -> str:
        names = ", ".join(f"{name}=..." for name, _ in self.operations)
        return f"effax.intercept({self.effect!r}, {names})"

    def outer(self: Interceptor[Effect[H_out]]) -> H_out:
        outer = self._effax_holds
        if outer is None:
            return super().outer()
        if not isinstance(outer, Unreached):
            return outer  # type: ignore[return-value]
        if outer.why is not None:
            raise_obstacle(self.effect, outer.why)
        raise UnhandledEffectError(
            f"{self!r} forwarded {self.effect!r} to the handler outside it, but there "
            f"was none around the traced region it runs in: install one, e.g. `with "
            f"{self.effect.handler_example()}: ...`{self.effect.where_variable()}, "
            "around it. An interceptor only reinterprets an operation; a handler "
            "outside it answers it."
        )

    def over(self, handler: Handler[Any]) -> Interceptor[E_co]:
        """This interceptor, forwarding to `handler` wherever it is installed (not to
        the handler outside it): how ``effax.handle(fn, cell, interceptor)`` chains
        the handlers it is given."""
        return type(self)._copy(self.effect, self.operations, self.parameters(), handler)

    def parameters(self) -> tuple[tuple[str, Hashable], ...]:
        """What a subclass keeps of its own (attributes set in its ``__init__``,
        ``(name, value)`` sorted by name): static, as the operations are, so part of
        a compiled call's cache key (another value traces again), and given back to
        the copies made inside traced regions, which are made without calling
        ``__init__``. Values that change from call to call belong in an effect."""
        if type(self) is Interceptor:  # (what `effax.intercept` makes: nothing of its own)
            return ()
        mro = type(self).__mro__
        names = [n for c in mro[: mro.index(Interceptor)] for n in _slots(c)]
        own = dict(getattr(self, "__dict__", {}))
        own.update((n, getattr(self, n)) for n in names if hasattr(self, n))
        parameters = tuple(sorted(own.items()))
        try:
            hash(parameters)
        except TypeError:
            unhashable = [n for n, v in parameters if not _hashable(v)]
            raise EffectTypeError(
                f"{type(self).__name__}, a forwarding handler of {self.effect!r}, keeps "
                f"{', '.join(repr(n) for n in unhashable)} as a parameter, but parameters "
                "are static (part of a compiled call's cache key, as the operations are) "
                "and must be hashable. Keep a tuple or a Python number there, or pass a "
                "value that changes through an effect of its own (an effax.Ask or State)."
            ) from None
        return parameters

    @classmethod
    def _copy(
        cls,
        effect: Any,
        operations: Operations,
        parameters: tuple[tuple[str, Any], ...],
        outer: Handler[Any] | None,
    ) -> Interceptor[Any]:
        """An interceptor of this class over `outer`, made without ``__init__`` (a
        subclass's takes arguments of its own): the operations, then the subclass's
        parameters."""
        self = cls.__new__(cls)
        Interceptor.__init__(self, effect, operations, outer)
        for name, value in parameters:
            object.__setattr__(self, name, value)
        return self

    @property
    def batch_distinct(self) -> bool:  # type: ignore[override]
        # as the handler its chain reaches: a key stream's interceptor is not read
        # through a raw jax.vmap either
        target = chain_of(self).target
        return target.distinct if isinstance(target, Unreached) else target.batch_distinct

    def __getattr__(self, name: str) -> Any:
        # Only names the class does not define get here: the effect's operations.
        if name.startswith("_"):
            raise AttributeError(name)
        fn = self._ops.get(name)
        if fn is not None:
            # a function that calls no operation of `outer` needs no handler outside
            try:
                outer: Any = self.outer()
            except (UnhandledEffectError, EffectLeakError):
                outer = _NoOuter(self, name)
            # run where this interceptor is installed (also when reached by forwarding)
            return functools.partial(run_where, self.effect, self, fn, outer)
        derived = self.effect.derived_operations.get(name)
        if derived is not None:
            return functools.partial(derived, self)
        try:
            outer = self.outer()
        except UnhandledEffectError:
            _outer_required(self, f"forwards {name}() unchanged, which")
        # forwarded unchanged: the operation runs where the handler outside is installed
        return functools.partial(run_at, self.effect, outer, getattr(outer, name))

    @property
    def value(self) -> Any:
        return self.outer().value


# --- chains: what crosses a traced boundary for an interceptor -----------------------


class Wrapper(NamedTuple):
    """One interceptor of a chain, as it crosses a traced boundary: static (its
    class, its operations and the subclass's own parameters; part of a compiled
    call's cache key) and made again around the rebuilt handler inside (`around`)."""

    cls: type[Interceptor[Any]]
    operations: Operations
    parameters: tuple[tuple[str, Hashable], ...]

    def around(self, effect: Effect[Any], outer: Handler[Any]) -> Interceptor[Any]:
        """The interceptor, forwarding to `outer` (the handler rebuilt inside, or
        the next wrapper of the chain)."""
        return self.cls._copy(effect, self.operations, self.parameters, outer)


def wrapped(
    wrappers: tuple[Wrapper, ...], effect: Effect[Any], handler: Handler[Any]
) -> Handler[Any]:
    """What is installed inside a traced region for `handler`, rebuilt there: the
    interceptors of `wrappers` (innermost first) re-made around it."""
    for wrapper in reversed(wrappers):
        handler = wrapper.around(effect, handler)
    return handler


class Chain(NamedTuple):
    """What a handler found for an effect stands for across a traced boundary:
    the handler that crosses (`target`: the handler itself, or the one its chain
    of interceptors reaches), and the interceptors around it (`wrappers`,
    innermost first; none for a handler that is not an interceptor)."""

    target: Handler[Any]
    wrappers: tuple[Wrapper, ...]


def chain_of(handler: Handler[Any]) -> Chain:
    """The chain of `handler` (the handler installed for its effect, or given to
    `effax.handle`): through each interceptor, the handler it forwards to (the one
    it holds, or the one outside it on the installed stack), up to the handler
    that answers. If there is none that can be used here, an `Unreached` crosses
    in its place (forwarding to it inside raises the error it would raise here).

    The one place that answers "which handler does this interceptor forward to"
    for the plumbing: `_visible`, `_environment` and `_program` ask it once per
    region or call, and plan, rebuild and write back the target alone.
    """
    wrappers: list[Wrapper] = []
    while isinstance(handler, Interceptor):
        wrappers.append(Wrapper(type(handler), handler.operations, handler.parameters()))
        outer = handler._effax_holds
        if outer is None:
            outer, why = handler.effect.shadowed(handler, track="plumbing")
            if why is not None or outer is None:
                outer = Unreached(handler.effect, why, outer is not None and outer.batch_distinct)
        handler = outer
    return Chain(handler, tuple(wrappers))


class Unreached(Handler[Any]):
    """In place of the handler an interceptor chain forwards to, where there is
    none it can use (`why`: None, no handler at all; else the obstacle to the one
    outside, whose `batch_distinct` is `distinct`): crosses with nothing but `why`
    (static), and an interceptor forwarding to it raises the error of forwarding
    where it is."""

    __slots__ = ("distinct", "effect", "why")
    fields = Fields(static="why")

    def __init__(self, effect: Effect[Any], why: Obstacle | None, distinct: bool = False) -> None:
        self.effect = effect
        self.why = why
        self.distinct = distinct

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Unreached:
        return cls(effect, static)

    @property
    def value(self) -> Any:
        return None

    def __repr__(self) -> str:
        return f"<no handler of {self.effect!r} to forward to>"


def _slots(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    slots = (slots,) if isinstance(slots, str) else slots
    return tuple(s for s in slots if s not in ("__dict__", "__weakref__"))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


# Typed per kind of effect, so that the checkers know each function's arguments
# (`outer` is the handler its effect's `handler()` returns); any other effect, or
# an operation a kind does not have, falls to the last form (and run time says).
@overload
def intercept(effect: Ask[T], *, ask: Callable[[Provider[T]], T] = ...) -> Interceptor[Ask[T]]: ...
@overload
def intercept(
    effect: State[T],
    *,
    get: Callable[[StateCell[T]], T] = ...,
    set: Callable[[StateCell[T], T], object] = ...,
    modify: Callable[[StateCell[T], Callable[[T], T]], T] = ...,
) -> Interceptor[State[T]]: ...
@overload
def intercept(
    effect: StateDict[T],
    *,
    get: Callable[[StateDictCell[T], str, T | Callable[[], T] | None], T] = ...,
    set: Callable[[StateDictCell[T], str, T], object] = ...,
) -> Interceptor[StateDict[T]]: ...
@overload
def intercept(
    effect: RandomKey, *, next_key: Callable[[KeyStream], jax.Array] = ...
) -> Interceptor[RandomKey]: ...
@overload
def intercept(
    effect: Emit[T], *, emit: Callable[[Collector[T], T], object] = ...
) -> Interceptor[Emit[T]]: ...
@overload
def intercept(
    effect: Tap[T], *, tap: Callable[[TapHandler[T], str, T], T] = ...
) -> Interceptor[Tap[T]]: ...
@overload
def intercept(effect: E, **operations: Callable[..., Any]) -> Interceptor[E]: ...
def intercept(effect: E, **operations: Callable[..., Any]) -> Interceptor[E]:
    """A handler of `effect` that answers the named operations with
    ``fn(outer, *args)`` and forwards every other one, unchanged, to the handler
    outside it (`outer`).

    `fn` may call any operation of `outer` (or none: then the operation is not
    forwarded, and no handler outside is needed; a function that calls `outer`, or
    an operation forwarded unchanged, raises `UnhandledEffectError` where there is
    none). Interceptors nest: the innermost sees an operation first. The
    functions are static, as ``jax.jit`` treats functions: a compiled call is
    reused while the same function objects are installed (a new lambda on every
    call traces again), and arrays they close over are constants of the compiled
    program; values that change belong in an effect of their own.

    **Example:** scale an emitted loss; double a context value.

    >>> import jax.numpy as jnp, effax
    >>> loss = effax.Emit[jnp.ndarray]("loss")
    >>> t = effax.Ask[float]("t")
    >>> def f():
    ...     loss.emit(jnp.float32(3.0))
    ...     return t.ask()
    >>> with effax.handlers(loss.collect(), t.provide(1.5)) as hs:
    ...     with effax.intercept(loss, emit=lambda outer, v: outer.emit(0.5 * v)), \\
    ...          effax.intercept(t, ask=lambda outer: 2 * outer.ask()):
    ...         y = effax.jit(f)()
    >>> float(y), [float(v) for v in hs[loss]]
    (3.0, [1.5])

    """
    if not isinstance(effect, Effect):
        raise EffectTypeError(
            f"effax.intercept(effect, ...) takes an effect (e.g. `effax.Emit[float]('loss')`), "
            f"but got {type(effect).__name__}: {effect!r}."
        )
    known = effect.operations
    for name, fn in operations.items():
        if known is not None and name not in known:
            raise EffectUsageError(
                f"effax.intercept({effect!r}, {name}=...): {type(effect).__name__} has no "
                f"operation {name!r}; its operations are {', '.join(known)}."
            )
        if not callable(fn):
            raise EffectTypeError(
                f"effax.intercept({effect!r}, {name}=...) takes a function "
                f"`{name}(outer, *args)`, but got {type(fn).__name__}: {fn!r}."
            )
    return Interceptor(effect, tuple(sorted(operations.items())))
