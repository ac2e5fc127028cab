"""Effects, handlers and the plumbing protocol.

An *effect* is a typed token declared once at module level (`Ask[float]("t")`).
Library code *performs* it (`t.ask()`); the program entry installs a *handler* for
it (`t.provide(0.5)`), a context manager and a cell holding the handler's state.

Every handler speaks one small protocol, :class:`Handler`, that says what crosses a
traced boundary. `handle`, the control-flow wrappers and the transformation wrappers
are written once against it, so a user-defined effect works everywhere the built-in
ones do.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterator, Mapping
from types import TracebackType
from typing import Any, ClassVar, Generic, Literal, NamedTuple, NoReturn, TypeVar, overload

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from . import _context, _trace
from ._errors import (
    LEAK_EXPLANATION,
    WRITE_LEAK_EXPLANATION,
    EffectLeakError,
    UnhandledEffectError,
)

__all__ = [
    "Ask",
    "Collector",
    "Effect",
    "Emit",
    "Export",
    "Fields",
    "Handler",
    "Handlers",
    "KeyStream",
    "Outcome",
    "Provider",
    "RandomKey",
    "State",
    "StateCell",
    "handlers",
    "rng",
]

T = TypeVar("T")
S = TypeVar("S")
H = TypeVar("H", bound="Handler[Any]")
E = TypeVar("E", bound="Effect[Any]")

PyTree = Any


# --- the plumbing protocol ----------------------------------------------------------

# The context-variable tokens of handlers currently entered as context managers, by
# handler id (entries are removed on exit, so ids are never stale). Kept here rather
# than on the handler so that user-defined handlers need no bookkeeping field.
_ENTERED: dict[int, list[Any]] = {}


class Export(NamedTuple):
    """What a handler sends into a traced region.

    - `static`: a hashable Python value. It is part of the compilation cache key
      (changing it retraces) and is seen as a plain Python value inside.
    - `const`: a pytree of arrays, read-only inside (a loop constant in `scan`).
    - `carry`: a pytree of arrays that the region may update; it comes back out with
      the same structure, shapes and dtypes (the carry of a `scan`).

    A handler's :meth:`Handler.export` returns one; see :class:`Handler` for a
    user-defined handler.

    **Example:** what the built-in handlers export.

    ```python
    >>> import jax.numpy as jnp, effax
    >>> effax.Ask[float]("lr").provide(0.1).export()  # traced input: no retrace
    Export(static=None, const=0.1, carry=None)
    >>> effax.Ask[str]("mode", static=True).provide("train").export()  # cache key
    Export(static='train', const=None, carry=None)
    >>> effax.State[jnp.ndarray]("steps").init(jnp.int32(3)).export()  # updated inside
    Export(static=None, const=None, carry=Array(3, dtype=int32))

    ```
    """

    static: Hashable = None
    const: PyTree = None
    carry: PyTree = None


class Outcome(NamedTuple):
    """What a handler rebuilt inside a traced region sends back out.

    - `static`: a hashable Python value known at trace time (e.g. how many keys were
      drawn); it leaves a compiled function without a device round trip.
    - `carry`: the updated carry (same structure as `Export.carry`), or `None` when
      `static` already says everything and no loop requires the carry.
    - `values`: a pytree of per-call outputs. In a loop of n steps each leaf comes
      back stacked along a new leading axis of size n.

    A handler's :meth:`Handler.outcome` returns one; see :class:`Handler` for a
    user-defined handler.

    **Example:** what the built-in handlers send back out.

    ```python
    >>> import effax
    >>> log = effax.Emit[int]("log")
    >>> with log.collect() as collector:
    ...     log.emit(1)
    ...     log.emit(2)
    >>> collector.outcome(carry_required=False)
    Outcome(static=None, carry=None, values=(1, 2))
    >>> with effax.rng.seed(0) as stream:
    ...     _ = [effax.rng.next_key() for _ in range(3)]
    >>> stream.outcome(carry_required=False)  # 3 keys drawn, known at trace time
    Outcome(static=3, carry=None, values=None)
    >>> stream.outcome(carry_required=True).carry  # a loop also needs the counter
    Array(3, dtype=int32)

    ```
    """

    static: Hashable = None
    carry: PyTree = None
    values: PyTree = None


class BatchPolicy(NamedTuple):
    """How handlers enter a batched region (`effax.vmap`, `effax.shard_map`).

    - `keys`: ``"split"``, each batch element (device) draws its own keys: the
      stream draws one key ``K`` and element ``b`` uses a stream seeded with
      ``fold_in(K, b)``; or ``"shared"``, every element draws the keys the
      unbatched program would.
    - `state`: ``"shared"``, one value for the whole batch (writing a batched value
      raises); or ``"batched"``, the value carries the batch along its leading axis.
    - `axis_names`: the named axes of the region (for `lax.axis_index`).

    `effax.vmap` and `effax.shard_map` build it from their `keys=` and `state=`
    options and pass it to each handler's :meth:`Handler.batch_export` and
    :meth:`Handler.batch_absorb`.

    **Example:** a `StateCell` maps its carry over axis 0 only when state is batched.

    ```python
    >>> import jax.numpy as jnp, effax
    >>> cell = effax.State[jnp.ndarray]("w").init(jnp.zeros(3))
    >>> policy = effax.BatchPolicy(keys="split", state="batched", axis_names=("batch",))
    >>> export, axis = cell.batch_export(policy)
    >>> axis
    0
    >>> cell.batch_export(policy._replace(state="shared"))[1] is None
    True

    ```
    """

    keys: Literal["split", "shared"]
    state: Literal["shared", "batched"]
    axis_names: tuple[Hashable, ...]


class Fields(NamedTuple):
    """Where a handler keeps what crosses a traced boundary, by attribute name.

    A handler class that sets ``fields`` gets :meth:`Handler.export`,
    :meth:`Handler.outcome` and :meth:`Handler.absorb` derived from it, and
    `effax.handle` turns each compiled call into straight-line reads and writes of
    these attributes (no protocol method calls, no `Export`/`Outcome` objects),
    which is what keeps a handled call as cheap as a plain ``jax.jit`` call. Each
    entry is an attribute name, or `None` for "nothing":

    - `static`: read as `Export.static` (hashable; part of the cache key).
    - `const`: read as `Export.const` (read-only inside).
    - `carry`: read as `Export.carry`, sent back out as `Outcome.carry`, and set from
      the outcome by `absorb`.
    - `values`: a list; sent out as `Outcome.values` (a tuple) and extended by
      `absorb` with the values that come back.
    - `advance`: an int that `absorb` advances by ``steps * outcome.static`` when
      the outcome's static part is an int and `steps` is known (then the carry is
      not taken: the count says everything). The derived `outcome` reports no
      count; a handler using `advance` overrides `outcome` to report it, as
      `KeyStream` does (how many keys were drawn).

    Attributes may be properties (a `carry` property needs a setter). A handler's
    `fields` must not change after it is created.

    **Example:** the built-in handlers' fields.

    ```python
    >>> import jax.numpy as jnp, effax
    >>> effax.State[jnp.ndarray]("w").init(jnp.zeros(2)).fields
    Fields(static=None, const=None, carry='value', values=None, advance=None)
    >>> effax.Emit[int]("log").collect().fields
    Fields(static=None, const=None, carry=None, values='values', advance=None)
    >>> effax.rng.seed(0).fields
    Fields(static=None, const='base_key', carry='counter', values=None, advance='offset')

    ```
    """

    static: str | None = None
    const: str | None = None
    carry: str | None = None
    values: str | None = None
    advance: str | None = None


def _no_fields(handler: Handler[Any], method: str) -> NoReturn:
    raise NotImplementedError(
        f"{type(handler).__name__} must either set `fields` (an effax.Fields naming the "
        f"attributes that cross a traced boundary) or override {method}()."
    )


class Handler(abc.ABC, Generic[E]):
    """Base class of every handler: a context manager, a cell, and the plumbing protocol.

    A handler handles one effect (`self.effect`). To cross a traced boundary, the
    runtime calls, in order:

    1. :meth:`export` on the handler installed outside;
    2. :meth:`rebuild` (a classmethod) inside the traced function, with the exported
       parts as traced values, to make the handler installed inside;
    3. :meth:`outcome` on that inner handler after the traced body ran;
    4. :meth:`absorb` on the outer handler, with the outcome, after the call returned
       successfully. If the call raises, nothing is absorbed: the outer handler stays
       exactly as it was. An empty outcome (no static, no carry, no values) may be
       skipped.

    `rebuild` may depend only on its arguments and the class: anything else that
    shapes the traced code belongs in `Export.static`.

    Most handlers only need to say *where* they keep what crosses the boundary: a
    class that sets ``fields`` (an :class:`effax.Fields` of attribute names) gets
    `export`, `outcome` and `absorb` derived from it, and `effax.handle` compiles
    its per-call path into plain attribute reads and writes. A handler may override
    any of the three instead (the runtime then calls it).

    **Example:** a user-defined effect, `Counter`, whose handler `Tally` carries an
    int32 count through traced regions. Its operations reach the handler with
    `self.handler()`.

    ```python
    >>> import attrs, jax.numpy as jnp, effax
    >>> class Counter(effax.Effect["Tally"]):
    ...     def __init__(self, name):
    ...         self.name = name
    ...     def tick(self):
    ...         tally = self.handler()
    ...         tally.count = tally.count + 1
    >>> @attrs.define(eq=False)
    ... class Tally(effax.Handler[Counter]):
    ...     effect: Counter
    ...     count: jnp.ndarray = attrs.field(factory=lambda: jnp.int32(0))
    ...     fields = effax.Fields(carry="count")  # goes in, comes back, is stored
    ...     @property
    ...     def value(self):
    ...         return self.count
    ...     @classmethod
    ...     def rebuild(cls, effect, static, const, carry):
    ...         return cls(effect, carry)
    >>> events = Counter("events")
    >>> with Tally(events) as tally:
    ...     events.tick()  # eagerly
    ...     effax.jit(events.tick)()  # compiled: the count goes in and comes out
    ...     _ = effax.scan(lambda c, x: (c, events.tick()), 0, None, length=3)
    >>> int(tally.value)
    5
    >>> tally.export()  # derived from `fields`
    Export(static=None, const=None, carry=Array(5, dtype=int32))

    ```
    """

    __slots__ = ()
    effect: E

    @property
    def fields(self) -> Fields | None:
        """The attributes that cross a traced boundary (see :class:`effax.Fields`),
        or `None` if the handler overrides `export`, `outcome` and `absorb`."""
        return None

    def export(self) -> Export:
        """What goes into a traced region (derived from `fields` unless overridden)."""
        f = self.fields
        if f is None:
            _no_fields(self, "export")
        return Export(
            None if f.static is None else getattr(self, f.static),
            None if f.const is None else getattr(self, f.const),
            None if f.carry is None else getattr(self, f.carry),
        )

    @classmethod
    @abc.abstractmethod
    def rebuild(cls: type[H], effect: Any, static: Any, const: PyTree, carry: PyTree) -> H:
        """The handler to install inside a traced region, from what `export` sent."""

    def outcome(self, *, carry_required: bool) -> Outcome:
        """What comes out; `carry_required` is true in loop bodies and cond branches.

        Derived from `fields` unless overridden: the carry and the values, no static.
        """
        f = self.fields
        if f is None:
            _no_fields(self, "outcome")
        return Outcome(
            None,
            None if f.carry is None else getattr(self, f.carry),
            None if f.values is None else tuple(getattr(self, f.values)),
        )

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        """Update this (outer) handler from an inner handler's outcome.

        `steps` is how many times the region ran (1 for a call, n for a scan of n
        steps), or `None` where it is not known at trace time (`while_loop`).
        Derived from `fields` unless overridden (see :class:`effax.Fields`).
        """
        f = self.fields
        if f is None:
            _no_fields(self, "absorb")
        if f.advance is not None and type(outcome.static) is int and steps is not None:
            setattr(self, f.advance, getattr(self, f.advance) + steps * outcome.static)
        elif f.carry is not None and outcome.carry is not None:
            setattr(self, f.carry, outcome.carry)
        if f.values is not None and outcome.values is not None:
            getattr(self, f.values).extend(outcome.values)

    @property
    @abc.abstractmethod
    def value(self) -> Any:
        """The handler's state: what ``hs[effect]`` returns."""

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        """What goes into a batched region, and the batch axis of the carry.

        The default shares the handler across the batch (axis `None`): consts and
        carries are broadcast, and a carry that comes out batched is an error.
        """
        return self.export(), None

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        """Absorb the outcome of a batched region (values stacked per element)."""
        self.absorb(outcome, steps=1)

    def __enter__(self: H) -> H:
        _check_home(self)
        _ENTERED.setdefault(id(self), []).append(_context.push((self,)))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tokens = _ENTERED[id(self)]
        token = tokens.pop()
        if not tokens:
            del _ENTERED[id(self)]
        _context.pop(token)

    # The trace the handler was created under (built-in handlers record it): a
    # handler passed to `effax.handle` may not be used under a staging trace that it
    # was created outside of.
    _home: Any


def _check_home(handler: Handler[Any]) -> None:
    """Refuse to install a handler outside the trace it was created under."""
    home = getattr(handler, "_home", None)
    if home is None or home is _trace.current_trace_ref():
        return
    if _trace.reachability(home) != "ok":
        raise EffectLeakError(
            f"The handler of {handler.effect!r} was created under a JAX trace that this "
            "code is not nested in (it escaped the transformation it was made in, e.g. "
            "through a closure or a list), so its values may be tracers of a finished "
            "trace. Create the handler where it is installed, or pass its values out of "
            "the transformation explicitly."
        )


# --- effects -----------------------------------------------------------------------


class _Marker:
    """Stack-entry trace markers that force the slow path of a lookup."""

    __slots__ = ("ref", "used")

    def __init__(self, ref: _trace.TraceRef, used: set[Effect[Any]]) -> None:
        self.ref = ref
        self.used = used


class Blocked(abc.ABC):
    """Stack-entry marker that hides a handler: performing its effect calls
    `raise_for`, and `handle` does not plumb it. Subclasses say why."""

    __slots__ = ()

    @abc.abstractmethod
    def raise_for(self, effect: Effect[Any]) -> NoReturn:
        """Raise the exception for performing `effect` here."""


class Effect(Generic[H]):
    """Base class of effect declarations; effects are compared by identity.

    Two effects with the same name are different effects, each with its own handler.
    Subclass it to declare your own effect (see :class:`Handler`); its operations
    reach the innermost handler with :meth:`handler`.

    **Example:**

    ```python
    >>> import effax
    >>> a, b = effax.Ask[int]("n"), effax.Ask[int]("n")
    >>> a == b, a == a
    (False, True)
    >>> with a.provide(1) as provider, b.provide(2):
    ...     a.ask(), b.ask(), a.handler() is provider
    (1, 2, True)

    ```
    """

    __slots__ = ("name",)
    handler_hint: ClassVar[str] = "a handler"
    name: str

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
                f"the call, e.g. `with {self.handler_hint}: ...` or "
                f"`effax.handle(fn, {self.handler_hint})`."
            )
        handler, ref = entry
        if ref is not _trace.current_trace_ref():
            self._check_entry(ref)
        return handler  # type: ignore[return-value]

    def _check_entry(self, ref: Any) -> None:
        if isinstance(ref, Blocked):
            _context.note_missing(self)
            ref.raise_for(self)
        if type(ref) is _Marker:
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

    def _check_write(self, value: Any, ref: Any) -> None:
        if type(ref) is _Marker:
            ref = ref.ref
        if _trace.foreign_tracers(jax.tree.leaves(value), ref):
            raise EffectLeakError(
                f"Writing a traced value to {self!r}, whose handler was installed outside "
                f"the JAX transformation that produced it. {WRITE_LEAK_EXPLANATION}"
            )

    def handler_for_write(self, value: Any) -> H:
        """`handler()`, refusing `value` if it holds a tracer that would outlive its
        transformation once stored in the handler (raises `EffectLeakError`)."""
        handler = self.handler()
        ref = _context.current_stack()[self][1]
        if ref is not _trace.current_trace_ref():
            self._check_write(value, ref)
        return handler


def _init_effect(effect: Effect[Any], name: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"An effect's name must be a string, got {type(name).__name__}.")
    object.__setattr__(effect, "name", name)


# --- Ask --------------------------------------------------------------------------


class Ask(Effect["Provider[T]"], Generic[T]):
    """A context value: library code asks for it, the program entry provides it.

    With `static=False` (the default) the value is a pytree of arrays and crosses
    ``jax.jit`` as an input, so changing it never retraces. With `static=True` it must
    be hashable; it becomes part of the compilation cache key and is a Python
    constant inside (use it for configuration that changes the traced code).

    **Example:**

    ```python
    >>> import effax
    >>> temperature = effax.Ask[float]("temperature")
    >>> with temperature.provide(0.5):
    ...     temperature.ask()
    0.5

    ```
    """

    __slots__ = ("static",)
    static: bool

    def __init__(self, name: str, *, static: bool = False) -> None:
        _init_effect(self, name)
        self.static = static

    @property
    def handler_hint(self) -> str:  # type: ignore[override]
        return f"{self.name}.provide(value)"

    def ask(self) -> T:
        """The value provided by the innermost handler."""
        return self.handler().provided

    def provide(self, value: T) -> Provider[T]:
        """A handler that answers `ask()` with `value`."""
        if self.static:
            try:
                hash(value)
            except TypeError as exc:
                raise TypeError(
                    f"{self!r} is static, so its value must be hashable (it is part of the "
                    f"jit cache key), but got an unhashable {type(value).__name__}: {exc}. "
                    "Pass a hashable value (a tuple, a frozen dataclass), or declare the "
                    "effect with static=False to pass arrays as traced inputs."
                ) from None
        return Provider(self, value)


@attrs.define(eq=False)
class Provider(Handler[Ask[T]]):
    """The handler of an :class:`Ask`: answers with a fixed value.

    Made by `Ask.provide`; its `value` is the provided value.

    **Example:**

    ```python
    >>> import effax
    >>> lr = effax.Ask[float]("lr")
    >>> with lr.provide(0.1) as provider:
    ...     lr.ask()
    0.1
    >>> provider.value, provider.effect
    (0.1, Ask('lr'))

    ```
    """

    effect: Ask[T]
    provided: T
    _home: Any = attrs.field(factory=_trace.current_trace_ref, init=False, repr=False)

    @property
    def value(self) -> T:
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


# --- State ------------------------------------------------------------------------


class State(Effect["StateCell[S]"], Generic[S]):
    """Mutable state, kept by a cell handler and threaded through traced regions.

    Across ``jax.jit`` the current value goes in and the final value comes out; in an
    ``effax.scan`` it is part of the carry. Its structure, shapes and dtypes must stay
    the same across a traced boundary (else :class:`effax.StateTypeError`).

    **Example:**

    ```python
    >>> import jax.numpy as jnp, effax
    >>> steps = effax.State[jnp.ndarray]("steps")
    >>> with steps.init(jnp.int32(0)) as cell:
    ...     n = steps.modify(lambda n: n + 1)
    ...     steps.set(steps.get() * 10)
    >>> int(cell.value)
    10

    ```
    """

    __slots__ = ()

    def __init__(self, name: str) -> None:
        _init_effect(self, name)

    @property
    def handler_hint(self) -> str:  # type: ignore[override]
        return f"{self.name}.init(value)"

    def get(self) -> S:
        """The current value."""
        return self.handler().value

    def set(self, value: S) -> None:
        """Replace the current value."""
        self.handler_for_write(value).value = value

    def modify(self, fn: Callable[[S], S]) -> S:
        """Replace the value by `fn(value)` and return the new value."""
        cell = self.handler()
        new = fn(cell.value)
        self.handler_for_write(new)
        cell.value = new
        return new

    def init(self, value: S) -> StateCell[S]:
        """A cell handler holding `value`; it keeps its value across calls."""
        return StateCell(self, value)


@attrs.define(eq=False)
class StateCell(Handler[State[S]]):
    """The handler of a :class:`State`: a cell whose `.value` is the current state.

    Made by `State.init`. The cell keeps its value after its scope ends, so
    installing it again continues from there.

    **Example:**

    ```python
    >>> import jax.numpy as jnp, effax
    >>> steps = effax.State[jnp.ndarray]("steps")
    >>> cell = steps.init(jnp.int32(0))
    >>> @effax.jit
    ... def bump():
    ...     steps.set(steps.get() + 1)
    >>> for _ in range(2):
    ...     with cell:
    ...         bump()
    >>> int(cell.value)
    2

    ```
    """

    effect: State[S]
    value: S
    _home: Any = attrs.field(factory=_trace.current_trace_ref, init=False, repr=False)
    fields = Fields(carry="value")

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> StateCell[S]:
        return cls(effect, carry)

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        return self.export(), 0 if policy.state == "batched" else None


# --- RandomKey --------------------------------------------------------------------


def _as_key(seed: Any, effect: RandomKey) -> jax.Array:
    if isinstance(seed, (bool, float, complex, str, bytes)):
        raise TypeError(
            f"{effect!r}.seed(...) takes an int, a typed key (jax.random.key) or a raw "
            f"uint32[2] key (jax.random.PRNGKey), not a {type(seed).__name__}."
        )
    if isinstance(seed, (int, np.integer)):
        return jax.random.key(int(seed))
    dtype = getattr(seed, "dtype", None)
    shape = getattr(seed, "shape", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise TypeError(
                f"{effect!r}.seed(...) takes a single key, but got a key array of shape "
                f"{shape}. Seed one stream per key, or use effax.vmap to map over keys."
            )
        return seed  # type: ignore[no-any-return]
    if dtype == jnp.uint32 and shape == (2,):
        return seed  # type: ignore[no-any-return]
    raise TypeError(
        f"{effect!r}.seed(...) takes an int, a typed key (jax.random.key) or a raw "
        f"uint32[2] key (jax.random.PRNGKey), but got {type(seed).__name__} with "
        f"dtype={dtype} and shape={shape}."
    )


class RandomKey(Effect["KeyStream"]):
    """A named stream of PRNG keys; `effax.rng` is the default one.

    A stream is a base key and a counter: each `next_key()` is
    ``jax.random.fold_in(base_key, counter)`` followed by ``counter += 1``. The counter
    is a Python int while it is known at trace time, so compiled and eager draws are
    bit-identical and advancing it costs no device work.

    **Example:**

    ```python
    >>> import jax, effax
    >>> dropout = effax.RandomKey("dropout")
    >>> with dropout.seed(0):
    ...     k0, k1 = dropout.next_key(), dropout.next_key()
    >>> bool((jax.random.key_data(k0) == jax.random.key_data(
    ...     jax.random.fold_in(jax.random.key(0), 0))).all())
    True

    ```
    """

    __slots__ = ()

    def __init__(self, name: str) -> None:
        _init_effect(self, name)

    @property
    def handler_hint(self) -> str:  # type: ignore[override]
        return f"{self.name}.seed(key)"

    def next_key(self) -> jax.Array:
        """A fresh key: ``fold_in(base_key, counter)``, then the counter advances."""
        return self.handler().next_key()

    def seed(self, key: int | jax.Array) -> KeyStream:
        """A key-stream handler starting at `key` (an int, a typed key or a raw key)."""
        return KeyStream(self, _as_key(key, self))


class KeyState(NamedTuple):
    """The state of a key stream: what ``hs[stream]`` returns.

    - `base_key`: the key the stream was seeded with.
    - `counter`: how many keys were drawn from `base_key` (an int, or a traced int32
      once it is not known at trace time); the next key is
      ``fold_in(base_key, counter)``.

    **Example:**

    ```python
    >>> import jax, effax
    >>> with effax.handlers(effax.rng.seed(0)) as hs:
    ...     k0, k1 = effax.rng.next_key(), effax.rng.next_key()
    >>> hs[effax.rng].counter
    2
    >>> jax.dtypes.issubdtype(hs[effax.rng].base_key.dtype, jax.dtypes.prng_key)
    True

    ```
    """

    base_key: jax.Array
    counter: int | jax.Array


@attrs.define(eq=False)
class KeyStream(Handler[RandomKey]):
    """The handler of a :class:`RandomKey`.

    The counter is `dynamic + offset`: `dynamic` is `None` while the counter is known
    in Python (then it is the int `offset`), and an int32 array once it is not (after
    an `effax.cond` whose branches draw different numbers of keys, or a
    `while_loop`). `drawn` counts the draws since this handler was made, or is `None`
    once that number is no longer known at trace time. A region that drew a known
    number of keys advances `offset` by it (the `advance` of its `fields`); one that
    did not sends the traced counter back, which is set as `counter`.

    **Example:**

    ```python
    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0) as stream:
    ...     _ = effax.rng.next_key()
    ...     _ = effax.jit(effax.rng.next_key)()
    >>> stream.counter, stream.drawn
    (2, 2)
    >>> with effax.rng.seed(0) as stream:  # branches drawing 1 or 0 keys
    ...     _ = effax.cond(
    ...         jnp.bool_(True), lambda: effax.random.normal(), lambda: jnp.float32(0)
    ...     )
    >>> int(stream.counter), stream.drawn
    (1, None)

    ```
    """

    effect: RandomKey
    base_key: jax.Array
    offset: int = 0
    dynamic: jax.Array | None = None
    # `offset` when the number of draws was last known; `None` once it is not.
    _start: int | None = attrs.field(default=0, alias="start", repr=False)
    _home: Any = attrs.field(factory=_trace.current_trace_ref, init=False, repr=False)
    fields = Fields(const="base_key", carry="counter", advance="offset")

    @property
    def counter(self) -> int | jax.Array:
        if self.dynamic is None:
            return self.offset
        return self.dynamic if self.offset == 0 else self.dynamic + self.offset

    @counter.setter
    def counter(self, counter: int | jax.Array) -> None:
        # A counter that came back traced: from here on, draws are not counted.
        if isinstance(counter, int):
            self.dynamic, self.offset = None, counter
        else:
            self.dynamic, self.offset = counter, 0
        self._start = None

    @property
    def drawn(self) -> int | None:
        return None if self._start is None else self.offset - self._start

    @property
    def value(self) -> KeyState:
        return KeyState(self.base_key, self.counter)

    def next_key(self) -> jax.Array:
        key = jax.random.fold_in(self.base_key, self.counter)
        self.offset += 1
        return key

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> KeyStream:
        if static is not None:  # split across the named axes of a batched region
            const = jax.random.fold_in(const, jax.lax.axis_index(static))
        if isinstance(carry, int):
            return cls(effect, const, offset=carry, start=carry)
        return cls(effect, const, dynamic=carry)

    def outcome(self, *, carry_required: bool) -> Outcome:
        if self.drawn is not None and not carry_required:
            return Outcome(static=self.drawn)
        counter = self.counter
        if isinstance(counter, int):
            counter = jnp.asarray(counter, jnp.int32)
        return Outcome(static=self.drawn, carry=counter)

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        if policy.keys == "shared":
            return self.export(), None
        # One key of this stream seeds every element: element b folds in its index.
        key = jax.random.fold_in(self.base_key, self.counter)
        return Export(static=policy.axis_names, const=key, carry=0), None

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        if policy.keys == "shared":
            self.absorb(outcome, steps=1)
        else:
            self.absorb(Outcome(static=1), steps=1)


# --- Emit -------------------------------------------------------------------------


class Emit(Effect["Collector[T]"], Generic[T]):
    """A writer: library code emits values, the handler collects them in order.

    Values emitted inside a compiled function come out as its outputs; inside an
    ``effax.scan`` each emit site's values are stacked along a new leading axis.

    **Example:**

    ```python
    >>> import effax
    >>> log = effax.Emit[int]("log")
    >>> with log.collect() as collected:
    ...     log.emit(1)
    ...     log.emit(2)
    >>> collected.values
    [1, 2]

    ```
    """

    __slots__ = ()

    def __init__(self, name: str) -> None:
        _init_effect(self, name)

    @property
    def handler_hint(self) -> str:  # type: ignore[override]
        return f"{self.name}.collect()"

    def emit(self, value: T) -> None:
        """Append `value` to the innermost collector."""
        self.handler_for_write(value).values.append(value)

    def collect(self) -> Collector[T]:
        """A handler collecting the emitted values in `.values`."""
        return Collector(self)


@attrs.define(eq=False)
class Collector(Handler[Emit[T]]):
    """The handler of an :class:`Emit`: `.values` lists what was emitted, in order.

    Made by `Emit.collect`. Values emitted in an `effax.scan` body come back stacked
    along a new leading axis, one entry per emit site.

    **Example:**

    ```python
    >>> import jax.numpy as jnp, effax
    >>> loss = effax.Emit[jnp.ndarray]("loss")
    >>> with loss.collect() as collector:
    ...     loss.emit(jnp.float32(1))
    ...     _ = effax.scan(lambda c, x: (c, loss.emit(x)), 0, jnp.arange(3.0))
    >>> len(collector.values), collector.values[1].shape
    (2, (3,))

    ```
    """

    effect: Emit[T]
    values: list[T] = attrs.field(factory=list)
    _home: Any = attrs.field(factory=_trace.current_trace_ref, init=False, repr=False)

    fields = Fields(values="values")

    @property
    def value(self) -> list[T]:
        return self.values

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Collector[T]:
        return cls(effect)


rng = RandomKey("rng")
"""The default key stream, ``RandomKey("rng")``: the `RandomKey` effax declares for
`effax.random`, which draws from it when no `stream=` is given. Seed it like any
stream, ``with effax.rng.seed(0): ...``."""


# --- installing several handlers ----------------------------------------------------


class Handlers(Mapping[Effect[Any], Any]):
    """The installed handlers, keyed by effect: ``hs[effect]`` is that handler's state.

    For a `State` it is the (final) value, for an `Emit` the list of collected
    values, for an `Ask` the provided value, for a `RandomKey` its `KeyState`.
    Made by `effax.handlers`; a context manager that installs them all (later ones
    innermost), and a read-only mapping that stays readable after its scope ends.

    **Example:**

    ```python
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

    ```
    """

    __slots__ = ("_handlers", "_tokens")

    def __init__(self, handlers: tuple[Handler[Any], ...]) -> None:
        for handler in handlers:
            if not isinstance(handler, Handler):
                raise TypeError(
                    "effax.handlers(...) takes handlers (e.g. `temperature.provide(0.5)`, "
                    f"`steps.init(0)`), but got {type(handler).__name__}: {handler!r}."
                )
        self._handlers = {h.effect: h for h in handlers}
        self._tokens: list[Any] = []

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
        for handler in self._handlers.values():
            _check_home(handler)
        self._tokens.append(_context.push(tuple(self._handlers.values())))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _context.pop(self._tokens.pop())


def handlers(*handlers: Handler[Any]) -> Handlers:
    """Install several handlers at once (later ones innermost).

    **Example:**

    ```python
    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[float]("scale")
    >>> total = effax.State[jnp.ndarray]("total")
    >>> with effax.handlers(scale.provide(2.0), total.init(jnp.float32(0))) as hs:
    ...     total.set(total.get() + scale.ask())
    ...     total.set(total.get() + scale.ask())
    >>> float(hs[total])
    4.0

    ```
    """
    return Handlers(handlers)
