"""`handle` and `jit`: the call path of a handled function.

A compiled handled function keeps one *program* (the transformed plumbing wrapper)
per **environment**: what every handler lookup made while tracing it found. For
each effect the function was seen to look up, the environment records

- a plumbed handler: its effect, class and `Fields`, and its static export,
  compared as ``jax.jit`` compares static arguments (type included). Its const and
  carry are passed in as arguments, so their tree structure, shapes, dtypes and
  None-ness are part of ``jax.jit``'s own cache key;
- or why there was none to plumb: no handler (``None``), a `Blocked` marker, or a
  handler installed behind a staging trace (`_UNREACHABLE`).

The set of effects looked up, the *row*, is learnt by tracing. The first call
traces once with every reachable handler plumbed in and records the lookups; the
program is then narrowed to the row (for ``jax.jit``: by replaying that trace's
jaxpr, so the body is traced once and compiled once). Any later trace (``jax.jit``
traces again for new shapes) that looks up an effect outside its environment
aborts before anything is compiled, widens the row, and the call is retried: no
exception of effax's ever passes through user code, whose ``try``/``except`` around
a perform cannot change which program runs. Handlers visible but not plumbed are
seen inside as *stand-ins* (rebuilt from their current values) so a lookup of one
is recorded, not raised.

Per call, the *warm path* (`_warmpath`) checks the environment with a few identity
tests and moves handler fields in and out of the compiled function; everything
else takes the general path here.
"""

from __future__ import annotations

import contextvars
import functools as ft
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, ParamSpec, TypeVar, cast, overload

import jax

from . import _context, _trace, _warmpath
from ._effects import Blocked, Effect, Export, Fields, Handler, Outcome, _check_home, _Marker
from ._errors import OWN_WRITE_LEAK, EffectLeakError
from ._plumb import Transform, apply_transform, check_callable, normalize_transform
from ._region import note_used, outcomes_of, run_inside

__all__ = ["handle", "jit"]

P = ParamSpec("P")
R = TypeVar("R")

_LOCK = threading.RLock()


# --- the environment ------------------------------------------------------------------

# Why a looked-up effect has no plumbed handler (besides None: no handler at all, and
# a `Blocked` marker): its handler was installed behind a staging trace.
_UNREACHABLE = "unreachable"

# One looked-up effect: (effect, what was found, static export). `what` is
# (class, fields) for a plumbed handler, else None, a `Blocked` marker or
# `_UNREACHABLE`; the static export is ``(type, value)`` or None.
Key = tuple[Effect[Any], Any, Any]
Plan = tuple[Key, ...]


def static_key(static: Hashable) -> Any:
    """A static export as a cache key: ``1``, ``1.0`` and ``True`` stay apart."""
    return None if static is None else (type(static), static)


def slots(cls: type[Handler[Any]], fields: Fields | None) -> tuple[bool, bool]:
    """Whether a handler of this kind passes a const and a carry in (in that order).

    Derived from the kind alone, so that the inputs of a program follow from its
    plan: fields-based exports pass the fields they name, others both parts.
    """
    if fields is not None and cls.export is Handler.export:
        return fields.const is not None, fields.carry is not None
    return True, True


class Resolved(NamedTuple):
    """An environment under a handler stack: its plan, and the handlers to plumb
    (with their exports) in the plan's order."""

    plan: Plan
    handlers: tuple[Handler[Any], ...]
    exports: tuple[Export, ...]


def resolve(
    stack: _context.Stack,
    effects: Sequence[Effect[Any]],
    own: Sequence[Handler[Any]],
    *,
    note: bool,
) -> Resolved:
    """What a lookup of each of `effects` finds under `stack`, then `own`.

    With `note`, the enclosing traced regions and recorders learn that the call
    depends on these lookups (a compiled call inside a traced body).
    """
    trace = _trace.current_trace_ref()
    keys: list[Key] = []
    handlers: list[Handler[Any]] = []
    for effect in effects:
        entry = stack.get(effect)
        why: Any = None
        if entry is not None:
            handler, ref = entry
            if ref is not trace:
                if isinstance(ref, Blocked):
                    why = ref
                elif type(ref) is _Marker:
                    if note:
                        ref.used.add(effect)
                    ref = ref.ref
                if why is None and ref is not trace and _trace.reachability(ref) != "ok":
                    why = _UNREACHABLE
            if why is None:
                handlers.append(handler)
                continue
        if note:
            _context.note_missing(effect)
        keys.append((effect, why, None))
    for handler in own:
        _check_home(handler)
    handlers.extend(own)
    exports = tuple(h.export() for h in handlers)
    keys.extend(
        (h.effect, (type(h), h.fields), static_key(e.static))
        for h, e in zip(handlers, exports, strict=True)
    )
    return Resolved(tuple(keys), tuple(handlers), exports)


def flat_inputs(plan: Plan, exports: Sequence[Export]) -> list[Any]:
    """The plumbed arguments of a call: each handler's const and carry slots."""
    flat = []
    for (_, (cls, fields), _), export in zip(_plumbed(plan), exports, strict=True):
        has_const, has_carry = slots(cls, fields)
        if has_const:
            flat.append(export.const)
        if has_carry:
            flat.append(export.carry)
    return flat


def _plumbed(plan: Plan) -> list[Key]:
    return [key for key in plan if type(key[1]) is tuple]


# --- one program per environment ------------------------------------------------------


@jax.tree_util.register_static
class _StaticOut:
    """A pytree node with no leaves: carries a trace's output layout (what its
    handlers' outcomes were at trace time) out of every call of the cached program
    at no device cost. Interned per program, so that the warm path recognises its
    layout by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Hashable) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return type(other) is _StaticOut and other.value == self.value


# Per plumbed handler: its outcome's static part, whether a carry and values came out.
Layout = tuple[tuple[Hashable, bool, bool], ...]


class _Retrace(BaseException):
    """Internal: a trace looked up an effect outside its program's environment.

    Raised by the plumbing wrapper after the user's function returned (never
    through user code), so that the trace is dropped before anything is compiled;
    caught where the program was called, which retries under the widened row.
    """


class _Pending(NamedTuple):
    """What the caller of a program tells its wrapper's next trace: `discover`,
    learn the row (never retrace); `replay`, a traced jaxpr that stands in for the
    body (see `Function.replay`)."""

    program: Program
    discover: bool
    replay: Callable[..., Any] | None


_PENDING: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar(
    "effax.pending", default=None
)


class Program:
    """The transformed plumbing wrapper of one environment (`plan`).

    A call takes the plumbed handlers' slots, then `fn`'s arguments, and returns
    ``(out, outputs)``: the carries and values of the outcomes that have them. The
    first trace's layout is implied by `outputs` being a tuple; a trace with another
    layout (other shapes can draw another number of keys) returns a list that ends
    with its layout as a static node, so the common case costs no extra node.
    """

    def __init__(self, function: Function, plan: Plan) -> None:
        self.plan = plan
        self.keyed = {key[0] for key in plan}
        plumbed = _plumbed(plan)
        self.plumbed = frozenset(key[0] for key in plumbed)
        self.inner_plan = tuple((e, what[0], None if s is None else s[1]) for e, what, s in plumbed)
        self.slots = [slots(*what) for _, what, _ in plumbed]
        self.n_in = sum(a + b for a, b in self.slots)
        self.first: Layout | None = None
        self.layouts: dict[Layout, _StaticOut] = {}
        # generated warm paths, by (layout node, handler fields, depends on the stack)
        self.warm: dict[Any, _warmpath.Template] = {}
        self.abstract = function.abstract
        self.fn = function.transformed(self)

    def outputs(self, layout: Layout, outputs: list[Any]) -> tuple[Any, ...] | list[Any]:
        """What a trace with `layout` returns (the first layout seen is implied)."""
        with _LOCK:
            if self.first is None:
                self.first = layout
        if layout == self.first:
            return tuple(outputs)
        with _LOCK:
            node = self.layouts.setdefault(layout, _StaticOut(layout))
        return [*outputs, node]

    def layout(self, outputs: tuple[Any, ...] | list[Any]) -> tuple[Layout, Sequence[Any]]:
        """The layout of a call's `outputs`, and the outputs without it."""
        if type(outputs) is tuple:
            assert self.first is not None
            return self.first, outputs
        return outputs[-1].value, outputs[:-1]

    def outcomes(self, outputs: tuple[Any, ...] | list[Any]) -> list[Outcome]:
        """The plumbed handlers' outcomes, from a call's `outputs`."""
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

    def pack(self, outcomes: Sequence[Outcome]) -> tuple[Any, ...] | list[Any]:
        """The `outputs` a trace returns for its handlers' `outcomes`."""
        outputs: list[Any] = []
        layout = []
        for outcome in outcomes:
            has_carry, has_values = outcome.carry is not None, _present(outcome.values)
            if has_carry:
                outputs.append(outcome.carry)
            if has_values:
                outputs.append(outcome.values)
            layout.append((outcome.static, has_carry, has_values))
        return self.outputs(tuple(layout), outputs)


def _present(values: Any) -> bool:
    return values is not None and not (isinstance(values, (tuple, list)) and not values)


class Function:
    """Everything compiled for one function under one transformation: the row it
    was seen to look up and a program per environment. Shared by every `handle`
    of the same function and transformation (`_shared`), so that ``effax.jit(f)``
    written inline reuses its programs as ``jax.jit(f)`` does; it holds `fn` weakly
    where it can, so that the cache does not keep `fn` alive."""

    def __init__(
        self, fn: Callable[..., Any], transform: Transform, own: tuple[Handler[Any], ...]
    ) -> None:
        try:
            self.fn_ref: Callable[[], Callable[..., Any] | None] = weakref.ref(fn)
        except TypeError:
            self.fn_ref = lambda: fn
        self.transform, self.abstract = _abstract(transform)
        self.own = own
        own_effects = {h.effect for h in own}
        # The outer effects the function looks up, in a fixed order (the plan's
        # order is part of the cache key); None until the first trace.
        self.row: dict[Effect[Any], None] | None = None
        declared = getattr(fn, "__effax_row__", None)  # set by `effax.uses`
        if declared is not None:
            self.row = {e: None for e in declared if e not in own_effects}
        self.own_effects = frozenset(own_effects)
        self.programs: dict[Plan, Program] = {}

    def target(self) -> Callable[..., Any]:
        """The handled function (alive: its handled function is being called)."""
        fn = self.fn_ref()
        assert fn is not None, "effax internal error: a handled function was collected"
        return fn

    def learn(self, effects: Sequence[Effect[Any]]) -> None:
        with _LOCK:
            if self.row is None:
                self.row = {}
            for effect in effects:
                if effect not in self.own_effects:
                    self.row.setdefault(effect, None)

    def program(self, plan: Plan) -> Program:
        program = self.programs.get(plan)
        if program is None:
            with _LOCK:
                program = self.programs.get(plan)
                if program is None:
                    program = self.programs[plan] = Program(self, plan)
        return program

    def transformed(self, program: Program) -> Callable[..., Any]:
        """Apply the transformation to the plumbing wrapper of `program`."""
        target = self.target
        function = self

        def wrapper(*flat: Any, **kwargs: Any) -> Any:
            pending = _PENDING.get()
            if pending is not None and pending.program is program and pending.replay:
                replayed = pending.replay(flat, kwargs)
                if replayed is not None:
                    return replayed
            inputs = iter(flat[: program.n_in])
            dynamic = [
                (next(inputs) if has_const else None, next(inputs) if has_carry else None)
                for has_const, has_carry in program.slots
            ]
            used: set[Effect[Any]] = set()
            missing: set[Effect[Any]] = set()
            out, inner = run_inside(
                program.inner_plan,
                dynamic,
                target(),
                flat[program.n_in :],
                kwargs,
                track=used,
                standins=_standins(program),
                recorder=missing,
            )
            outcomes = outcomes_of(program.inner_plan, dynamic, inner, carry_required=False)
            looked = [key[0] for key in program.plan if key[0] in used]
            looked += [e for e in used if e not in program.keyed]
            looked += [e for e in missing if e not in used]
            function.learn(looked)
            discovering = pending is not None and pending.program is program and pending.discover
            if not discovering and not program.keyed.issuperset(looked):
                raise _Retrace  # this trace depends on more than its program's key
            return out, program.pack(outcomes)

        n = program.n_in
        return apply_transform(self.transform, wrapper, self.target(), lambda o: (o, None), n)

    @staticmethod
    def replay(
        wide: Program,
        wide_exports: Sequence[Export],
        program: Program,
        resolved: Resolved,
        traced: Any,
    ) -> Callable[..., Any] | None:
        """A replay of `wide`'s traced jaxpr for the narrower `program` of `resolved`.

        The body was traced once with every reachable handler plumbed in; the
        handlers `program` leaves out were not looked up, so once the outputs that
        only they need are pruned, what is left reads none of their inputs. It is
        evaluated with the narrower program's inputs. Returns None if that does not
        hold (the narrower program then traces the body itself).
        """
        jaxpr = getattr(traced, "jaxpr", None)
        out_tree = getattr(traced, "out_tree", None)
        if jaxpr is None or out_tree is None:
            return None
        index = {key[0]: i for i, key in enumerate(_plumbed(wide.plan))}
        chosen = [index[h.effect] for h in resolved.handlers]
        if chosen != sorted(chosen):  # pragma: no cover - the row keeps the wide order
            return None
        # Which output leaves to keep: the function's, and the chosen handlers'.
        numbered = jax.tree.unflatten(out_tree, range(out_tree.num_leaves))
        outcomes = wide.outcomes(numbered[1])
        keep = set(jax.tree.leaves(numbered[0]))
        for i in chosen:
            keep.update(jax.tree.leaves((outcomes[i].carry, outcomes[i].values)))
        evaluate, used = _trace.prune(jaxpr, [i in keep for i in range(out_tree.num_leaves)])
        # Which input leaves belong to a chosen handler: they must be the only
        # handler inputs still used.
        owner = [
            i
            for i, (has, export) in enumerate(zip(wide.slots, wide_exports, strict=True))
            for _ in jax.tree.leaves(_parts(has, export))
        ]
        if any(u and owner[i] not in chosen for i, u in enumerate(used[: len(owner)])):
            return None
        in_avals = list(jaxpr.in_avals)

        def replay(flat: Sequence[Any], kwargs: dict[str, Any]) -> Any:
            n = program.n_in
            args = [
                leaf
                for leaf in jax.tree.leaves((flat[n:], kwargs))
                if isinstance(leaf, jax.core.Tracer)
            ]
            slot_leaves = iter(jax.tree.leaves(flat[:n]))
            leaves = [next(slot_leaves) if owner[i] in chosen else None for i in range(len(owner))]
            leaves += args
            if len(leaves) != len(in_avals) or any(
                u and jax.typeof(leaf) != aval
                for leaf, aval, u in zip(leaves, in_avals, used, strict=True)
            ):
                return None
            results = iter(evaluate(*(leaf for leaf, u in zip(leaves, used, strict=True) if u)))
            outs = [next(results) if i in keep else None for i in range(out_tree.num_leaves)]
            out, outputs = jax.tree.unflatten(out_tree, outs)
            outcomes = wide.outcomes(outputs)
            return out, program.pack([outcomes[i] for i in chosen])

        return replay


def _parts(has: tuple[bool, bool], export: Export) -> list[Any]:
    return ([export.const] if has[0] else []) + ([export.carry] if has[1] else [])


def _standins(program: Program) -> list[Handler[Any]]:
    """Handlers visible at the call but not plumbed into `program`, rebuilt from
    their current values: performing one inside records the lookup (the trace is
    then dropped and the effect plumbed in) without raising through user code, and
    changes nothing outside."""
    standins = []
    for effect, (handler, ref) in _context.current_stack().items():
        if effect in program.plumbed or isinstance(ref, Blocked):
            continue
        if type(ref) is _Marker:
            ref = ref.ref
        if _trace.stagings_between(ref) not in (0, 1):  # behind the caller's own staging
            continue
        export = handler.export()
        standins.append(type(handler).rebuild(effect, export.static, export.const, export.carry))
    return standins


def _abstract(transform: Transform) -> tuple[Transform, bool]:
    """`transform` as a decorator, and whether its results are abstract.

    ``jax.eval_shape(fn, *args)`` is not a decorator: it is applied to the wrapper
    here, and its (abstract) outcomes are never absorbed.
    """
    transform = normalize_transform(transform)
    if transform is jax.eval_shape:
        return (lambda f: ft.partial(jax.eval_shape, f)), True
    return transform, False


# --- the handled function ----------------------------------------------------------------


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


class _Bound(NamedTuple):
    """The warm path bound to one handler stack (held weakly) and trace, and a
    function running it."""

    stack: weakref.ref[_context.Stack]
    trace: _trace.TraceRef
    code: _warmpath.Template
    env: tuple[Any, ...]
    fn: Callable[..., Any]


class _Handled:
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
        while True:
            row = function.row
            if row is None:  # never traced: plumb everything reachable, learn the row
                effects = _reachable(stack, function.own_effects)
                resolved = resolve(stack, effects, self.own, note=False)
            else:
                resolved = resolve(stack, tuple(row), self.own, note=True)
            program = function.program(resolved.plan)
            flat = flat_inputs(resolved.plan, resolved.exports)
            try:
                if row is None:
                    resolved, program, result = self.discover(
                        stack, resolved, program, flat, args, kwargs
                    )
                else:
                    result = program.fn(*flat, *args, **kwargs)
            except _Retrace:
                continue
            break
        if program.abstract:  # jax.eval_shape: nothing was computed, nothing changes
            return result[0]
        handlers = resolved.handlers
        outcomes = program.outcomes(result[1])
        homes = _outer_homes(stack, handlers)
        _check_writes(handlers, outcomes, homes)
        _absorb(handlers, outcomes)
        if not any(homes):
            # Every handler lives on this trace (the warm path writes without
            # checking): calls under this stack can take the warm path.
            self.bind(stack, resolved.plan, program, handlers, result[1])
        return result[0]

    def discover(
        self,
        stack: _context.Stack,
        wide: Resolved,
        program: Program,
        flat: list[Any],
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
        stage = getattr(program.fn, "trace", None)
        token = _PENDING.set(_Pending(program, True, None))
        try:
            if stage is None:
                return wide, program, program.fn(*flat, *args, **kwargs)
            traced = stage(*flat, *args, **kwargs)
        finally:
            _PENDING.reset(token)
        assert function.row is not None
        narrow = resolve(stack, tuple(function.row), self.own, note=True)
        if _plumbed(narrow.plan) == _plumbed(wide.plan):
            # the same inputs: the traced program is this environment's program too
            with _LOCK:
                program.keyed.update(key[0] for key in narrow.plan)
                program = function.programs.setdefault(narrow.plan, program)
            return narrow, program, program.fn(*flat, *args, **kwargs)
        wide_program, program = program, function.program(narrow.plan)
        replay = Function.replay(wide_program, wide.exports, program, narrow, traced)
        token = _PENDING.set(_Pending(program, False, replay))
        try:
            result = program.fn(*flat_inputs(narrow.plan, narrow.exports), *args, **kwargs)
        finally:
            _PENDING.reset(token)
        return narrow, program, result

    def call_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``handle`` without a transformation: run `fn` under copies of the own
        handlers and of every reachable one around the call, and absorb what they
        gained only once it returned (a call that raises changes nothing)."""
        stack = _context.current_stack()
        effects = _reachable(stack, frozenset(h.effect for h in self.own))
        resolved = resolve(stack, effects, self.own, note=False)
        handlers = resolved.handlers
        plan = tuple(
            (h.effect, type(h), e.static) for h, e in zip(handlers, resolved.exports, strict=True)
        )
        dynamic = [(e.const, e.carry) for e in resolved.exports]
        used: set[Effect[Any]] = set()
        out, inner = run_inside(plan, dynamic, self.fn, args, kwargs, track=used)
        outcomes = outcomes_of(plan, dynamic, inner, carry_required=False)
        note_used(stack, used)  # a traced region around the call depends on them
        _check_writes(handlers, outcomes, _outer_homes(stack, handlers))
        for handler, outcome in zip(handlers, outcomes, strict=True):
            handler.absorb(outcome, steps=1)
        return out

    def bind(
        self,
        stack: _context.Stack,
        plan: Plan,
        program: Program,
        handlers: tuple[Handler[Any], ...],
        outputs: tuple[Any, ...] | list[Any],
    ) -> None:
        """Make the entry run `program`'s warm path, for the layout of `outputs`,
        under this stack and trace (where `plan` is its environment)."""
        node = None if type(outputs) is tuple else outputs[-1]
        # depends on the stack unless the plan is the own handlers alone
        outer = len(plan) > len(self.own)
        fields = tuple(h.fields for h in handlers)
        code = program.warm.get((node, fields, outer))
        if code is None:
            code = program.warm[node, fields, outer] = _warmpath.template(
                self.fn,
                self.form,
                handlers,
                [key[2] for key in _plumbed(plan)],
                program.layout(outputs)[0],
                first=node is None,
                outer=outer,
            )

        def mismatch(hs: tuple[Handler[Any], ...], result: Any) -> Any:
            # A retrace gave another output layout: absorb it, switch layouts.
            _absorb(hs, program.outcomes(result[1]))
            self.bind(_context.current_stack(), plan, program, hs, result[1])
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
            retrace=_Retrace,
            mismatch=mismatch,
            node=node,
        )
        self.bound[stack_id] = _Bound(ref, trace, code, env, _warmpath.make_function(code, env))
        self.use(code, env)

    def use(self, code: _warmpath.Template, env: tuple[Any, ...]) -> None:
        """Make the entry run `code` in `env` (either order is safe; see _warmpath)."""
        self.cell.cell_contents = env
        self.entry.__code__ = code.code


def _reachable(stack: _context.Stack, skip: frozenset[Effect[Any]]) -> list[Effect[Any]]:
    """The effects of the handlers a first trace plumbs in: every one installed
    and reachable from here (those hidden or behind a staging trace are keyed
    only if the function looks them up)."""
    trace = _trace.current_trace_ref()
    effects = []
    for effect, (_, ref) in stack.items():
        if effect in skip or isinstance(ref, Blocked):
            continue
        if type(ref) is _Marker:
            ref = ref.ref
        if ref is trace or _trace.reachability(ref) == "ok":
            effects.append(effect)
    return effects


def _absorb(handlers: Sequence[Handler[Any]], outcomes: Sequence[Outcome]) -> None:
    for handler, outcome in zip(handlers, outcomes, strict=True):
        static, carry, values = outcome
        if static is not None or carry is not None or values is not None:
            handler.absorb(outcome, steps=1)


# Functions handled without handlers of their own, by function (weakly) and
# transformation, so that `effax.jit(f)` written inline reuses its programs.
_SHARED: weakref.WeakKeyDictionary[Any, dict[Hashable, Function]] = weakref.WeakKeyDictionary()


def _shared(fn: Callable[..., Any], transform: Transform) -> Function:
    key = _transform_key(transform)
    try:
        per_fn = _SHARED.get(fn) if key is not None else None
    except TypeError:  # fn is not hashable or not weakly referenceable
        per_fn = None
        key = None
    if key is None:
        return Function(fn, transform, ())
    with _LOCK:
        if per_fn is None:
            try:
                per_fn = _SHARED.setdefault(fn, {})
            except TypeError:
                return Function(fn, transform, ())
        function = per_fn.get(key)
        if function is None:
            function = per_fn[key] = Function(fn, transform, ())
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


def handle(
    fn: Callable[P, R], *handlers: Handler[Any], transform: Transform | None = None
) -> Callable[P, R]:
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
    check_callable(fn, "fn")
    if transform is not None:
        check_callable(transform, "transform")
    for handler in handlers:
        if not isinstance(handler, Handler):
            raise TypeError(
                "effax.handle(fn, *handlers) takes handlers (e.g. `steps.init(0)`), but "
                f"got {type(handler).__name__}: {handler!r}."
            )
    if transform is None:
        function = None
    elif handlers:
        function = Function(fn, transform, handlers)
    else:
        function = _shared(fn, transform)
    handled = _Handled(fn, handlers, function)
    entry = handled.entry
    ft.update_wrapper(entry, fn)
    declared = getattr(fn, "__effax_row__", None)
    if declared is not None:
        # what a caller of the handled function must handle: fn's row minus ours
        own = {h.effect for h in handlers}
        entry.__effax_row__ = tuple(e for e in declared if e not in own)  # type: ignore[attr-defined]
    return cast("Callable[P, R]", entry)


@overload
def jit(fn: Callable[P, R], /, **jit_kwargs: Any) -> Callable[P, R]: ...
@overload
def jit(fn: None = None, /, **jit_kwargs: Any) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def jit(
    fn: Callable[P, R] | None = None, /, **jit_kwargs: Any
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """``effax.handle(fn, transform=functools.partial(jax.jit, **jit_kwargs))``.

    Usable as ``@effax.jit`` or ``@effax.jit(static_argnums=...)``. Like
    ``jax.jit(f)``, ``effax.jit(f)`` written inline (``effax.jit(f)(x)`` in a loop)
    reuses the programs compiled for `f` by an earlier ``effax.jit(f)``.

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
