"""`intercept`: a handler that reinterprets some operations of an effect and
forwards the rest, and `Interceptor`, its class.

An interceptor answers the operations it names with ``fn(outer, *args)``, where
`outer` is the handler it shadows (`Handler.outer`), and forwards every other
operation to `outer` unchanged. Across a traced boundary it crosses as one
handler together with the handler it forwards to (its export is that handler's,
its static part names both), so a chain of interceptors over a cell is plumbed,
rebuilt and written back as the cell alone would be, and a region whose body
never performs the effect plumbs none of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar, overload

from ._context import run_at, run_where
from ._effect import Effect, raise_obstacle
from ._errors import EffectLeakError, EffectTypeError, EffectUsageError, UnhandledEffectError
from ._protocol import BatchPolicy, Export, Handler, Outcome, PyTree

if TYPE_CHECKING:
    import jax

    from ._ask import Ask, Provider
    from ._emit import Collector, Emit
    from ._random_key import KeyStream, RandomKey
    from ._recorder import TapHandler
    from ._state import State, StateCell
    from ._state_dict import StateDict, StateDictCell
    from ._tap import Tap

__all__ = ["Interceptor", "intercept"]

E = TypeVar("E", bound="Effect[Any]")
# Covariant, as `Handler`'s parameter is: `outer` is typed through it.
E_co = TypeVar("E_co", bound="Effect[Any]", covariant=True)
H_out = TypeVar("H_out", bound=Handler[Any])
T = TypeVar("T")

# The operations an interceptor answers: ((name, fn), ...) sorted by name. Static:
# part of a compiled call's cache key, compared by each function's identity.
Operations = tuple[tuple[str, Callable[..., Any]], ...]

_NO_OUTER = object()


class _Unreachable(NamedTuple):
    """In place of the handler an interceptor forwards to, when that handler could
    not enter the traced region the interceptor was rebuilt in: why not."""

    why: Any


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
    rebuilt together with the handler it forwards to, which it then reaches
    directly; outside, `outer()` finds that handler on the installed stack. An
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

    __slots__ = ("_ops", "_outer", "effect", "operations")
    forwards = True

    def __init__(self, effect: E_co, operations: Operations, outer: Any = _NO_OUTER) -> None:
        # It holds no arrays (its functions are static), so it may be installed
        # under any trace: it has no home trace to escape from.
        object.__setattr__(self, "_effax_home", None)
        self.effect = effect
        self.operations = operations
        self._ops = dict(operations)
        # The handler it forwards to when it holds it itself: rebuilt with it inside
        # a traced region (None: there was none outside), or bound by `over`;
        # `_NO_OUTER`: the one outside it on the stack.
        self._outer = outer

    def __repr__(self) -> str:
        names = ", ".join(f"{name}=..." for name, _ in self.operations)
        return f"effax.intercept({self.effect!r}, {names})"

    def outer(self: Interceptor[Effect[H_out]]) -> H_out:
        outer = self._outer
        if outer is _NO_OUTER:
            return super().outer()
        if isinstance(outer, Handler):
            return outer  # type: ignore[return-value]
        if isinstance(outer, _Unreachable):
            raise_obstacle(self.effect, outer.why)
        raise UnhandledEffectError(
            f"{self!r} forwarded {self.effect!r} to the handler outside it, but there "
            f"was none around the traced region it runs in: install one, e.g. `with "
            f"{self.effect.handler_example()}: ...`{self.effect.where_variable()}, "
            "around it. An interceptor only reinterprets an operation; a handler "
            "outside it answers it."
        )

    def reaches(self, handler: Handler[Any]) -> bool:
        if self is handler:
            return True
        outer = self._outer
        return isinstance(outer, Handler) and outer.reaches(handler)

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
        outer: Any,
    ) -> Interceptor[Any]:
        """An interceptor of this class over `outer`, made without ``__init__`` (a
        subclass's takes arguments of its own): the operations, then the subclass's
        parameters."""
        self = cls.__new__(cls)
        Interceptor.__init__(self, effect, operations, outer)
        for name, value in parameters:
            object.__setattr__(self, name, value)
        return self

    def forwards_outward(self) -> bool:
        return self._outer is _NO_OUTER

    @property
    def batch_distinct(self) -> bool:  # type: ignore[override]
        # as the handler it forwards to: a key stream's interceptor is not read
        # through a raw jax.vmap either
        outer = self._outer
        if outer is _NO_OUTER:
            outer = self.effect.shadowed(self, track="plumbing")[0]
        return isinstance(outer, Handler) and outer.batch_distinct

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

    # --- the plumbing protocol: the interceptor crosses with what it forwards to

    def _reached(self) -> Handler[Any] | None:
        """The handler it forwards to, if there is one it can reach from here."""
        outer = self._outer
        if outer is _NO_OUTER:
            outer, why = self.effect.shadowed(self, track="plumbing")
            return outer if why is None else None
        return outer if isinstance(outer, Handler) else None

    def forwarded_to(self) -> Handler[Any] | None:
        return self._reached()

    def export(self) -> Export:
        outer = self._reached()
        return self._wrap(outer, Export() if outer is None else outer.export())

    def _wrap(self, outer: Handler[Any] | None, export: Export) -> Export:
        """The export of the interceptor over `outer`'s: the operations, and what
        `outer` is and exports (rebuilt with it inside)."""
        what: Any = None if outer is None else type(outer)
        if outer is None and self._outer is _NO_OUTER:
            why = self.effect.shadowed(self, track="plumbing")[1]
            if why is not None:  # a handler outside it that cannot be reached here
                what = _Unreachable(why)
        static: Hashable = (
            self.operations,
            self.parameters(),
            what,
            None if export.static is None else (type(export.static), export.static),
        )
        return Export(static, export.const, export.carry)

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Interceptor[Any]:
        operations, parameters, outer_cls, outer_static = static
        outer: Any = outer_cls if isinstance(outer_cls, _Unreachable) else None
        if isinstance(outer_cls, type) and issubclass(outer_cls, Handler):
            inner_static = None if outer_static is None else outer_static[1]
            outer = outer_cls.rebuild(effect, inner_static, const, carry)
        return cls._copy(effect, operations, parameters, outer)

    def outcome(self, *, carry_required: bool) -> Outcome:
        outer = self._reached()
        return Outcome() if outer is None else outer.outcome(carry_required=carry_required)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        outer = self._reached()
        if outer is not None:
            outer.absorb(outcome, steps=steps)

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        outer = self._reached()
        if outer is None:
            return self._wrap(None, Export()), None
        export, axis = outer.batch_export(policy)
        return self._wrap(outer, export), axis

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        outer = self._reached()
        if outer is not None:
            outer.batch_absorb(outcome, policy)

    # effax.cond's and effax.grad's hooks: those of the handler it forwards to, whose
    # outcome its own is. (`align_branch` is asked inside a branch's trace, where
    # that handler cannot be read, only its static layout; it reads nothing else.)
    def align_branch(self, outcome: Outcome, statics: Sequence[Hashable]) -> Outcome:
        outer = self._outer
        if outer is _NO_OUTER:
            outer = self.effect.shadowed(self, track="plumbing")[0]
        if not isinstance(outer, Handler):
            return outcome
        return outer.align_branch(outcome, statics)

    def stacks_in_program_order(self) -> bool:
        outer = self._reached()
        return outer is not None and outer.stacks_in_program_order()

    def check_absorb(self, outcome: Outcome) -> None:
        outer = self._reached()
        if outer is not None:
            outer.check_absorb(outcome)

    def differentiates(self) -> bool:
        outer = self._reached()
        return outer is not None and outer.differentiates()

    def begin_probe(self) -> None:
        self.outer().begin_probe()

    def perturbations(self) -> tuple[Hashable, tuple[Any, ...]]:
        outer: Handler[Any] = self.outer()
        return outer.perturbations()

    def perturb(self, eps: tuple[Any, ...], layout: Hashable) -> None:
        self.outer().perturb(eps, layout)

    def with_cotangents(
        self, outcome: Outcome, layout: Hashable, cotangents: tuple[Any, ...]
    ) -> Outcome:
        outer: Handler[Any] = self.outer()
        return outer.with_cotangents(outcome, layout, cotangents)

    @property
    def value(self) -> Any:
        return self.outer().value

    def snapshot(self) -> PyTree:
        return None  # nothing of its own: the handler it forwards to is snapshotted


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
