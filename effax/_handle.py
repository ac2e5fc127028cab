"""`handle`, `jit` and `plumb_and_transform`: crossing a transformation with handlers.

The pattern underneath all of them is the *double wrapper*: outside the
transformation, compute what the function reads from its context; pass it in as an
explicit argument; inside, re-install it as context and run the function; return
what the context gained as an extra output; outside again, write it back.
"""

from __future__ import annotations

import functools as ft
import inspect
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import ExitStack
from typing import Any, ParamSpec, TypeVar, cast, overload

import jax

from . import _context, _trace
from ._effects import Blocked, Effect, Handler, NeedsEffect, Outcome, _check_home
from ._region import Plan, export_all, outcomes_of, outer_handlers, run_inside

__all__ = ["handle", "jit", "plumb_and_transform"]

P = ParamSpec("P")
R = TypeVar("R")

Transform = Callable[[Callable[..., Any]], Callable[..., Any]]

_ARGNUM_KEYWORDS = ("static_argnums", "donate_argnums")


# --- applying a transformation to the wrapper ---------------------------------------


def _shift_argnums(argnums: int | Sequence[int] | None) -> int | tuple[int, ...] | None:
    if argnums is None:
        return None
    if isinstance(argnums, int):
        return argnums + 1 if argnums >= 0 else argnums
    return tuple(i + 1 if i >= 0 else i for i in argnums)


def _apply_transform(
    transform: Transform,
    wrapper: Callable[..., Any],
    fn: Callable[..., Any],
    out_shardings: Callable[[Any], Any],
) -> Callable[..., Any]:
    """Apply `transform` to `wrapper(extra, *args, **kwargs)`, which wraps `fn`.

    `wrapper` gets `fn`'s signature with one positional-only parameter prepended, so
    transformations that read signatures (``jax.jit``'s `static_argnames`) see `fn`'s
    parameters. Options given through ``functools.partial(jax.jit, ...)`` refer to
    `fn`'s parameters and outputs and are adapted here: `static_argnums` and
    `donate_argnums` are shifted past the extra argument, a tuple of `in_shardings`
    gets an unspecified entry for it (so plumbed arrays keep their own shardings),
    and `out_shardings` is mapped by `out_shardings(...)` onto the wrapper's outputs.
    """
    try:
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        extra = inspect.Parameter("_effax_plumbed", inspect.Parameter.POSITIONAL_ONLY)
        params = [extra, *params]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    if getattr(transform, "__qualname__", "") == "jit.<locals>.<lambda>":
        # `jax.jit(static_argnums=...)` without a function: its options are hidden in
        # a closure, so indices could not be shifted past the plumbed argument.
        raise TypeError(
            "Pass jit options as functools.partial(jax.jit, static_argnums=...) rather "
            "than jax.jit(static_argnums=...): effax must see the options to map them "
            "onto the function it wraps."
        )
    if isinstance(transform, ft.partial) and transform.keywords:
        keywords = dict(transform.keywords)
        for name in _ARGNUM_KEYWORDS:
            if name in keywords:
                keywords[name] = _shift_argnums(keywords[name])
        if isinstance(keywords.get("in_shardings"), (tuple, list)):
            keywords["in_shardings"] = (None, *keywords["in_shardings"])
        if keywords.get("out_shardings") is not None:
            keywords["out_shardings"] = out_shardings(keywords["out_shardings"])
        transform = ft.partial(transform.func, *transform.args, **keywords)
    transformed = transform(wrapper)
    if not callable(transformed):
        raise TypeError(
            f"transform_to_apply must return a callable, but {transform!r} returned "
            f"{type(transformed).__name__}."
        )
    return transformed


def _check_callable(value: Any, argument: str) -> None:
    if not callable(value):
        raise TypeError(f"{argument} must be callable, but got {type(value).__name__}: {value!r}.")


# --- plumb_and_transform -----------------------------------------------------------


@overload
def plumb_and_transform(
    callable_to_transform: None = None,
    *,
    transform_to_apply: Transform,
    compute_extra_input_before: Callable[[], Any],
    create_context_managers_after: Callable[[Any], Iterable[Any]],
    compute_extra_output_inside: Callable[[], Any] | None = None,
    receive_extra_output_after: Callable[[Any], None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
@overload
def plumb_and_transform(
    callable_to_transform: Callable[P, R],
    *,
    transform_to_apply: Transform,
    compute_extra_input_before: Callable[[], Any],
    create_context_managers_after: Callable[[Any], Iterable[Any]],
    compute_extra_output_inside: Callable[[], Any] | None = None,
    receive_extra_output_after: Callable[[Any], None] | None = None,
) -> Callable[P, R]: ...
def plumb_and_transform(
    callable_to_transform: Callable[P, R] | None = None,
    *,
    transform_to_apply: Transform,
    compute_extra_input_before: Callable[[], Any],
    create_context_managers_after: Callable[[Any], Iterable[Any]],
    compute_extra_output_inside: Callable[[], Any] | None = None,
    receive_extra_output_after: Callable[[Any], None] | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Transform a function that reads context, plumbing the context in (and out).

    Each call of the returned function:

    1. calls `compute_extra_input_before()` outside the transformation (e.g. reads a
       context variable) to get an *extra input*, a pytree;
    2. calls the transformed wrapper with the extra input as an explicit argument;
       inside, the wrapper enters the context managers returned by
       `create_context_managers_after(extra_input)` and calls the function;
    3. if `compute_extra_output_inside` is given, calls it inside (after the function
       returned, with the context managers still entered) and returns its result as
       an *extra output* alongside the function's result;
    4. outside again, hands the extra output to `receive_extra_output_after`.

    **Arguments:**

    - `callable_to_transform`: the function; omit it to use this as a decorator.
    - `transform_to_apply`: e.g. ``jax.jit``, ``functools.partial(jax.jit,
      static_argnums=...)`` (indices refer to the function's own parameters), or
      ``jax.checkpoint``.
    - `compute_extra_input_before`: ``() -> extra_input``.
    - `create_context_managers_after`: ``extra_input -> iterable of context managers``.
    - `compute_extra_output_inside`: ``() -> extra_output``, optional.
    - `receive_extra_output_after`: ``extra_output -> None``; required with
      `compute_extra_output_inside`.

    **Returns:** a function with the same signature as `callable_to_transform`.

    **Example:**

    ```python
    >>> import jax, jax.numpy as jnp, effax
    >>> x_var = effax.JitAwareContextVar[jax.Array]("x")
    >>> @effax.plumb_and_transform(
    ...     transform_to_apply=jax.jit,
    ...     compute_extra_input_before=x_var.get,
    ...     create_context_managers_after=lambda x: [x_var.set_on_enter(x)],
    ... )
    ... def log_x():
    ...     return jnp.log(x_var.get())
    >>> with x_var.set_on_enter(jnp.e):
    ...     float(log_x())
    1.0

    ```
    """
    if callable_to_transform is None:
        return ft.partial(  # type: ignore[return-value]
            plumb_and_transform,
            transform_to_apply=transform_to_apply,
            compute_extra_input_before=compute_extra_input_before,
            create_context_managers_after=create_context_managers_after,
            compute_extra_output_inside=compute_extra_output_inside,
            receive_extra_output_after=receive_extra_output_after,
        )
    fn = callable_to_transform
    _check_callable(fn, "callable_to_transform")
    _check_callable(transform_to_apply, "transform_to_apply")
    _check_callable(compute_extra_input_before, "compute_extra_input_before")
    _check_callable(create_context_managers_after, "create_context_managers_after")
    if (compute_extra_output_inside is None) != (receive_extra_output_after is None):
        raise TypeError(
            "compute_extra_output_inside and receive_extra_output_after go together: "
            "pass both to plumb a value out, or neither."
        )
    if compute_extra_output_inside is not None:
        _check_callable(compute_extra_output_inside, "compute_extra_output_inside")
        _check_callable(receive_extra_output_after, "receive_extra_output_after")

    def wrapper(extra_input: Any, /, *args: Any, **kwargs: Any) -> Any:
        managers = create_context_managers_after(extra_input)
        try:
            managers = list(managers)
        except TypeError:
            raise TypeError(
                "create_context_managers_after must return an iterable of context "
                f"managers, but returned {type(managers).__name__}."
            ) from None
        with ExitStack() as stack:
            for manager in managers:
                if not (hasattr(manager, "__enter__") and hasattr(manager, "__exit__")):
                    raise TypeError(
                        "create_context_managers_after must return context managers, but "
                        f"one item is a {type(manager).__name__}: {manager!r}."
                    )
                stack.enter_context(manager)
            out = fn(*args, **kwargs)
            if compute_extra_output_inside is None:
                return out
            return out, compute_extra_output_inside()

    transformed = _apply_transform(
        transform_to_apply,
        wrapper,
        fn,
        out_shardings=(lambda o: o)
        if compute_extra_output_inside is None
        else (lambda o: (o, None)),
    )

    @ft.wraps(fn)
    def plumbed(*args: Any, **kwargs: Any) -> Any:
        result = transformed(compute_extra_input_before(), *args, **kwargs)
        if receive_extra_output_after is None:
            return result
        out, extra_output = result
        receive_extra_output_after(extra_output)
        return out

    return plumbed


# --- handle ---------------------------------------------------------------------------


@jax.tree_util.register_static
class _StaticOut:
    """A pytree node with no leaves: carries trace-time Python values out of a
    transformed function in its tree structure, so they come back with every call
    of a cached compiled function at no device cost."""

    __slots__ = ("value",)

    def __init__(self, value: Hashable) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is _StaticOut and other.value == self.value


class _Handled:
    """One `handle(fn, *handlers, transform=...)`: the function it returns.

    It is its own wrapper (``functools.update_wrapper`` gives it `fn`'s name,
    docstring and signature), so a call costs one Python frame.
    """

    __effax_row__: tuple[Effect[Any], ...]

    def __init__(
        self, fn: Callable[..., Any], own: tuple[Handler[Any], ...], transform: Transform | None
    ) -> None:
        self.fn = fn
        self.own = own
        self.own_effects = frozenset(h.effect for h in own)
        self.transform = transform
        # The outer effects `fn` was seen to perform. Until the first trace it is
        # None and every visible handler is plumbed in; afterwards only these are,
        # so unrelated handlers around the call cost nothing.
        # A dict used as an insertion-ordered set: the plan's order (and so the
        # compilation cache key) must not change from call to call.
        self.row: dict[Effect[Any], None] | None = None
        declared = getattr(fn, "__effax_row__", None)  # set by `effax.uses`
        if declared is not None:
            self.row = {e: None for e in declared if e not in self.own_effects}
        self.cache: dict[Hashable, Callable[..., Any]] = {}

    def handlers(self, stack: _context.Stack) -> list[Handler[Any]]:
        """The handlers to plumb in: the outer ones `fn` needs, then its own."""
        row = None if self.transform is None else self.row
        outer = outer_handlers(stack, skip=self.own_effects, row=row)
        for handler in self.own:
            _check_home(handler)
        outer.extend(self.own)
        return outer

    def compiled(self, plan: Plan) -> Callable[..., Any]:
        try:
            return self.cache[plan]
        except KeyError:
            pass
        assert self.transform is not None
        fn = self.fn
        plumbed = {effect for effect, _, _ in plan}

        def wrapper(dynamic: Any, /, *args: Any, **kwargs: Any) -> Any:
            # Runs while tracing: visible handlers that were not plumbed in are marked,
            # so performing one retries the call with it plumbed in.
            replumb = tuple(
                effect
                for effect, (_, ref) in _context.current_stack().items()
                if effect not in plumbed and not isinstance(ref, Blocked)
            )
            used: set[Effect[Any]] = set()
            out, inner = run_inside(
                plan, dynamic, fn, args, kwargs, track=used, replumb=replumb, owner=self
            )
            results = outcomes_of(plan, dynamic, inner, carry_required=False)
            self.note_performed(plan, used)
            return (
                out,
                [(r.carry, r.values) for r in results],
                _StaticOut(tuple(r.static for r in results)),
            )

        compiled = self.cache[plan] = _apply_transform(
            self.transform, wrapper, fn, out_shardings=lambda o: (o, None, None)
        )
        return compiled

    def note_performed(self, plan: Plan, used: set[Effect[Any]]) -> None:
        if self.row is None:
            self.row = {}
        for effect, _, _ in plan:
            if effect in used and effect not in self.own_effects:
                self.row[effect] = None

    def call_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        handlers = self.handlers(_context.current_stack())
        plan, dynamic = export_all(handlers)
        used: set[Effect[Any]] = set()
        out, inner = run_inside(plan, dynamic, self.fn, args, kwargs, track=used)
        results = outcomes_of(plan, dynamic, inner, carry_required=False)
        self.note_performed(plan, used)
        for handler, result in zip(handlers, results, strict=True):
            handler.absorb(result, steps=1)
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.transform is None:
            return self.call_eagerly(args, kwargs)
        stack = _context.current_stack()
        while True:
            # What to plumb depends only on the stack, the trace and the row: memoised
            # on the stack itself, so calls inside one `with` block derive it once.
            key = (self, _trace.current_trace_ref(), None if self.row is None else len(self.row))
            try:
                plumbing: _Plumbing = stack.memo[key]
            except KeyError:
                plumbing = stack.memo[key] = _Plumbing(self.handlers(stack))
            exports = [export() for export in plumbing.exports]
            statics = tuple([export.static for export in exports])
            try:
                compiled = plumbing.compiled[statics]
            except KeyError:
                plan = tuple(
                    (effect, cls, static)
                    for (effect, cls), static in zip(plumbing.kinds, statics, strict=True)
                )
                compiled = plumbing.compiled[statics] = self.compiled(plan)
            first = self.row is None
            dynamic = [(export.const, export.carry) for export in exports]
            try:
                if kwargs:
                    out, dyn_out, static_out = compiled(dynamic, *args, **kwargs)
                else:
                    out, dyn_out, static_out = compiled(dynamic, *args)
            except NeedsEffect as need:
                if need.owner is not self or self.row is None:
                    raise
                if need.effect in self.row:  # pragma: no cover - would loop forever
                    raise RuntimeError(
                        f"effax internal error: {need.effect!r} was plumbed into "
                        f"{getattr(self.fn, '__qualname__', self.fn)!r} and still reported "
                        "missing. Please report this with the program that raised it."
                    ) from None
                self.row[need.effect] = None
                continue
            break
        if first:
            self.handlers(stack)  # let enclosing traced regions note what fn performs
        for absorb, static, (carry, values) in zip(
            plumbing.absorbs, static_out.value, dyn_out, strict=True
        ):
            if static is not None or carry is not None or values:
                absorb(Outcome(static, carry, values), steps=1)
        return out


class _Plumbing:
    """The handlers one handled function plumbs under one installed stack, with
    their bound protocol methods and the compiled functions by static exports."""

    __slots__ = ("absorbs", "compiled", "exports", "handlers", "kinds")

    def __init__(self, handlers: list[Handler[Any]]) -> None:
        self.handlers = handlers
        self.kinds = tuple((h.effect, type(h)) for h in handlers)
        self.exports = [h.export for h in handlers]
        self.absorbs = [h.absorb for h in handlers]
        self.compiled: dict[tuple[Hashable, ...], Callable[..., Any]] = {}


def handle(
    fn: Callable[P, R], *handlers: Handler[Any], transform: Transform | None = None
) -> Callable[P, R]:
    """Run `fn` under `handlers`, optionally across a JAX transformation.

    Returns a function with `fn`'s signature. On each call, `handlers` are installed
    innermost around `fn`; effects they do not handle are resolved by the handlers
    around the *call*. With a `transform` (``jax.jit``, ``functools.partial(jax.jit,
    static_argnums=...)`` whose indices refer to `fn`'s parameters, ``jax.checkpoint``)
    every handler's values cross it as explicit inputs and outputs: states go in and
    come back, keys go in and their counters advance, emitted values come out, and
    static `Ask` values are part of the cache key. Changing a handled value never
    retraces.

    The handlers passed here are cells: a `State` handler keeps its value from one
    call to the next, a key stream its counter.

    A call that raises, eagerly or while tracing, leaves every handler as it was
    before the call.

    The first compiled call plumbs in every visible handler and records which
    effects `fn` performs; later calls plumb only those (one more trace if that set
    is smaller), so unrelated handlers around the call cost nothing.

    **Example:**

    ```python
    >>> import jax, jax.numpy as jnp, effax
    >>> count = effax.State[jax.Array]("count")
    >>> def tick():
    ...     count.modify(lambda n: n + 1)
    ...     return count.get()
    >>> cell = count.init(jnp.int32(0))
    >>> fast_tick = effax.handle(tick, cell, transform=jax.jit)
    >>> [int(fast_tick()) for _ in range(3)]
    [1, 2, 3]

    ```
    """
    _check_callable(fn, "fn")
    if transform is not None:
        _check_callable(transform, "transform")
    for handler in handlers:
        if not isinstance(handler, Handler):
            raise TypeError(
                "effax.handle(fn, *handlers) takes handlers (e.g. `steps.init(0)`), but "
                f"got {type(handler).__name__}: {handler!r}."
            )
    handled = _Handled(fn, handlers, transform)
    ft.update_wrapper(handled, fn)
    if handled.row is not None and getattr(fn, "__effax_row__", None) is not None:
        # what a caller of the handled function must handle: fn's row minus ours
        handled.__effax_row__ = tuple(handled.row)
    return cast("Callable[P, R]", handled)


@overload
def jit(fn: Callable[P, R], /, **jit_kwargs: Any) -> Callable[P, R]: ...
@overload
def jit(fn: None = None, /, **jit_kwargs: Any) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def jit(
    fn: Callable[P, R] | None = None, /, **jit_kwargs: Any
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """``effax.handle(fn, transform=functools.partial(jax.jit, **jit_kwargs))``.

    Usable as ``@effax.jit`` or ``@effax.jit(static_argnums=...)``.

    **Example:**

    ```python
    >>> import jax.numpy as jnp, effax
    >>> scale = effax.Ask[jnp.ndarray]("scale")
    >>> @effax.jit
    ... def f(x):
    ...     return x * scale.ask()
    >>> with scale.provide(jnp.float32(3)):
    ...     float(f(2.0))
    6.0

    ```
    """
    if fn is None:
        return lambda f: jit(f, **jit_kwargs)
    transform = ft.partial(jax.jit, **jit_kwargs) if jit_kwargs else jax.jit
    return handle(fn, transform=transform)
