"""`handle` and `jit`: what users call to handle a function, and to compile it.

`handle(fn, *handlers, transform=...)` builds a `_callpath.Handled` (the call path
of one handled function) and returns its entry, a function with `fn`'s signature.
Functions handled without handlers of their own share their programs per function
and transformation, so that `effax.jit(f)` written inline reuses them.
"""

from __future__ import annotations

import functools as ft
import inspect
import sys
import weakref
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

import jax

from ._arguments import check_callable
from ._callpath import Handled
from ._effect import declare_row, declared_row
from ._errors import EffectTypeError, EffectUsageError
from ._intercept import Interceptor
from ._plumb import Transform, normalize_transform
from ._program import LOCK, Function
from ._protocol import Handler

__all__ = ["Compiled", "handle", "jit"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Compiled(Protocol[P, R_co]):
    """The type of a compiled handled function, what ``effax.handle(fn, ...,
    transform=...)`` and ``effax.jit(fn)`` return: `fn`'s signature, and the staging
    methods a ``jax.jit`` function has.

    ``trace`` and ``lower`` stage the program the handlers installed at that moment
    would run (its handler values are explicit inputs and outputs) and return JAX's
    own ``jax.stages.Traced`` and ``jax.stages.Lowered``. Nothing runs and no handler
    changes. ``__wrapped__`` is `fn` (as `functools.wraps` sets it).
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    @property
    def __wrapped__(self) -> Callable[P, R_co]: ...

    def trace(self, *args: P.args, **kwargs: P.kwargs) -> jax.stages.Traced: ...

    def lower(self, *args: P.args, **kwargs: P.kwargs) -> jax.stages.Lowered: ...


# Functions handled without handlers of their own, by function (weakly) and
# transformation, so that `effax.jit(f)` written inline reuses its programs.
_SHARED: weakref.WeakKeyDictionary[Any, dict[Hashable, Function]] = weakref.WeakKeyDictionary()


def _shared(fn: Callable[..., Any], transform: Transform, donate_state: bool) -> Function:
    key = _transform_key(transform)
    key = None if key is None else (key, donate_state)
    try:
        per_fn = _SHARED.get(fn) if key is not None else None
    except TypeError:  # fn is not hashable or not weakly referenceable
        per_fn = None
        key = None
    if key is None:
        return Function(fn, transform, (), donate_state=donate_state)
    with LOCK:
        if per_fn is None:
            try:
                per_fn = _SHARED.setdefault(fn, {})
            except TypeError:
                return Function(fn, transform, (), donate_state=donate_state)
        function = per_fn.get(key)
        if function is None:
            function = per_fn[key] = Function(fn, transform, (), donate_state=donate_state)
    return function


def _transform_key(transform: Transform) -> Hashable | None:
    """What identifies a transformation for sharing programs, or None if nothing
    safely does (a partial with unhashable options)."""
    transform = normalize_transform(transform)
    key: Hashable = transform
    if isinstance(transform, ft.partial):
        key = (transform.func, transform.args, tuple(sorted(transform.keywords.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


@overload
def handle(
    fn: Callable[P, R],
    *handlers: Handler[Any],
    transform: None = None,
    donate_state: bool = False,
) -> Callable[P, R]: ...
@overload
def handle(
    fn: Callable[P, R],
    *handlers: Handler[Any],
    transform: Transform,
    donate_state: bool = False,
) -> Compiled[P, R]: ...
def handle(
    fn: Callable[P, R],
    *handlers: Handler[Any],
    transform: Transform | None = None,
    donate_state: bool = False,
) -> Callable[P, R] | Compiled[P, R]:
    """Run `fn` under `handlers`, optionally across a JAX transformation.

    Returns a function with `fn`'s signature. On each call, `handlers` are installed
    innermost around `fn`; effects they do not handle are resolved by the handlers
    around the *call*. With a `transform` (``jax.jit``, ``jax.jit(static_argnums=...)``
    or ``functools.partial(jax.jit, ...)`` whose options refer to `fn`'s parameters,
    ``jax.checkpoint``, ``jax.eval_shape``) every handler's values cross it as
    explicit inputs and outputs: states go in and come back, keys go in and their
    counters advance, emitted values come out, and static `Ask` values are part of
    the cache key. Changing a handled value never retraces.

    The handlers passed here are cells: a `State` handler keeps its value from one
    call to the next, a key stream its counter.

    A call that raises, eagerly or while tracing, leaves every handler as it was
    before the call.

    A compiled program is reused while every handler lookup its trace made would
    find the same: the same kind of handler with the same static value, or, for a
    lookup that found none, still none. Its body is traced once and compiled once
    per such environment, however many unrelated handlers are installed around the
    call. ``jax.eval_shape`` returns the output's shapes and changes no handler.

    With ``donate_state=True`` (``jax.jit`` only) the plumbed states' buffers are
    donated to the compiled call (``donate_argnums``): a state is updated in
    place, and the array it held before the call is deleted afterwards. The
    results are those of the call without donation.

    A compiled handled function (typed `Compiled`) has ``.trace(*args, **kwargs)``
    and ``.lower(*args, **kwargs)``, as a ``jax.jit`` function does: they stage the
    program the handlers installed at that moment would run (its handler values
    are explicit inputs and outputs) and return JAX's own ``Traced`` and
    ``Lowered`` (``.lower(x).compile().cost_analysis()``, ``.as_text()``, ...).
    Nothing runs and no handler changes.

    A coroutine function (``async def``) without a `transform` is handled too: the
    handlers are installed while the coroutine runs, in its task's context. A
    generator function, or a coroutine function with a `transform`, is refused
    (`EffectTypeError`): its body would run after the handled call returned.

    **Example:**

    >>> import jax, jax.numpy as jnp, effax
    >>> count = effax.State[jax.Array]("count")
    >>> def tick():
    ...     count.modify(lambda n: n + 1)
    ...     return count.get()
    >>> cell = count.init(jnp.int32(0))
    >>> fast_tick = effax.handle(tick, cell, transform=jax.jit)
    >>> [int(fast_tick()) for _ in range(3)]
    [1, 2, 3]

    """
    check_callable(fn, "fn")
    if transform is not None:
        check_callable(transform, "transform")
        _check_transform(transform)
    kind = _suspending(fn)
    if kind is not None and (transform is not None or kind != "a coroutine"):
        raise EffectTypeError(
            f"effax.handle got {kind} function {getattr(fn, '__qualname__', fn)!r}"
            + (
                ", which a JAX transformation cannot trace (it returns a "
                f"{kind.split()[-1]}, not arrays). Handle (or compile) the synchronous "
                "function it calls instead."
                if transform is not None
                else ": its body runs when it is iterated, after the handled call has "
                "returned, so the handlers would not be installed. Install them inside "
                "it (`with handler: ...` in the body), or handle the function that "
                "computes each item."
            )
        )
    for handler in handlers:
        if not isinstance(handler, Handler):
            raise EffectTypeError(
                "effax.handle(fn, *handlers) takes handlers (e.g. `steps.init(0)`), but "
                f"got {type(handler).__name__}: {handler!r}."
            )
    handlers = _chained(handlers)
    if not isinstance(donate_state, bool):
        raise EffectTypeError(
            f"effax.handle(..., donate_state=...) takes True or False, but got "
            f"{type(donate_state).__name__}: {donate_state!r}."
        )
    if donate_state and transform is None:
        raise EffectUsageError(
            "donate_state=True donates the plumbed states to a compiled call: give "
            "transform=jax.jit (or use effax.jit(fn, donate_state=True))."
        )
    if transform is None:
        function = None
    elif handlers:
        function = Function(fn, transform, handlers, donate_state=donate_state)
    else:
        function = _shared(fn, transform, donate_state)
    handled = Handled(fn, handlers, function)
    entry: Callable[..., Any] = handled.entry
    if function is not None:
        entry.__dict__ = _Attributes(entry.__dict__)
        entry.trace = lambda *args, **kwargs: handled.stage(args, kwargs)  # type: ignore[attr-defined]
        entry.lower = lambda *args, **kwargs: handled.stage(args, kwargs).lower()  # type: ignore[attr-defined]
    if kind == "a coroutine":

        async def run(*args: Any, **kwargs: Any) -> Any:
            return await handled.call_async(args, kwargs)

        entry = run

    ft.update_wrapper(entry, fn)
    declared = declared_row(fn)
    if declared is not None:
        # what a caller of the handled function must handle: fn's row minus ours
        own = {h.effect for h in handlers}
        declare_row(entry, tuple(e for e in declared if e not in own))
    return cast("Compiled[P, R]", entry) if function is not None else cast("Callable[P, R]", entry)


def _chained(handlers: tuple[Handler[Any], ...]) -> tuple[Handler[Any], ...]:
    """`handle`'s handlers with one per effect: an interceptor given after the
    handler of its effect is bound to forward to it (`Interceptor.over`), as
    ``effax.handlers`` nests them; two handlers of one effect otherwise raise."""
    chained: dict[Any, Handler[Any]] = {}
    for handler in handlers:
        before = chained.get(handler.effect)
        if before is not None:
            if not isinstance(handler, Interceptor):
                raise EffectUsageError(
                    f"effax.handle(fn, ...) got two handlers of {handler.effect!r}; only an "
                    "interceptor (effax.intercept) may follow the handler of its effect it "
                    "forwards to."
                )
            handler = handler.over(before)
        chained[handler.effect] = handler
    return tuple(chained.values())


class _Attributes(dict[str, Any]):
    """The `__dict__` of a compiled handled function: its `trace` and `lower` are
    its own, so `functools.update_wrapper` (which ``jax.jit(entry)`` applies,
    copying the wrapped function's attributes) does not copy them: ``jax.jit``
    would take them for its own methods, and ``jax.make_jaxpr`` / ``jax.eval_shape``
    of the handled function would stage effax's program instead of tracing it."""

    _OWN = frozenset({"trace", "lower"})

    def keys(self) -> Any:
        return [key for key in dict.keys(self) if key not in self._OWN]

    def __iter__(self) -> Any:
        return iter(self.keys())


# Transformations that change how a function is called or what it returns: `handle`
# passes the handlers' values as extra inputs and outputs, which these would map
# or differentiate. Their effect-aware versions, by the name a user writes.
_REWRITING = {
    jax.vmap: "effax.vmap(fn, keys=..., state=...)",
    jax.grad: "effax.grad(fn)",
    jax.value_and_grad: "effax.value_and_grad(fn)",
    jax.jacfwd: "effax.grad or jax.jacfwd inside the handled function",
    jax.jacrev: "effax.grad or jax.jacrev inside the handled function",
    jax.hessian: "jax.hessian inside the handled function",
    jax.pmap: "effax.shard_map",
}


def _check_transform(transform: Transform) -> None:
    """Refuse a transformation `handle` cannot carry effects across, naming the
    effax wrapper to use instead."""
    base = normalize_transform(transform)
    base = base.func if isinstance(base, ft.partial) else base
    rewritings: dict[Any, str] = dict(_REWRITING)
    nnx = sys.modules.get("flax.nnx")  # (Flax NNX's, when the program uses Flax)
    if nnx is not None:
        for name in ("vmap", "scan", "grad", "value_and_grad", "pmap"):
            twin = "effax.nnx.vmap" if name == "pmap" else f"effax.nnx.{name}"
            rewritings[getattr(nnx, name, None)] = f"{twin} (NNX's arguments) inside fn"
    for rewriting, instead in rewritings.items():
        if base is rewriting:
            name = getattr(base, "__name__", repr(base))
            if nnx is not None and base is getattr(nnx, name, None):
                name = f"nnx.{name}"
            raise EffectTypeError(
                f"effax.handle(fn, transform={name}) cannot carry "
                "effects: handle passes the handlers' values into the transformed function "
                "as extra inputs and takes their new values out as extra outputs, which "
                "this transformation would map or differentiate. handle's transform must "
                "call the function once with the inputs it was given (jax.jit, "
                "jax.checkpoint, jax.eval_shape, eqx.filter_jit, nnx.jit, nnx.remat). Use "
                f"{instead} instead."
            )


def _suspending(fn: Callable[..., Any]) -> str | None:
    """What kind of function `fn` is if calling it does not run its body."""
    if inspect.iscoroutinefunction(fn):
        return "a coroutine"
    if inspect.isasyncgenfunction(fn):
        return "an async generator"
    if inspect.isgeneratorfunction(fn):
        return "a generator"
    return None


@overload
def jit(
    fn: Callable[P, R], /, *, donate_state: bool = False, **jit_kwargs: Any
) -> Compiled[P, R]: ...
@overload
def jit(
    fn: None = None, /, *, donate_state: bool = False, **jit_kwargs: Any
) -> Callable[[Callable[P, R]], Compiled[P, R]]: ...
def jit(
    fn: Callable[P, R] | None = None, /, *, donate_state: bool = False, **jit_kwargs: Any
) -> Compiled[P, R] | Callable[[Callable[P, R]], Compiled[P, R]]:
    """``effax.handle(fn, transform=functools.partial(jax.jit, **jit_kwargs),
    donate_state=donate_state)``.

    Usable as ``@effax.jit`` or ``@effax.jit(static_argnums=...)``. Like
    ``jax.jit(f)``, ``effax.jit(f)`` written inline (``effax.jit(f)(x)`` in a loop)
    reuses the programs compiled for `f` by an earlier ``effax.jit(f)``.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[jnp.ndarray]("scale")
    >>> @effax.jit
    ... def f(x):
    ...     return x * scale.ask()
    >>> with scale.provide(jnp.float32(3)):
    ...     float(f(2.0))
    6.0

    """
    if fn is None:
        return lambda f: jit(f, donate_state=donate_state, **jit_kwargs)
    transform = ft.partial(jax.jit, **jit_kwargs) if jit_kwargs else jax.jit
    return handle(fn, transform=transform, donate_state=donate_state)
