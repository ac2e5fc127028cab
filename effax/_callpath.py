"""`Handled`: the call path of a handled function (what `handle` returns runs it).

A call of a compiled handled function finds the program of its environment
(`_program`): it resolves the effects the function is known to look up (its row)
under the installed handler stack, looks up or makes that program, calls it with
the plumbed handlers' inputs and absorbs what comes out. The first call learns the
row: it traces once with every reachable handler plumbed in, recording the
lookups, and the program of the narrower environment replays that trace's jaxpr
(for ``jax.jit``: the body is traced once and compiled once, however many
unrelated handlers are installed).

Once a program has run under a handler stack and trace, calls under them take the
*warm path* (`_warmpath`): generated code that checks the environment with a few
identity tests and moves handler fields in and out of the compiled function.
Everything else takes the general path here.
"""

from __future__ import annotations

import functools as ft
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, ParamSpec, TypeVar

from . import _context, _trace, _warmpath
from ._arguments import check_unleaked
from ._boundary import unplumbable
from ._effect import Effect
from ._environment import (
    Environment,
    Exports,
    Resolved,
    export_of,
    hidden_of,
    plumbed_keys,
    resolve,
)
from ._errors import EffectUsageError
from ._explain import explain
from ._inside import enter_inside, outcomes_of
from ._plan import Plan
from ._plumb import box
from ._program import Function, Program, Retrace, pending
from ._protocol import Handler, fields_of
from ._visible import outer_handlers
from ._writeback import absorb_all, outer_homes

__all__ = ["Handled"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


# --- the handled function ----------------------------------------------------------------


class _Bound(NamedTuple):
    """The warm path bound to one handler stack (held weakly) and trace, and a
    function running it."""

    stack: weakref.ref[_context.Stack]
    trace: _trace.TraceRef
    code: _warmpath.Template
    env: tuple[Any, ...]
    fn: Callable[..., Any]


class _EagerRegion(NamedTuple):
    """An eager handled call in progress: the copies it runs under, installed."""

    stack: _context.Stack
    handlers: Sequence[Handler[Any]]
    plan: Plan
    dynamic: list[tuple[Any, Any]]
    used: set[Effect[Any]]
    token: Any
    inner: list[Handler[Any]]

    def finish(self) -> None:
        """Absorb what the copies gained into the handlers they copy."""
        outcomes = outcomes_of(self.plan, self.dynamic, self.inner, carry_required=False)
        _context.mark_used(self.stack, self.used)  # a traced region around the call depends on them
        absorb_all(self.stack, self.handlers, outcomes, steps=1)


class Handled:
    """The state of one `handle(fn, *handlers, transform=...)`.

    What `handle` returns is `entry`, a function with `fn`'s parameters. It runs the
    general path (`call`) until a program has run under the current handler stack
    and trace; then its code and closure cell are swapped for that program's warm
    path (`_warmpath`), which hands back to `call` for anything it was not written
    for. `bound` keeps each stack's warm path (the stack held weakly: an entry dies
    with its stack), so going back to a stack only swaps code and environment.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        own: tuple[Handler[Any], ...],
        function: Function | None,
    ) -> None:
        self.fn = fn
        self.own = own
        self.function = function
        self.bound: dict[int, _Bound] = {}  # by id(stack); entries die with their stack
        self.form = _warmpath.entry_form(fn)
        self.general = _warmpath.general_template(fn, self.form)
        self.general_env: tuple[Any, ...] = (self.general.token, self.dispatch)
        self.entry = _warmpath.make_function(self.general, self.general_env)
        assert self.entry.__closure__ is not None
        self.cell = self.entry.__closure__[0]

    @_trace.api_boundary
    def dispatch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call the entry's current code was not written for: the warm path bound
        to this stack and trace if there is one (it becomes the entry's code), else
        the general path."""
        stack = _context.current_stack()
        bound = self.bound.get(id(stack))
        if bound is not None and bound.stack() is stack and bound.trace is _trace.trace_state.value:
            self.use(bound.code, bound.env)
            return bound.fn(*args, **kwargs)
        return self.call(args, kwargs)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The general path: resolve the environment, find or make its program,
        call it, absorb what comes out; then bind the warm path for this stack."""
        function = self.function
        if function is None:
            return self.call_eagerly(args, kwargs)
        stack = _context.current_stack()
        name = getattr(self.fn, "__name__", "function")
        if not _trace.evaluating():
            # under a trace, JAX takes a leaked tracer as an input without failing
            check_unleaked((args, kwargs), "its arguments", f"the compiled {name!r}")

        def run(
            resolved: Resolved, program: Program, exports: Exports, discover: bool
        ) -> tuple[Resolved | None, Program, Any]:
            if discover:
                return self.discover(stack, resolved, program, exports, args, kwargs)
            warm = self.rebind(stack, resolved, program)
            if warm is not None:  # a new stack of an environment already run
                return None, program, warm(*args, **kwargs)
            return resolved, program, program.fn(*_inputs(program, resolved), *args, **kwargs)

        try:
            resolved, program, result = self.attempt(stack, run)
        except Exception:
            # checked only once the call failed (free on every call that works):
            # name the argument if a leaked tracer was passed in
            check_unleaked((args, kwargs), "its arguments", f"the compiled {name!r}")
            raise
        if resolved is None:  # the warm path ran it, absorbed and all
            return result
        if program.abstract:  # jax.eval_shape: nothing was computed, nothing changes
            return result[0]
        handlers = resolved.handlers
        homes = absorb_all(stack, handlers, program.outcomes(result[1]), steps=1)
        if not any(homes):
            # Every handler lives on this trace (the warm path writes without
            # checking): calls under this stack can take the warm path.
            self.bind(stack, resolved.environment, program, handlers, result[1])
        return result[0]

    def attempt(
        self, stack: _context.Stack, run: Callable[[Resolved, Program, Exports, bool], T]
    ) -> T:
        """Resolve the environment under `stack`, find its program and `run` it
        (told whether the row is still to be discovered); again, under the widened
        row, while a trace looked up more (`Retrace`). JAX's errors about plumbed
        values are named for their effect."""
        function = self.function
        assert function is not None
        while True:
            exports = Exports()
            discover = function.row is None
            resolved = self.resolve(stack, exports, discover=discover)
            program = function.program(resolved.environment)
            try:
                return run(resolved, program, exports, discover)
            except Retrace:
                continue
            except Exception as error:
                if discover and function.row is not None:
                    # the trace read handlers the wide environment left out (a value
                    # that cannot be an input, read through a stand-in): name them
                    row = tuple(function.row)
                    resolved = resolve(stack, row, self.own, note=False, exports=exports)
                raise explain(program.plan, error, resolved)  # noqa: B904 (chained inside)

    def resolve(self, stack: _context.Stack, exports: Exports, *, discover: bool) -> Resolved:
        """The environment of a call under `stack`: the function's row, or (to
        `discover` it, before the first trace) every reachable handler that can be
        a compiled input (any other one is seen as a stand-in, plumbed in, and
        explained if that fails, only if the function looks it up)."""
        function = self.function
        assert function is not None
        if not discover:
            assert function.row is not None
            return resolve(stack, tuple(function.row), self.own, note=True, exports=exports)
        visible = outer_handlers(stack, skip=function.own_effects, chains=exports.chains, hidden={})
        effects = [
            h.effect
            for h in (c.target for c in visible)
            if unplumbable(h.effect, export_of(h, exports), "a compiled call", keyed=True) is None
        ]
        return resolve(stack, effects, self.own, note=False, exports=exports)

    def stage(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``jax.jit``'s `.trace(*args, **kwargs)` of the program the handlers
        installed now would run (JAX's own `Traced`; nothing runs, nothing changes)."""
        function = self.function
        assert function is not None

        def run(resolved: Resolved, program: Program, exports: Exports, discover: bool) -> Any:
            trace = getattr(program.fn, "trace", None)
            if trace is None:
                raise EffectUsageError(
                    ".trace() / .lower() stage the program of a jax.jit transformation; "
                    f"this function's transformation ({function.transform!r}) has no stages."
                )
            flat = _inputs(program, resolved)
            if not discover:
                return trace(*flat, *args, **kwargs)
            with pending(program, discover=True, exports=exports):
                trace(*flat, *args, **kwargs)
            raise Retrace  # the row is known now: stage its environment's program

        return self.attempt(_context.current_stack(), run)

    def discover(
        self,
        stack: _context.Stack,
        wide: Resolved,
        program: Program,
        exports: Exports,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Resolved, Program, Any]:
        """The first call: trace `fn` once with every reachable handler plumbed in,
        learn its row, and run the program of its environment.

        For a transformation with ahead-of-time stages (``jax.jit``) the trace is
        made with ``.trace()``, compiling nothing; if the function used every
        plumbed handler, that trace is the program's (``jax.jit`` reuses it);
        otherwise the narrower program replays its jaxpr. Either way the body is
        traced once and compiled once. Other transformations run the wide program
        for this call, and the narrow one from the next call on.
        """
        function = self.function
        assert function is not None
        flat = _inputs(program, wide)
        stage = getattr(program.fn, "trace", None)
        with pending(program, discover=True, exports=exports):
            if stage is None:
                result = program.fn(*flat, *args, **kwargs)
            else:
                traced = stage(*flat, *args, **kwargs)
        if stage is None:
            # The wide program ran; the regions and recorders around the call (an
            # enclosing compiled call being traced) learn what it looked up, as
            # the narrow resolution below tells them for staged transformations.
            resolve(stack, tuple(function.row or ()), self.own, note=True, exports=exports)
            return wide, program, result
        assert function.row is not None
        narrow = resolve(stack, tuple(function.row), self.own, note=True, exports=exports)
        if plumbed_keys(narrow.environment) == plumbed_keys(wide.environment):
            # the same inputs: the traced program is this environment's program too
            program = function.adopt(program, narrow.environment)
            return narrow, program, program.fn(*flat, *args, **kwargs)
        wide_program, program = program, function.program(narrow.environment)
        replay = Function.replay(wide_program, wide.exports, program, narrow, traced)
        flat = _inputs(program, narrow)
        try:
            with pending(program, discover=False, exports=exports, replay=replay):
                result = program.fn(*flat, *args, **kwargs)
        except Exception as error:
            raise explain(program.plan, error, narrow)  # noqa: B904 (chained inside)
        return narrow, program, result

    def call_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``handle`` without a transformation: run `fn` under copies of the own
        handlers and of every reachable one around the call, and absorb what they
        gained only once it returned (a call that raises changes nothing)."""
        region = self.enter_eagerly()
        try:
            out = self.fn(*args, **kwargs)
        finally:
            _context.pop(region.token)
        region.finish()
        return out

    async def call_async(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`call_eagerly` for a coroutine function: the handlers are installed
        while the coroutine runs (in its task's context)."""
        region = self.enter_eagerly()
        try:
            out = await self.fn(*args, **kwargs)
        finally:
            _context.pop(region.token)
        region.finish()
        return out

    def enter_eagerly(self) -> _EagerRegion:
        stack = _context.current_stack()
        exports = Exports()
        skip = [h.effect for h in self.own]
        visible = outer_handlers(stack, skip=skip, chains=exports.chains, hidden={})
        effects = [c.target.effect for c in visible]
        resolved = resolve(stack, effects, self.own, note=False, exports=exports)
        plan = Plan.of(resolved.chains, resolved.exports)
        dynamic = [(e.const, e.carry) for e in resolved.exports]
        used: set[Effect[Any]] = set()
        hidden = hidden_of(resolved.environment)
        token, inner = enter_inside(plan, dynamic, track=used, hidden=hidden)
        return _EagerRegion(stack, resolved.handlers, plan, dynamic, used, token, inner)

    def rebind(
        self, stack: _context.Stack, resolved: Resolved, program: Program
    ) -> Callable[..., Any] | None:
        """`program`'s warm path for its first layout bound to this stack and trace,
        if it was generated already and every handler lives on this trace (a `with`
        block per call costs one resolution, not a general call); else None."""
        if not program.warm:
            return None
        handlers = resolved.handlers
        environment = resolved.environment
        code = program.warm.get(self.warm_key(environment, handlers, None))
        if code is None or any(outer_homes(stack, handlers)):
            return None
        return self.install(stack, environment, program, handlers, code, None).fn

    def warm_key(
        self, environment: Environment, handlers: Sequence[Handler[Any]], node: Any
    ) -> tuple[Any, ...]:
        """What a warm path of a program is generated for: the output layout's
        node (None: the first), the handlers' fields, and whether it depends on the
        installed stack (it does unless `environment`, the call's, is the own
        handlers alone and the function looks up nothing else: a program traced
        with fewer lookups may serve it). (`environment` is the wide one after a
        first call through a transformation without stages, which ran before the
        row was known: the row, which holds lookups that found no handler, says
        whether the stack matters.)"""
        row = self.function.row if self.function is not None else None
        outer = len(environment) > len(self.own) or bool(row)
        return (node, tuple(fields_of(h) for h in handlers), outer)

    def bind(
        self,
        stack: _context.Stack,
        environment: Environment,
        program: Program,
        handlers: tuple[Handler[Any], ...],
        outputs: tuple[Any, ...] | list[Any],
    ) -> None:
        """Make the entry run `program`'s warm path, for the layout of `outputs`,
        under this stack and trace (where `environment` is the call's)."""
        node = None if type(outputs) is tuple else outputs[-1]
        key = self.warm_key(environment, handlers, node)
        code = program.warm_code(
            key,
            lambda: _warmpath.template(
                self.fn,
                self.form,
                program.plan,
                handlers,
                program.layout(outputs)[0],
                first=node is None,
                outer=key[2],
                box=box if program.box else None,
            ),
        )
        self.install(stack, environment, program, handlers, code, node)

    def install(
        self,
        stack: _context.Stack,
        environment: Environment,
        program: Program,
        handlers: tuple[Handler[Any], ...],
        code: _warmpath.Template,
        node: Any,
    ) -> _Bound:
        """Bind `code` to `handlers` under this stack and trace, and make it the
        entry's code."""

        def mismatch(hs: tuple[Handler[Any], ...], result: Any) -> Any:
            # A retrace gave another output layout: absorb it, switch layouts.
            current = _context.current_stack()
            absorb_all(current, hs, program.outcomes(result[1]), steps=1)
            self.bind(current, environment, program, hs, result[1])
            return result[0]

        stack_id = id(stack)

        def forget(ref: weakref.ref[_context.Stack]) -> None:
            # The stack is gone: drop its warm path, and its handlers with it.
            bound = self.bound.get(stack_id)
            if bound is not None and bound.stack is ref:
                del self.bound[stack_id]
                if self.cell.cell_contents is bound.env:
                    self.use(self.general, self.general_env)

        ref = weakref.ref(stack, forget)
        trace = _trace.current_trace_ref()
        env = _warmpath.environment(
            code,
            handlers,
            dispatch=self.dispatch,
            general=self.call,
            stack=ref,
            get_stack=_context.current_stack,
            trace_state=_trace.trace_state,
            trace=trace,
            fn=program.fn,
            retrace=Retrace,
            mismatch=mismatch,
            node=node,
            explain=ft.partial(explain, program.plan),
        )
        bound = self.bound[stack_id] = _Bound(
            ref, trace, code, env, _warmpath.make_function(code, env)
        )
        self.use(code, env)
        return bound

    def use(self, code: _warmpath.Template, env: tuple[Any, ...]) -> None:
        """Make the entry run `code` in `env` (either order is safe; see _warmpath)."""
        self.cell.cell_contents = env
        self.entry.__code__ = code.code


def _inputs(program: Program, resolved: Resolved) -> list[Any]:
    """The plumbed inputs of a call of `program` (whose carries' shardings it
    records, once)."""
    flat = program.plan.flatten(resolved.exports)
    if program.box:
        flat = [box(x) for x in flat]
    program.note_shardings(flat)
    return flat
