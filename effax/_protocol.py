"""The plumbing protocol: what a handler sends into a traced region and back.

Every handler speaks it: `Handler` (its `export`, `rebuild`, `outcome` and
`absorb`, or just `fields`, an `effax.Fields` naming the attributes that cross),
`Export` and `Outcome` (what crosses, in and out), and `BatchPolicy` (how a
batched region asks a handler to cross). `effax.handle`, the control-flow wrappers
and the transformation wrappers are written once against it, so a user-defined
effect works everywhere the built-in ones do.
"""

from __future__ import annotations

import abc
import functools
import inspect
import operator
from collections.abc import Callable, Hashable
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    NamedTuple,
    NoReturn,
    Protocol,
    Self,
    TypeVar,
    runtime_checkable,
)

from . import _context, _naming, _trace
from ._errors import STAGED_HANDLER, EffectLeakError, EffectTypeError
from ._fields import Fields

if TYPE_CHECKING:
    from ._effect import Effect

__all__ = [
    "BatchPolicy",
    "Export",
    "Fields",
    "Handler",
    "Outcome",
    "RefusesOutcomes",
    "check_home",
    "derives",
    "fields_of",
    "home_of",
]

H = TypeVar("H", bound="Handler[Any]")
# Covariant: a handler of a `State[S]` is a handler of an `Effect[StateCell[S]]`,
# which is how `outer` finds the type of the handler it returns.
E = TypeVar("E", bound="Effect[Any]", covariant=True)
H_out = TypeVar("H_out", bound="Handler[Any]")

PyTree = Any


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

    >>> import jax.numpy as jnp, effax
    >>> effax.Ask[float]("lr").provide(0.1).export()  # traced input: no retrace
    Export(static=None, const=0.1, carry=None)
    >>> effax.Ask[str]("mode", static=True).provide("train").export()  # cache key
    Export(static='train', const=None, carry=None)
    >>> effax.State[jnp.ndarray]("steps").init(jnp.int32(3)).export()  # updated inside
    Export(static=None, const=None, carry=Array(3, dtype=int32))

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

    """

    # Any, as `rebuild`'s `static` is: what a handler sends out is for its own
    # class's `absorb` to read (a count, a tuple of names), and only it knows what
    static: Any = None
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

    >>> import jax.numpy as jnp, effax
    >>> cell = effax.State[jnp.ndarray]("w").init(jnp.zeros(3))
    >>> policy = effax.BatchPolicy(keys="split", state="batched", axis_names=("batch",))
    >>> export, axis = cell.batch_export(policy)
    >>> axis
    0
    >>> cell.batch_export(policy._replace(state="shared"))[1] is None
    True

    """

    keys: Literal["split", "shared"]
    state: Literal["shared", "batched"]
    axis_names: tuple[Hashable, ...]


def _no_fields(handler: Handler[Any], method: str) -> NoReturn:
    raise NotImplementedError(
        f"{type(handler).__name__} must either set `fields` (an effax.Fields naming the "
        f"attributes that cross a traced boundary) or override {method}()."
    )


def _run_where_installed(cls: type[Handler[Any]]) -> None:
    """Make the operations of a user's handler class (its own public methods, which
    no effax base class defines) run where the handler is installed, as those of
    effax's effects do: the effects they perform are looked up among the handlers
    outside it (`_context.run_at`), whether the effect's operation reaches them
    through ``self.handler()`` or a forwarding handler's ``outer()``."""
    package = __name__.rsplit(".", 1)[0] + "."
    protocol = {
        n for base in cls.__mro__ if base.__module__.startswith(package) for n in vars(base)
    }
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and name not in protocol and inspect.isfunction(member):
            setattr(cls, name, _where_installed(member))


def _where_installed(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def operation(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _context.run_at(self.effect, self, fn, self, *args, **kwargs)

    return operation


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

    """

    # `_effax_home`: the trace the handler was created under, recorded for every
    # handler (built-in or user-defined) when it is made; see `check_home`.
    __slots__ = ("_effax_home",)
    effect: E
    """The effect this handler handles."""
    batch_distinct: ClassVar[bool] = False
    """Whether each element of a batch must get its own result from this handler (a
    key stream: the same key in every element would be a silent error). Such a
    handler is not read through a raw `jax.vmap`; `effax.vmap` asks it for a
    policy (`batch_export`)."""
    forwards: ClassVar[bool] = False
    """Whether the handler forwards what it does not answer to the handler of its
    effect outside it (an `effax.Interceptor`): it may share a `handlers(...)`
    bundle with that handler, has no state of its own there, and does not cross
    traced boundaries itself (the handler it reaches does)."""
    # The handler a forwarding handler holds and forwards to (an interceptor made
    # inside a traced region around the rebuilt handler, or bound by `over`); None:
    # it forwards to the handler outside it on the stack, or does not forward.
    _effax_holds: Handler[Any] | None = None

    _effax_no_rebuild: ClassVar[bool] = False  # it lacks `rebuild` (`__init_subclass__`)
    # effax's own class: its operations perform no effect, so they run in place
    # (`_context.run_at`), not under the handlers outside it as a user's do
    _effax_own: ClassVar[bool] = True
    _effax_derived: ClassVar[frozenset[str]]  # see `derives`

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        if cls._effax_no_rebuild:
            raise EffectTypeError(
                f"{cls.__name__} cannot be created: a handler that crosses traced "
                "boundaries must define `rebuild` (a classmethod making the handler "
                "installed inside a traced region from what `export` sent). A handler "
                "that only forwards to the handler outside it subclasses effax.Interceptor "
                "instead, and needs none."
            )
        self = super().__new__(cls)
        object.__setattr__(self, "_effax_home", _trace.current_trace_ref())
        return self

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # required of every handler but an interceptor (its chain's target crosses)
        cls._effax_no_rebuild = (
            not cls.forwards and getattr(cls.rebuild, "__func__", None) is _REBUILD
        )
        cls._effax_own = cls.__module__.startswith(__name__.rsplit(".", 1)[0] + ".")
        if not cls._effax_own:
            _run_where_installed(cls)
        cls._effax_derived = frozenset(m for m in _DERIVED if getattr(cls, m) is _DERIVED[m])
        fields = cls.__dict__.get("fields")
        if isinstance(fields, Fields):
            for role, name in fields._asdict().items():
                if name is not None and not (isinstance(name, str) and name.isidentifier()):
                    raise EffectTypeError(
                        f"{cls.__name__}.fields = effax.Fields({role}={name!r}): each field "
                        "names an attribute of the handler, as a str (or None)."
                    )

    def outer(self: Handler[Effect[H_out]]) -> H_out:
        """The next handler of the same effect outside this one: where an operation
        this handler does not answer itself is forwarded (see `effax.intercept`).
        Typed as the handler `effect.handler()` returns.

        Trace-safe as a read is: raises `UnhandledEffectError` if there is none,
        `EffectLeakError` if it was installed outside a staging transformation
        around this call. A handler not installed here gets the innermost handler
        of its effect (the one it would shadow if it were installed now).
        """
        return self.effect.outer_of(self)

    if not TYPE_CHECKING:
        # Declared at run time only. A subclass sets `fields` as a class attribute
        # (`fields = effax.Fields(...)`) or defines it as a property, and no
        # declaration here lets both type-check under mypy and pyright alike (mypy
        # refuses a read-only property over an attribute, pyright any attribute over
        # a property), so the checkers see only the subclass's own; effax reads it
        # through `fields_of`.
        @property
        def fields(self) -> Fields | None:
            """The attributes that cross a traced boundary (see :class:`effax.Fields`),
            or `None` if the handler overrides `export`, `outcome` and `absorb`."""
            return None

    def export(self) -> Export:
        """What goes into a traced region (derived from `fields` unless overridden)."""
        f = fields_of(self)
        if f is None:
            _no_fields(self, "export")
        return Export(
            None if f.static is None else getattr(self, f.static),
            None if f.const is None else getattr(self, f.const),
            None if f.carry is None else getattr(self, f.carry),
        )

    @classmethod
    def rebuild(cls: type[H], effect: Any, static: Any, const: PyTree, carry: PyTree) -> H:
        """The handler to install inside a traced region, from what `export` sent.
        Required: a class that does not define it cannot be created (but an
        `effax.Interceptor`, which never crosses itself)."""
        raise NotImplementedError(cls.__name__)

    def outcome(self, *, carry_required: bool) -> Outcome:
        """What comes out; `carry_required` is true in loop bodies and cond branches.

        Derived from `fields` unless overridden: the carry and the values, no static.
        """
        f = fields_of(self)
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
        f = fields_of(self)
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

    def snapshot(self) -> PyTree:
        """What `effax.snapshot` saves of this handler: a pytree of arrays, or None
        for a handler with nothing to resume (an `Ask`'s value, a collector).

        Derived from `fields` unless overridden: the carry (a `State`'s value).
        """
        f = fields_of(self)
        if f is None:
            _no_fields(self, "snapshot")
        return None if f.carry is None else getattr(self, f.carry)

    def restore(self, snapshot: PyTree) -> None:
        """Write back what `snapshot` returned (checked by `effax.restore` to have
        the structure, shapes and dtypes of the current one)."""
        f = fields_of(self)
        if f is None or f.carry is None:
            _no_fields(self, "restore")
        setattr(self, f.carry, snapshot)

    def __enter__(self: H) -> H:
        check_home(self)
        _context.enter_block(self, (self,))
        return self

    def __exit__(self, *exc_info: object) -> None:
        _context.exit_block(self)


_REBUILD = Handler.__dict__["rebuild"].__func__
# the methods `Handler` derives from `fields`
_DERIVED = {m: getattr(Handler, m) for m in ("export", "outcome", "absorb", "snapshot", "restore")}
Handler._effax_derived = frozenset(_DERIVED)


def derives(cls: type[Handler[Any]], method: str) -> bool:
    """Whether handler class `cls` keeps `Handler`'s `method` derived from `fields`
    (one of export, outcome, absorb, snapshot, restore): the runtime may then do its
    work inline, reading and writing the fields. (Decided once per class, here: the
    protocol that derives the methods is the only one that asks.)"""
    return method in cls._effax_derived


@runtime_checkable
class RefusesOutcomes(Protocol):
    """A handler that may refuse an outcome before anything is absorbed (a tap
    replacer: a count of taps past its rows). Every handler a region writes back
    into that has `check_absorb` is asked before any of them absorbs, so a refused
    outcome leaves every handler as it was."""

    def check_absorb(self, outcome: Outcome) -> None:
        """Raise if `outcome` cannot be absorbed."""


# `handler.fields`, typed: `Handler` declares `fields` to the type checkers only
# through the subclass that sets it (see `Handler.fields`)
fields_of: Callable[[Handler[Any]], Fields | None] = operator.attrgetter("fields")


def home_of(handler: Handler[Any]) -> _trace.TraceRef | None:
    """The trace `handler` was created under (None if unknown)."""
    return getattr(handler, "_effax_home", None)


def check_home(handler: Handler[Any]) -> None:
    """Refuse to install a handler outside the trace it was created under: an
    escaped handler's values may be tracers of a finished trace."""
    home = home_of(handler)
    if home is None or home is _trace.current_trace_ref():
        return
    reach = _trace.reachability(home)
    if reach == "staged":  # made outside a staging trace that installs it inside
        api = _naming.innermost_staging_api()
        where = api[0] if api else "jax.jit (or other staging JAX transformation)"
        raise EffectLeakError(STAGED_HANDLER.format(effect=handler.effect, where=where))
    if reach != "ok":
        raise EffectLeakError(
            f"The handler of {handler.effect!r} was created under a JAX trace that this "
            "code is not nested in (it escaped the transformation it was made in, e.g. "
            "through a closure or a list), so its values may be tracers of a finished "
            "trace. Create the handler where it is installed, or pass its values out of "
            "the transformation explicitly."
        )
