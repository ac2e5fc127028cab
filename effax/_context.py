"""The handler stack, and its entries' markers.

Built on :mod:`contextvars` (so each thread and each asyncio task sees its own
handlers), each entry recording the JAX trace that was current when its handler
was installed: a lookup from under a staging trace (``jax.jit``, a ``lax.scan``
body, ...) that the handler was installed outside of raises instead of returning a
value that JAX would bake into its cache as a constant (`obstacle`).
"""

from __future__ import annotations

import abc
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn, TypeGuard, TypeVar, cast

from . import _trace
from ._errors import EffectUsageError

if TYPE_CHECKING:
    from ._effect import Effect
    from ._protocol import Handler

__all__ = [
    "Blocked",
    "Entry",
    "Obstacle",
    "Stack",
    "Tracked",
    "beneath",
    "chain",
    "current_stack",
    "enter_block",
    "here",
    "is_marker",
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
    "runs_code",
    "run_where",
    "seen_through",
]

T = TypeVar("T")

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

    __slots__ = (
        "__weakref__",
        "code",
        "fresh",
        "owner",
        "parent",
        "recorders",
        "runs",
        "token",
        "views",
    )
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
        # whether a handler in it may run code of its own (`seen_through`), once asked
        self.code: bool | None = None


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
    # What `node` installed before the handler. Entries it shares with the stack
    # below are that stack's, seen as `base` sees them (a row's marker there sits in
    # its effect's place, but was installed inside the handler); a handler rebuilt
    # in a region beneath such a marker is seen only where `base` sees past it.
    put = _EMPTY if below is None else below
    for key, value in node.items():
        if key is effect:
            break
        under = put.get(key)
        if under is value:
            continue
        if not node.fresh and under is not None:
            why, seen = under[1], base.get(key)
            if type(why) in _SEEN_THROUGH and seen and seen[1] is why:
                continue
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
    `raise_for`, and `handle` does not plumb it. Subclasses say why.

    A marker that `handler_code_sees` through hides the handler from the code
    below it only (a function's row binds its own code): handler code installed
    outside the marker, which runs where it was installed (`outside`), still
    reaches the handler, so a region that may run such code plumbs it in beneath
    the marker (`beneath`)."""

    __slots__ = ()
    handler_code_sees: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _MARKERS.add(cls)
        if cls.handler_code_sees:
            _SEEN_THROUGH.add(cls)

    @abc.abstractmethod
    def raise_for(self, effect: Effect[Any]) -> NoReturn:
        """Raise the exception for performing `effect` here."""


# The marker classes, and those handler code sees through: asked by the type of a
# stack entry's ref (an isinstance check of an ABC is slower, on per-call paths)
_MARKERS: set[type[Blocked]] = set()
_SEEN_THROUGH: set[type[Blocked]] = set()


def is_marker(ref: Any) -> TypeGuard[Blocked]:
    """Whether a stack entry's ref (or an `Obstacle`) is a `Blocked` marker: what
    ``isinstance(ref, Blocked)`` says, by the class (as fast as a set lookup)."""
    return type(ref) in _MARKERS


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
    if is_marker(ref):
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


def seen_through(
    stack: Stack,
    effect: Effect[Any],
    why: Obstacle | None,
    *,
    track: bool = False,
    through: int = 0,
) -> tuple[Blocked, Entry] | None:
    """Where `why` (the obstacle of `effect`'s entry) is a marker that handler code
    sees through (a function's row) and a handler in `stack` may run code of its own
    where it is installed (an interceptor, a handler class of the user's): the
    marker, and the entry it hides if that one can be used here (`obstacle`'s
    `track` and `through`). A region or compiled call plumbs that handler in, and
    hides it again inside. Otherwise None."""
    if type(why) not in _SEEN_THROUGH:
        return None
    code = stack.code
    if code is None:  # (asked once per stack: a call may meet many of a row's markers)
        code = stack.code = any(runs_code(h) for h, _ in stack.values())
    if not code:
        return None
    entry = beneath(stack, effect)
    if entry is None or obstacle(effect, entry, track=track, through=through) is not None:
        return None
    return cast(Blocked, why), entry


def runs_code(handler: Handler[Any]) -> bool:
    """Whether `handler` may run code of its own where it is installed: an
    interceptor (its functions, or its class's methods) or a handler class of the
    user's (its operations)."""
    return handler.forwards or not handler._effax_own


def beneath(stack: Stack, effect: Effect[Any]) -> Entry | None:
    """The entry of `effect` under `stack` that the markers handler code sees
    through hide (the entry itself if there are none), or None."""
    for entry in chain(stack, effect):
        ref = entry[1]
        if type(ref) not in _SEEN_THROUGH:
            return entry
    return None


def mark_used(stack: Stack, effects: Any, *, plumbing: bool = False) -> None:
    """Tell the traced regions that rebuilt these effects' handlers in `stack` that
    the effects were performed (their traces depend on them), or, with `plumbing`,
    only plumbed further in. An effect performed under interceptors installed over
    such a handler reached it: the chain is followed through them, and through a
    row's markers (handler code outside the row performed it)."""
    for effect in effects:
        for handler, ref in chain(stack, effect):
            if type(ref) is Tracked:
                (ref.plumbed if plumbing else ref.used).add(effect)
            elif type(ref) in _SEEN_THROUGH:
                continue
            if not forwards_outward(handler):
                break


def forwards_outward(handler: Handler[Any]) -> bool:
    """Whether what `handler` does not answer goes on to the handler installed outside
    it on the stack (an interceptor installed there, holding no target of its own)."""
    return handler.forwards and handler._effax_holds is None
