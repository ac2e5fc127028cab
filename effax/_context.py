"""`JitAwareContextVar` and the handler stack.

Both are built on :mod:`contextvars` (so each thread and each asyncio task sees its
own values) and record the JAX trace that was current when a value was installed.
A read from under a staging trace (``jax.jit``, a ``lax.scan`` body, ...) that the
value was installed outside of raises instead of returning a value that JAX would
bake into its cache as a constant.
"""

from __future__ import annotations

import abc
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, NoReturn, TypeVar

from . import _trace
from ._errors import EffectTypeError, EffectUsageError

if TYPE_CHECKING:
    from ._effect import Effect
    from ._protocol import Handler

__all__ = [
    "Blocked",
    "Entry",
    "JitAwareContextVar",
    "Obstacle",
    "Stack",
    "Tracked",
    "chain",
    "current_stack",
    "enter_block",
    "here",
    "exit_block",
    "forwards_outward",
    "home_trace",
    "mark_used",
    "note_missing",
    "obstacle",
    "outside",
    "pop",
    "push",
    "push_entries",
    "run_at",
    "run_where",
]

T = TypeVar("T")

_JIT_BOUNDARY = (
    "The value found for {var!r} was assigned behind a jit-transform boundary "
    "({where}). It cannot be accessed in the current context: pass it into the "
    "transformed function explicitly (see effax.plumb_and_transform), or set it "
    "inside."
)


class JitAwareContextVar(Generic[T]):
    """A :class:`contextvars.ContextVar` that refuses to be read across a jit boundary.

    ``set_on_enter(value)`` returns a context manager that installs ``value`` for the
    duration of a ``with`` block and records the JAX trace current at entry.
    ``get()`` returns the innermost value, unless a *staging* trace (``jax.jit``,
    ``pmap``, ``shard_map``, a ``lax`` control-flow body, ``jax.checkpoint``,
    ``jax.eval_shape``, ``jax.make_jaxpr``) lies between that trace and the current
    one: then the value would become a stale constant of a cached trace, and ``get()``
    raises :class:`LookupError` instead. ``grad``, ``jvp``, ``vjp``, ``linearize`` and
    ``vmap`` re-run Python on every call, so values pass through them.

    Create context variables at module level (or as class attributes), never in a
    loop or closure: like the stdlib's, they are never garbage collected.

    **Arguments:**

    - `name`: shown in messages and in the ``repr``.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> x_var = effax.JitAwareContextVar[float]("x")
    >>> def log_x():
    ...     return jnp.log(x_var.get())
    >>> @jax.jit
    ... def pure(x):
    ...     with x_var.set_on_enter(x):
    ...         return log_x() ** 2
    >>> float(pure(jnp.e))
    1.0

    """

    __slots__ = ("_name", "_var")

    def __init__(self, name: str = "JitAwareContextVar") -> None:
        if not isinstance(name, str):
            raise EffectTypeError(
                f"effax.JitAwareContextVar(name) takes a str, but got {type(name).__name__}."
            )
        self._name = name
        self._var: contextvars.ContextVar[tuple[T, _trace.TraceRef]] = contextvars.ContextVar(
            f"effax.{name}"
        )

    def __repr__(self) -> str:
        return f"<JitAwareContextVar {self._name!r} at {id(self):#x}>"

    def get(self) -> T:
        """The innermost value; raises `LookupError` if none is set or it is stale."""
        try:
            value, ref = self._var.get()
        except LookupError:
            raise LookupError(f"No value found for {self!r}.") from None
        if ref is not _trace.current_trace_ref():
            reach = _trace.reachability(ref)
            if reach != "ok":
                where = (
                    "a staging trace lies between where it was set and here"
                    if reach == "staged"
                    else "the trace where it was set is not an ancestor of this one"
                )
                raise LookupError(_JIT_BOUNDARY.format(var=self, where=where))
        return value

    def set_on_enter(self, value: T) -> _SetOnEnter[T]:
        """A context manager that installs `value` while its ``with`` block runs."""
        return _SetOnEnter(self._var, value)


class _SetOnEnter(Generic[T]):
    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: contextvars.ContextVar[tuple[T, Any]], value: T) -> None:
        self._var = var
        self._value = value
        self._token: contextvars.Token[tuple[T, Any]] | None = None

    def __enter__(self) -> T:
        if self._token is not None:
            raise RuntimeError("set_on_enter(...) context managers cannot be re-entered.")
        self._token = self._var.set((self._value, _trace.current_trace_ref()))
        return self._value

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        self._var.reset(self._token)
        self._token = None


# --- the handler stack ------------------------------------------------------------
#
# One module-level context variable holds an immutable mapping from effect (by
# identity) to `(handler, trace_ref)`. Installing handlers copies the mapping once;
# looking one up is a dict lookup. Creating effects creates no context variables.

Entry = tuple["Handler[Any]", _trace.TraceRef]


class Stack(dict["Effect[Any]", Entry]):
    """An installed set of handlers: effect -> (handler, trace ref). Never mutated
    after it is installed, so what is derived from it can be cached against it (by
    weak reference, for as long as the stack itself lives).

    `recorders` are the lookup records of the compiled calls being traced around
    this point (innermost last): a lookup that finds no usable handler (none
    installed, a `Blocked` marker, a handler behind a staging trace) is noted in
    each, since every enclosing trace baked that outcome in.
    """

    __slots__ = ("__weakref__", "fresh", "owner", "parent", "recorders", "runs", "token", "views")
    runs: Entry | None

    def __init__(
        self,
        entries: Mapping[Effect[Any], Entry] | None = None,
        *,
        recorders: tuple[set[Effect[Any]], ...] = (),
        parent: Stack | None = None,
    ) -> None:
        super().__init__(entries or {})
        self.recorders = recorders
        # The stack this one was installed over (what `chain` walks to find the
        # handlers an inner one of the same effect shadows).
        self.parent = parent
        # For a stack installed by a `with` block: the handler (or bundle) that
        # entered it, and the token that restores the stack below it.
        self.owner: object = None
        self.token: contextvars.Token[Stack] | None = None
        # Installed by `push` (its handlers last in the dict's order), not over the
        # entries below in their places (rebuilt handlers, markers); for a stack a
        # handler's code runs under, its entry; the stacks of `outside`, per effect.
        self.fresh, self.runs = False, None
        self.views: dict[Effect[Any], Stack] | None = None


_EMPTY = Stack()
_STACK: contextvars.ContextVar[Stack] = contextvars.ContextVar("effax.handlers", default=_EMPTY)


# The installed stack (a C-level call: it is on the per-call path of `handle`).
current_stack = _STACK.get


def push(handlers: tuple[Handler[Any], ...]) -> contextvars.Token[Stack]:
    """Install `handlers` (later ones innermost) at the current trace. Several
    handlers of one effect (an interceptor over the handler it forwards to) are
    installed as nested layers, so that each shadows the ones before it."""
    ref = _trace.current_trace_ref()
    layers: list[dict[Effect[Any], Entry]] = [{}]
    for handler in handlers:
        if handler.effect in layers[-1]:
            layers.append({})
        layers[-1][handler.effect] = (handler, ref)
    return push_entries(*layers, fresh=True)


def push_entries(
    *layers: Mapping[Effect[Any], Entry],
    recorder: set[Effect[Any]] | None = None,
    fresh: bool = False,
) -> contextvars.Token[Stack]:
    """Install pre-built entries (used to mark effects during a trace), one stack
    per layer (later layers innermost); with `recorder`, also note failed lookups
    below this point into it. Entries keep the places of those they replace in the
    stack's order, unless `fresh` (handlers installed here): then they come last
    (a stack's order is its handlers' install order, which `outside` reads)."""
    stack = _STACK.get()
    recorders = stack.recorders if recorder is None else (*stack.recorders, recorder)
    for entries in layers:
        below = stack
        if fresh and any(effect in below for effect in entries):
            stack = Stack(
                {e: v for e, v in below.items() if e not in entries},
                recorders=recorders,
                parent=below,
            )
        else:
            stack = Stack(below, recorders=recorders, parent=below)
        stack.update(entries)
        stack.fresh = fresh
    return _STACK.set(stack)


# --- where a handler's code runs: under the handlers installed outside it, not the
# performer's stack (handlers between them, and the performer's row, are not visible)


def run_at(
    effect: Effect[Any], handler: Handler[Any], fn: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    """Call `fn`, an operation of `handler` (of `effect`), under the handlers installed
    outside `handler` (`outside`); in place if `handler` is not the current one of
    `effect` (reached by forwarding) or of an effax class (the built-in operations
    perform nothing; an `Interceptor` runs its functions with `run_where`)."""
    if handler._effax_own:
        return fn(*args, **kwargs)
    return run_where(effect, handler, fn, *args, **kwargs)


def run_where(
    effect: Effect[Any], handler: Handler[Any], fn: Callable[..., T], *args: Any, **kwargs: Any
) -> T:
    """`run_at` for code that is never effax's own (an interceptor's function)."""
    stack = _STACK.get()
    entry = stack.get(effect)
    if entry is None or entry[0] is not handler:
        return fn(*args, **kwargs)
    views = stack.views
    view = None if views is None else views.get(effect)
    if view is None:
        view = outside(stack, effect)
    token = _STACK.set(view)
    try:
        return fn(*args, **kwargs)
    finally:
        _STACK.reset(token)


def here(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, a callback the performer passes (`modify`'s), run under its stack."""
    stack = _STACK.get()

    def call(*args: Any, **kwargs: Any) -> T:
        token = _STACK.set(stack)
        try:
            return fn(*args, **kwargs)
        finally:
            _STACK.reset(token)

    return call


def outside(stack: Stack, effect: Effect[Any]) -> Stack:
    """The stack (cached on `stack`) that `stack`'s handler of `effect` runs under:
    the entries installed outside it (of `effect`: the one it forwards to)."""
    entry = stack[effect]
    node = stack
    below = node.parent
    while below is not None and below.get(effect) is entry:
        node, below = below, below.parent
    base = _EMPTY if below is None else below
    prior = base.get(effect)
    if not node.fresh and prior is not None:
        # put in the place of an entry of the stack below (a handler rebuilt inside a
        # traced region): outside it is what was outside the entry it stands for
        base = outside(base, effect)
    view = Stack(base, recorders=stack.recorders, parent=base)
    for key, value in node.items():
        if key is effect:
            break
        if base.get(key) is not value:
            view[key] = value
    handler = entry[0]
    if handler._effax_holds is not None:  # an interceptor made inside a region: holds it
        try:
            view[effect] = (handler.outer(), entry[1])
        except LookupError:  # none (UnhandledEffectError), or not usable here
            view.pop(effect, None)
    view.runs = entry
    view.fresh = node.fresh
    if stack.views is None:
        stack.views = {}
    stack.views[effect] = view
    return view


def chain(stack: Stack, effect: Effect[Any]) -> Iterator[Entry]:
    """The entries of `effect` under `stack`, innermost first: the installed handler,
    then each one it shadows (each install is one entry object, shared by the
    stacks above it)."""
    last: Entry | None = None
    node: Stack | None = stack
    while node is not None:
        entry = node.get(effect)
        if entry is None:
            return
        if entry is not last:
            yield entry
            last = entry
        node = node.parent


def note_missing(effect: Effect[Any]) -> None:
    """Tell the traces being recorded that a lookup of `effect` found no usable
    handler (their programs depend on that staying so)."""
    for recorder in _STACK.get().recorders:
        recorder.add(effect)


def pop(token: contextvars.Token[Stack]) -> None:
    _STACK.reset(token)


def enter_block(owner: object, handlers: tuple[Handler[Any], ...]) -> None:
    """Install `handlers` for `owner`'s ``with`` block. The installed stack keeps
    its owner and token, so that one handler object entered by several threads or
    asyncio tasks (each with its own current stack) exits in any order."""
    token = push(handlers)
    stack = _STACK.get()
    stack.owner, stack.token = owner, token


def exit_block(owner: object) -> None:
    """Undo `owner`'s innermost `enter_block` in the current context."""
    stack = _STACK.get()
    if stack.owner is not owner or stack.token is None:
        raise EffectUsageError(
            f"{owner!r} is exited where it is not the innermost handler entered: in "
            "another thread or asyncio task than the one that entered it, or out of order "
            "(e.g. by a generator suspended inside its `with` block). Enter and exit a "
            "handler in one `with` block of one thread or task."
        )
    _STACK.reset(stack.token)


# --- stack-entry markers ------------------------------------------------------------
#
# An entry's second item is normally the trace its handler was installed under; a
# marker in its place changes what a lookup does.


class Tracked:
    """Marks a handler rebuilt inside a traced region: a lookup of its effect is
    recorded in `used` (what the region's trace depended on), then goes on as if
    the handler were installed at the trace `ref`. A region that tells performing
    from plumbing apart (a batched region splits only the key streams its body
    performs) gives `plumbed` too: a lookup made only to plumb the handler into a
    region further in (an interceptor forwarding to it) is recorded there."""

    __slots__ = ("plumbed", "ref", "used")

    def __init__(
        self,
        ref: _trace.TraceRef,
        used: set[Effect[Any]],
        plumbed: set[Effect[Any]] | None = None,
    ) -> None:
        self.ref = ref
        self.used = used
        self.plumbed = used if plumbed is None else plumbed


class Blocked(abc.ABC):
    """Stack-entry marker that hides a handler: performing its effect calls
    `raise_for`, and `handle` does not plumb it. Subclasses say why."""

    __slots__ = ()

    @abc.abstractmethod
    def raise_for(self, effect: Effect[Any]) -> NoReturn:
        """Raise the exception for performing `effect` here."""


# --- may this entry's handler be used here? ----------------------------------------
#
# The one place that unwraps an entry's marker and decides whether its handler can
# be used at the current trace: performing an effect (`Effect.handler`), choosing
# what a region plumbs (`_visible`), resolving a compiled call's environment
# (`_environment`) and rebuilding stand-ins inside a trace (`_program`) all ask it.

# Why an entry's handler cannot be used here: a `Blocked` marker hides it, a staging
# trace lies between its trace and here (``"staged"``), its trace is not an
# ancestor of this one (``"detached"``), or it must give each batch element its own
# result (a key stream) but a raw ``jax.vmap`` lies in between (``"unsplit"``).
Obstacle = Blocked | Literal["staged", "detached", "unsplit"]


def home_trace(ref: Any) -> Any:
    """The trace an entry's handler was installed under, through a `Tracked`
    marker (a `Blocked` marker is returned as it is)."""
    return ref.ref if type(ref) is Tracked else ref


def obstacle(
    effect: Effect[Any],
    entry: Entry,
    *,
    track: bool | Literal["plumbing"] = True,
    through: int = 0,
) -> Obstacle | None:
    """Why the handler of `entry` (the stack entry of `effect`) cannot be used at
    the current trace, or None if it can.

    With `track`, a `Tracked` entry records that `effect` was used (what the
    region that rebuilt it depends on); with ``"plumbing"``, that it was looked up
    to be plumbed further in (`Tracked.plumbed`). `through` staging traces between the
    handler's trace and here are allowed (a compiled call's own, for lookups made
    inside its trace on behalf of its caller).
    """
    handler, ref = entry
    trace = _trace.current_trace_ref()
    if ref is trace:
        return None
    if isinstance(ref, Blocked):
        return ref
    if type(ref) is Tracked:
        if track:
            (ref.plumbed if track == "plumbing" else ref.used).add(effect)
        ref = ref.ref
        if ref is trace:
            return None
    stagings = _trace.stagings_between(ref)
    if stagings is None:
        return "detached"
    if handler.batch_distinct and _trace.transformed_between(ref, "batching"):
        return "unsplit"
    return "staged" if stagings > through else None


def mark_used(stack: Stack, effects: Any, *, plumbing: bool = False) -> None:
    """Tell the traced regions that rebuilt these effects' handlers in `stack` that
    the effects were performed (their traces depend on them), or, with `plumbing`,
    only plumbed further in. An effect performed under interceptors installed over
    such a handler reached it: the chain is followed through them."""
    for effect in effects:
        for handler, ref in chain(stack, effect):
            if type(ref) is Tracked:
                (ref.plumbed if plumbing else ref.used).add(effect)
            if not forwards_outward(handler):
                break


def forwards_outward(handler: Handler[Any]) -> bool:
    """Whether what `handler` does not answer goes on to the handler installed outside
    it on the stack (an interceptor installed there, holding no target of its own)."""
    return handler.forwards and handler._effax_holds is None
