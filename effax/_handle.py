"""`handle`, `jit` and `plumb_and_transform`: crossing a transformation with handlers.

The pattern underneath all of them is the *double wrapper*: outside the
transformation, compute what the function reads from its context; pass it in as an
explicit argument; inside, re-install it as context and run the function; return
what the context gained as an extra output; outside again, write it back.
"""

from __future__ import annotations

import functools as ft
import inspect
import threading
import types
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import ExitStack
from typing import Any, NamedTuple, ParamSpec, TypeVar, cast, overload

import jax

from . import _context, _trace
from ._effects import (
    Blocked,
    Effect,
    Export,
    Handler,
    NeedsEffect,
    Outcome,
    _check_home,
    _Marker,
)
from ._errors import OWN_WRITE_LEAK, EffectLeakError
from ._fastcall import (
    Layout,
    Parts,
    Template,
    entry_form,
    environment,
    make_function,
    slow_template,
    template,
)
from ._region import Plan, export_all, outcomes_of, outer_handlers, run_inside

__all__ = ["handle", "jit", "plumb_and_transform"]

P = ParamSpec("P")
R = TypeVar("R")

Transform = Callable[[Callable[..., Any]], Callable[..., Any]]

_ARGNUM_KEYWORDS = ("static_argnums", "donate_argnums")


# --- applying a transformation to the wrapper ---------------------------------------


def _shift_argnums(argnums: int | Sequence[int] | None, n: int) -> int | tuple[int, ...] | None:
    if argnums is None:
        return None
    if isinstance(argnums, int):
        return argnums + n if argnums >= 0 else argnums
    return tuple(i + n if i >= 0 else i for i in argnums)


def _apply_transform(
    transform: Transform,
    wrapper: Callable[..., Any],
    fn: Callable[..., Any],
    out_shardings: Callable[[Any], Any],
    n_extra: int = 1,
) -> Callable[..., Any]:
    """Apply `transform` to `wrapper(*extra, *args, **kwargs)`, which wraps `fn`.

    `wrapper` gets `fn`'s signature with `n_extra` positional-only parameters
    prepended, so transformations that read signatures (``jax.jit``'s
    `static_argnames`) see `fn`'s parameters. Options given through
    ``functools.partial(jax.jit, ...)`` refer to `fn`'s parameters and outputs and
    are adapted here: `static_argnums` and `donate_argnums` are shifted past the
    extra arguments, a tuple of `in_shardings` gets unspecified entries for them (so
    plumbed arrays keep their own shardings), and `out_shardings` is mapped by
    `out_shardings(...)` onto the wrapper's outputs.
    """
    try:
        sig = inspect.signature(fn)
        extra = [
            inspect.Parameter(f"_effax_plumbed_{i}", inspect.Parameter.POSITIONAL_ONLY)
            for i in range(n_extra)
        ]
        params = [*extra, *sig.parameters.values()]
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
                keywords[name] = _shift_argnums(keywords[name], n_extra)
        if isinstance(keywords.get("in_shardings"), (tuple, list)):
            keywords["in_shardings"] = (*[None] * n_extra, *keywords["in_shardings"])
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
    of a cached compiled function at no device cost. Interned per compiled
    function, so that the generated call path recognises its layout by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Hashable) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is _StaticOut and other.value == self.value


class _Compiled:
    """The transformed function of one plan, its output layouts and the call paths
    generated for them.

    A call returns ``(out, outputs)``: the function's result and the handlers'
    carries and values. What the handlers' outcomes were at trace time (the
    *layout*: each one's static part, and whether a carry and values came out)
    must come back with every call of the cached program. The first trace's layout
    is implied by `outputs` being a tuple; a trace with any other layout (other
    shapes can draw another number of keys) returns a list whose last item is its
    layout as a static pytree node. So the common case pays for no extra node.
    """

    __slots__ = ("first", "fn", "layouts", "parts", "plan", "templates")

    def __init__(self, plan: Plan, parts: Parts) -> None:
        self.plan = plan
        self.parts = parts
        self.fn: Callable[..., Any] = _no_fn
        self.first: Layout | None = None
        self.layouts: dict[Layout, _StaticOut] = {}  # interned: compared by identity
        self.templates: dict[tuple[_StaticOut | None, tuple[Any, ...]], Template] = {}

    def outputs(self, layout: Layout, outputs: list[Any]) -> tuple[Any, ...] | list[Any]:
        """What a trace with `layout` returns (the first layout seen is implied)."""
        if self.first is None:
            with _LOCK:
                if self.first is None:
                    self.first = layout
        if layout == self.first:
            return tuple(outputs)
        return [*outputs, self.layouts.setdefault(layout, _StaticOut(layout))]

    def layout(self, outputs: tuple[Any, ...] | list[Any]) -> tuple[Layout, Sequence[Any]]:
        """The layout of a call's `outputs`, and the outputs without it."""
        if type(outputs) is tuple:
            assert self.first is not None
            return self.first, outputs
        return outputs[-1].value, outputs[:-1]

    def outcomes(self, outputs: tuple[Any, ...] | list[Any]) -> list[Outcome]:
        """The handlers' outcomes, from a call's `outputs`."""
        layout, parts = self.layout(outputs)
        remaining = iter(parts)
        return [
            Outcome(
                static,
                next(remaining) if has_carry else None,
                next(remaining) if has_values else None,
            )
            for static, has_carry, has_values in layout
        ]


class _Home(NamedTuple):
    """Where a plumbed handler was installed, when that is not the current trace."""

    trace: _trace.TraceRef
    own: bool  # passed to `handle` (not found on the stack)


def _outer_homes(stack: _context.Stack, handlers: Sequence[Handler[Any]]) -> list[_Home | None]:
    """For each handler, where it was installed if that is not the current trace
    (a raw ``jax.grad`` or ``jax.vmap`` runs around the call), else None. What a
    call writes into such a handler must hold no tracer of the current trace."""
    trace = _trace.current_trace_ref()
    homes: list[_Home | None] = []
    for handler in handlers:
        entry = stack.get(handler.effect)
        if entry is not None and entry[0] is handler:
            home, own = entry[1], False
        else:
            home, own = getattr(handler, "_home", None), True
        if type(home) is _Marker:
            home = home.ref
        homes.append(None if home is None or home is trace else _Home(home, own))
    return homes


def _check_writes(
    handlers: Sequence[Handler[Any]], outcomes: Sequence[Outcome], homes: Sequence[_Home | None]
) -> None:
    """Refuse (before anything is absorbed) outcomes that would leave a tracer in a
    handler installed under an outer trace: it could not outlive its trace."""
    for handler, outcome, home in zip(handlers, outcomes, homes, strict=True):
        if home is None:
            continue
        written = (outcome.carry, outcome.values)
        if not home.own:
            handler.effect._check_write(written, home.trace)
        elif _trace.foreign_tracers(jax.tree.leaves(written), home.trace):
            raise EffectLeakError(OWN_WRITE_LEAK.format(effect=handler.effect))


_LOCK = threading.Lock()


def _no_fn(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - replaced at once
    raise AssertionError("effax internal error: a compiled function was used too early")


def _flat_inputs(exports: Sequence[Export], parts: Parts) -> list[Any]:
    """The plumbed arguments of a compiled call: each present const and carry."""
    flat = []
    for export, (has_const, has_carry) in zip(exports, parts, strict=True):
        if has_const:
            flat.append(export.const)
        if has_carry:
            flat.append(export.carry)
    return flat


def _present(values: Any) -> bool:
    return values is not None and not (isinstance(values, (tuple, list)) and not values)


class _Handled:
    """The state of one `handle(fn, *handlers, transform=...)`.

    What `handle` returns is `entry`, a function with `fn`'s parameters generated by
    `_fastcall`. A compiled call takes one of two paths:

    - the general one (`call_slowly`), written against the `Handler` protocol: find
      the handlers to plumb, export them, look up or trace the compiled function of
      that plan, absorb the outcomes. At its end it generates (once per plan and
      output layout) the code of the fast path and installs it for the current
      handler stack and trace;
    - the fast one: the entry's code and environment, which do the same in
      straight-line attribute reads and writes, and fall back to the general path
      for anything they were not written for. `fast` keeps each installed stack's
      environment (the stack held weakly: an entry dies with its stack), so going
      back to a stack only swaps the entry's code and environment.
    """

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
        self.cache: dict[tuple[Plan, Parts], _Compiled] = {}
        self.fast: dict[int, _Fast] = {}  # by id(stack); entries die with their stack
        self.path: _Path | None = None
        # The function `handle` returns, with fn's parameters; its code and its
        # closure cell (the environment) are swapped for the generated call path
        # of the stack it was last called under.
        self.form = entry_form(fn)
        self.slow = slow_template(fn, self.form)
        self.slow_env: tuple[Any, ...] = (self.slow.token, self.enter)
        self.entry = make_function(self.slow, self.slow_env)
        assert self.entry.__closure__ is not None
        self.cell = self.entry.__closure__[0]

    def handlers(self, stack: _context.Stack) -> list[Handler[Any]]:
        """The handlers to plumb in: the outer ones `fn` needs, then its own."""
        row = None if self.transform is None else self.row
        outer = outer_handlers(stack, skip=self.own_effects, row=row)
        for handler in self.own:
            _check_home(handler)
        outer.extend(self.own)
        return outer

    def compiled(self, plan: Plan, parts: Parts) -> _Compiled:
        try:
            return self.cache[plan, parts]
        except KeyError:
            pass
        assert self.transform is not None
        fn = self.fn
        plumbed = {effect for effect, _, _ in plan}
        record = _Compiled(plan, parts)
        n_in = sum(has_const + has_carry for has_const, has_carry in parts)

        def wrapper(*flat: Any, **kwargs: Any) -> Any:
            # Runs while tracing: visible handlers that were not plumbed in are marked,
            # so performing one retries the call with it plumbed in.
            replumb = tuple(
                effect
                for effect, (_, ref) in _context.current_stack().items()
                if effect not in plumbed and not isinstance(ref, Blocked)
            )
            inputs = iter(flat[:n_in])
            dynamic = [
                (next(inputs) if has_const else None, next(inputs) if has_carry else None)
                for has_const, has_carry in parts
            ]
            used: set[Effect[Any]] = set()
            out, inner = run_inside(
                plan, dynamic, fn, flat[n_in:], kwargs, track=used, replumb=replumb, owner=self
            )
            results = outcomes_of(plan, dynamic, inner, carry_required=False)
            self.note_performed(plan, used)
            outputs: list[Any] = []
            layout = []
            for result in results:
                has_carry, has_values = result.carry is not None, _present(result.values)
                if has_carry:
                    outputs.append(result.carry)
                if has_values:
                    outputs.append(result.values)
                layout.append((result.static, has_carry, has_values))
            return out, record.outputs(tuple(layout), outputs)

        record.fn = _apply_transform(
            self.transform, wrapper, fn, out_shardings=lambda o: (o, None), n_extra=n_in
        )
        return self.cache.setdefault((plan, parts), record)

    def note_performed(self, plan: Plan, used: set[Effect[Any]]) -> None:
        if self.row is None:
            self.row = {}
        for effect, _, _ in plan:
            if effect in used and effect not in self.own_effects:
                self.row[effect] = None

    def call_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        stack = _context.current_stack()
        handlers = self.handlers(stack)
        plan, dynamic = export_all(handlers)
        used: set[Effect[Any]] = set()
        out, inner = run_inside(plan, dynamic, self.fn, args, kwargs, track=used)
        results = outcomes_of(plan, dynamic, inner, carry_required=False)
        self.note_performed(plan, used)
        _check_writes(handlers, results, _outer_homes(stack, handlers))
        for handler, result in zip(handlers, results, strict=True):
            handler.absorb(result, steps=1)
        return out

    def enter(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call that the entry's current code was not written for."""
        if self.transform is None:
            return self.call_eagerly(args, kwargs)
        stack = _context.current_stack()
        fast = self.fast.get(id(stack))
        if fast is not None and fast.stack() is stack and fast.trace is _trace.current_trace_ref():
            self.use(fast.code, fast.env)  # the next call takes it directly
            return fast.fn(*args, **kwargs)
        path = self.path
        if path is not None and self.row is not None and len(self.row) == path.row:
            # A stack not seen yet (e.g. a `with` block per call): if it resolves
            # to handlers of the same kinds, the generated code serves it as it is
            # (it checks static exports itself); only its environment is new.
            handlers = tuple(self.handlers(stack))
            if _kinds(handlers) == path.kinds and not any(_outer_homes(stack, handlers)):
                return self.bind(stack, path, handlers).fn(*args, **kwargs)
        return self.call_slowly(args, kwargs)

    def call_slowly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        stack = _context.current_stack()
        while True:
            row_before = None if self.row is None else len(self.row)
            handlers = tuple(self.handlers(stack))
            exports = [h.export() for h in handlers]
            plan = tuple(
                (h.effect, type(h), e.static) for h, e in zip(handlers, exports, strict=True)
            )
            parts = tuple((e.const is not None, e.carry is not None) for e in exports)
            record = self.compiled(plan, parts)
            flat = _flat_inputs(exports, parts)
            try:
                result = record.fn(*flat, *args, **kwargs)
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
        if row_before is None:
            self.handlers(stack)  # let enclosing traced regions note what fn performs
        outcomes = record.outcomes(result[1])
        homes = _outer_homes(stack, handlers)
        _check_writes(handlers, outcomes, homes)
        self.absorb(handlers, outcomes)
        if not any(homes) and row_before is not None and len(self.row or ()) == row_before:
            # Every handler lives on this trace (the generated path writes without
            # checking), and the plan holds for the next calls under this stack.
            self.install(stack, record, handlers, result[1])
        return result[0]

    def absorb(self, handlers: Sequence[Handler[Any]], outcomes: Sequence[Outcome]) -> None:
        for handler, outcome in zip(handlers, outcomes, strict=True):
            static, carry, values = outcome
            if static is not None or carry is not None or values is not None:
                handler.absorb(outcome, steps=1)

    def install(
        self,
        stack: _context.Stack,
        record: _Compiled,
        handlers: tuple[Handler[Any], ...],
        outputs: tuple[Any, ...] | list[Any],
    ) -> None:
        """Give this stack and trace the generated call path of `record`, for the
        layout of `outputs`, and make it the entry's code."""
        node = None if type(outputs) is tuple else outputs[-1]
        kinds = _kinds(handlers)
        fields = tuple(f for _, _, f in kinds)
        code = record.templates.get((node, fields))
        if code is None:
            code = record.templates[node, fields] = template(
                self.fn,
                self.form,
                handlers,
                [static for _, _, static in record.plan],
                record.parts,
                record.layout(outputs)[0],
                first=node is None,
                outer=len(handlers) > len(self.own),  # the own handlers come last
            )

        def mismatch(hs: tuple[Handler[Any], ...], result: Any) -> Any:
            # A retrace gave another output layout: absorb it, switch paths.
            self.absorb(hs, record.outcomes(result[1]))
            self.install(_context.current_stack(), record, hs, result[1])
            return result[0]

        assert self.row is not None
        self.path = _Path(len(self.row), kinds, code, (record.fn, self.call_slowly, mismatch, node))
        self.bind(stack, self.path, handlers)

    def bind(self, stack: _context.Stack, path: _Path, handlers: tuple[Handler[Any], ...]) -> _Fast:
        """Run `path` for `handlers` under this stack and trace, from now on."""
        stack_id = id(stack)
        trace = _trace.current_trace_ref()

        def forget(ref: weakref.ref[_context.Stack]) -> None:
            # The stack is gone: drop its path, and its handlers with it.
            fast = self.fast.get(stack_id)
            if fast is not None and fast.stack is ref:
                del self.fast[stack_id]
                if self.cell.cell_contents is fast.env:
                    self.use(self.slow, self.slow_env)

        ref = weakref.ref(stack, forget)
        check = (ref, _context.current_stack, _trace.trace_state, trace)
        env = environment(path.code, self.enter, check, path.call, handlers)
        fast = self.fast[stack_id] = _Fast(
            ref, trace, path.code, env, make_function(path.code, env)
        )
        self.use(path.code, env)
        return fast

    def use(self, code: Template, env: tuple[Any, ...]) -> None:
        """Make the entry run `code` in `env` (either order is safe; see _fastcall)."""
        self.cell.cell_contents = env
        self.entry.__code__ = code.code


def _kinds(handlers: Sequence[Handler[Any]]) -> tuple[tuple[Effect[Any], type, Any], ...]:
    """What generated code depends on in the handlers: effect, class and fields."""
    return tuple((h.effect, type(h), h.fields) for h in handlers)


class _Path(NamedTuple):
    """The generated call path last installed, for any stack with handlers of the
    same `kinds` (effect, class, fields), while the row keeps its length `row`:
    its code and the objects it calls (compiled function, retry, mismatch, node)."""

    row: int
    kinds: tuple[tuple[Effect[Any], type, Any], ...]
    code: Template
    call: tuple[Any, ...]


class _Fast(NamedTuple):
    """A stack's generated call path: the stack (weakly), its trace, the code, its
    environment, and a function running them (for the call that installs it)."""

    stack: weakref.ref[_context.Stack]
    trace: _trace.TraceRef
    code: Template
    env: tuple[Any, ...]
    fn: types.FunctionType


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
    entry = handled.entry
    ft.update_wrapper(entry, fn)
    entry.__effax_handled__ = handled  # type: ignore[attr-defined]
    if handled.row is not None and getattr(fn, "__effax_row__", None) is not None:
        # what a caller of the handled function must handle: fn's row minus ours
        entry.__effax_row__ = tuple(handled.row)  # type: ignore[attr-defined]
    return cast("Callable[P, R]", entry)


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
