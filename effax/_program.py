"""Compiled programs of a handled function, one per trace environment.

A compiled handled function keeps one *program* (the transformed plumbing wrapper)
per **environment** (`_environment`): what every handler lookup made while tracing
it found.

The set of effects looked up, the *row*, is learnt by tracing (`Function.learn`).
Any trace (``jax.jit`` traces again for new shapes) that looks up an effect outside
its program's environment aborts once the user's function has returned, before
anything is compiled (`Retrace`), and the call is retried under the widened row: no
exception of effax's ever passes through user code, whose ``try``/``except`` around
a perform cannot change which program runs. Handlers visible but not plumbed are
seen inside as *stand-ins* (rebuilt from their current values), so a lookup of one
is recorded, not raised. How a call finds its program is `_callpath`'s business.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools as ft
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple

import jax

from . import _trace, _warmpath
from ._boundary import (
    check_module_updates,
    check_no_ref_out,
    module_values,
    nnx_dropping,
    zeros_like,
)
from ._effect import Effect, declared_row
from ._environment import Environment, Exports, Resolved, hidden_of, plan_of, standins
from ._inside import outcomes_of, passed_through, run_inside
from ._plumb import Transform, apply_transform, normalize_transform, traces_numbers
from ._protocol import Export, Handler, Outcome

__all__ = ["LOCK", "Function", "Layout", "Pending", "Program", "Retrace", "pending"]

LOCK = threading.RLock()


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


class Retrace(BaseException):
    """Internal: a trace looked up an effect outside its program's environment.

    Raised by the plumbing wrapper after the user's function returned (never
    through user code), so that the trace is dropped before anything is compiled;
    caught where the program was called, which retries under the widened row.
    """


class Pending(NamedTuple):
    """What the caller of a program tells its wrapper's next trace: `discover`,
    learn the row (never retrace); `replay`, a traced jaxpr that stands in for the
    body (see `Function.replay`); `exports`, the exports the call asked for (so
    that the stand-ins rebuilt inside do not ask again)."""

    program: Program
    discover: bool
    replay: Callable[..., Any] | None
    exports: Exports


_PENDING: contextvars.ContextVar[Pending | None] = contextvars.ContextVar(
    "effax.pending", default=None
)


@contextlib.contextmanager
def pending(
    program: Program,
    *,
    discover: bool,
    exports: Exports,
    replay: Callable[..., Any] | None = None,
) -> Iterator[None]:
    """Tell `program`'s traces made inside the ``with`` block what `Pending` says."""
    token = _PENDING.set(Pending(program, discover, replay, exports))
    try:
        yield
    finally:
        _PENDING.reset(token)


class Program:
    """The transformed plumbing wrapper of one environment (`environment`), whose
    inputs are laid out by `plan`.

    A call takes the plumbed handlers' slots, then `fn`'s arguments, and returns
    ``(out, outputs)``: the carries and values of the outcomes that have them. The
    first trace's layout is implied by `outputs` being a tuple; a trace with another
    layout (other shapes can draw another number of keys) returns a list that ends
    with its layout as a static node, so the common case costs no extra node.
    """

    def __init__(self, function: Function, environment: Environment) -> None:
        self.environment = environment
        self.keyed = {key[0] for key in environment}
        self.plan = plan_of(environment)
        self.plumbed = frozenset(self.plan.effects)
        self.hidden = hidden_of(environment)
        self.first: Layout | None = None
        self.layouts: dict[Layout, _StaticOut] = {}
        # generated warm paths, by (layout node, handler fields, depends on the stack)
        self.warm: dict[Any, _warmpath.Template] = {}
        self.abstract = function.abstract
        self.box = function.box
        # The shardings of the plumbed carries at the first call (None: let XLA
        # choose), which the carries keep coming out with (`keep_shardings`).
        self.carry_shardings: list[Any] | None = None
        self.fn = function.transformed(self)

    def warm_code(
        self, key: Hashable, make: Callable[[], _warmpath.Template]
    ) -> _warmpath.Template:
        """The generated warm path of this program for `key` (made once)."""
        code = self.warm.get(key)
        if code is None:
            with LOCK:
                code = self.warm.setdefault(key, make())
        return code

    def note_shardings(self, flat: Sequence[Any]) -> None:
        """Record the plumbed carries' shardings, once, before the first trace."""
        if self.carry_shardings is None:
            self.carry_shardings = [
                jax.tree.map(_committed_sharding, flat[i]) for i in self.plan.carry_positions
            ]

    def keep_placements(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Inside a trace: each carry that comes out is constrained to the sharding
        it went in with (a state must not come back resharded by XLA's choice). Its
        type is the one the traced code gave it, as eagerly: a Python number set to
        a float32 array comes back a float32 array, not weakly typed (the next call
        then compiles once more, for the array)."""
        shardings = iter(self.carry_shardings or ())
        kept = []
        for slot, outcome in zip(self.plan.slots, outcomes, strict=True):
            sharding = next(shardings, None) if slot.has_carry else None
            if outcome.carry is not None and sharding is not None:
                new = _constrain(outcome.carry, sharding)
                if new is not outcome.carry:
                    outcome = outcome._replace(carry=new)
            kept.append(outcome)
        return kept

    def outputs(self, layout: Layout, outputs: list[Any]) -> tuple[Any, ...] | list[Any]:
        """What a trace with `layout` returns (the first layout seen is implied)."""
        with LOCK:
            if self.first is None:
                self.first = layout
        if layout == self.first:
            return tuple(outputs)
        with LOCK:
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


class _Placed:
    """Where a committed carry leaf was placed: its sharding and shape (a class of
    its own, not a tuple, so that a carry holding tuples keeps its structure)."""

    __slots__ = ("shape", "sharding")

    def __init__(self, sharding: Any, shape: Any) -> None:
        self.sharding, self.shape = sharding, shape


def _committed_sharding(x: Any) -> Any:
    """`x`'s sharding if it was placed explicitly (a committed array), else None."""
    if isinstance(x, jax.Array) and not _trace.is_tracer(x) and x.committed:
        return _Placed(x.sharding, x.shape)
    return None


def _constrain(carry: Any, shardings: Any) -> Any:
    leaves, treedef = jax.tree.flatten(carry)
    placed = jax.tree.leaves(shardings, is_leaf=lambda s: s is None or isinstance(s, _Placed))
    if len(placed) != len(leaves):
        return carry
    return jax.tree.unflatten(
        treedef,
        [
            _place(x, s.sharding) if s is not None and x.shape == s.shape else x
            for x, s in zip(leaves, placed, strict=True)
        ],
    )


def _place(x: Any, sharding: Any) -> Any:
    return jax.lax.with_sharding_constraint(x, sharding)  # type: ignore[no-untyped-call]


def _present(values: Any) -> bool:
    return values is not None and not (isinstance(values, (tuple, list)) and not values)


class Function:
    """Everything compiled for one function under one transformation: the row it
    was seen to look up and a program per environment. Shared by every `handle`
    of the same function and transformation (`_shared`), so that ``effax.jit(f)``
    written inline reuses its programs as ``jax.jit(f)`` does; it holds `fn` weakly
    where it can, so that the cache does not keep `fn` alive."""

    def __init__(
        self,
        fn: Callable[..., Any],
        transform: Transform,
        own: tuple[Handler[Any], ...],
        *,
        donate_state: bool = False,
    ) -> None:
        try:
            self.fn_ref: Callable[[], Callable[..., Any] | None] = weakref.ref(fn)
        except TypeError:
            self.fn_ref = lambda: fn
        self.transform, self.abstract = _abstract(transform)
        # Whether Python numbers among the plumbed inputs cross as NumPy scalars:
        # for transformations that could hold them static (`_plumb.traces_numbers`).
        self.box = not traces_numbers(transform)
        self.donate_state = donate_state
        self.own = own
        own_effects = {h.effect for h in own}
        # The outer effects the function looks up, in a fixed order (the plan's
        # order is part of the cache key); None until the first trace.
        self.row: dict[Effect[Any], None] | None = None
        declared = declared_row(fn)
        if declared is not None:
            self.row = {e: None for e in declared if e not in own_effects}
        self.own_effects = frozenset(own_effects)
        self.programs: dict[Environment, Program] = {}

    def target(self) -> Callable[..., Any]:
        """The handled function (alive: its handled function is being called)."""
        fn = self.fn_ref()
        assert fn is not None, "effax internal error: a handled function was collected"
        return fn

    def learn(self, effects: Sequence[Effect[Any]]) -> None:
        with LOCK:
            if self.row is None:
                self.row = {}
            for effect in effects:
                if effect not in self.own_effects:
                    self.row.setdefault(effect, None)

    def program(self, environment: Environment) -> Program:
        program = self.programs.get(environment)
        if program is None:
            with LOCK:
                program = self.programs.get(environment)
                if program is None:
                    program = self.programs[environment] = Program(self, environment)
        return program

    def adopt(self, program: Program, environment: Environment) -> Program:
        """Make `program` (traced with the same inputs as `environment`'s would
        be) the program of `environment` too, unless it has one; returns it."""
        with LOCK:
            program.keyed.update(key[0] for key in environment)
            return self.programs.setdefault(environment, program)

    def transformed(self, program: Program) -> Callable[..., Any]:
        """Apply the transformation to the plumbing wrapper of `program`."""
        target = self.target
        function = self

        plan = program.plan

        def wrapper(*flat: Any, **kwargs: Any) -> Any:
            told = _PENDING.get()
            pending = told if told is not None and told.program is program else None
            if pending is not None and pending.replay is not None:
                replayed = pending.replay(flat, kwargs)
                if replayed is not None:
                    return replayed
            dynamic = plan.unflatten(flat[: plan.n_in])
            used: set[Effect[Any]] = set()
            missing: set[Effect[Any]] = set()
            # (a body changing a Flax NNX module it was given: the name to refuse it by)
            dropping = None if self.abstract else nnx_dropping(self.transform)
            at_entry = module_values((flat[plan.n_in :], kwargs)) if dropping else []
            hidden = dict(program.hidden)
            exports = Exports() if pending is None else pending.exports
            out, inner = run_inside(
                plan,
                dynamic,
                target(),
                flat[plan.n_in :],
                kwargs,
                track=used,
                standins=standins(program.plumbed, exports, hidden),
                recorder=missing,
                hidden=hidden,
            )
            if dropping and at_entry:
                check_module_updates(dropping, at_entry, out)
            outcomes = outcomes_of(
                plan, dynamic, inner, carry_required=False, where="a compiled call"
            )
            if not self.donate_state:
                # A carry only read comes out as None: the handler keeps its value
                # (not a fresh output equal to it, which a batched cond around the
                # call would select per element). A donated one must come out.
                outcomes = [
                    o._replace(carry=None) if passed_through(c, o.carry) else o
                    for (_, c), o in zip(dynamic, outcomes, strict=True)
                ]
            for slot, o in zip(plan.slots, outcomes, strict=True):
                check_no_ref_out(slot.effect, o.carry)  # JAX returns no ref
            outcomes = program.keep_placements(outcomes)
            looked = [key[0] for key in program.environment if key[0] in used]
            looked += [e for e in used if e not in program.keyed]
            looked += [e for e in missing if e not in used]
            function.learn(looked)
            discovering = pending is not None and pending.discover
            if not discovering and not program.keyed.issuperset(looked):
                raise Retrace  # this trace depends on more than its program's key
            return out, program.pack(outcomes)

        n = plan.n_in
        donate = plan.carry_positions if self.donate_state else ()
        return apply_transform(
            self.transform, wrapper, self.target(), lambda o: (o, None), n, donate=donate
        )

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
        index = {effect: i for i, effect in enumerate(wide.plan.effects)}
        if any(h.effect not in index for h in resolved.handlers):
            return None  # a handler the wide trace saw as a stand-in only
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
        # The input leaves of a handler left out may still be read by an equation
        # whose other outputs are kept (a while_loop carries every plumbed state
        # through, and JAX cannot prune a while_loop's carry): since nothing looked
        # the handler up, no kept output depends on their value, and zeros of their
        # type stand in for them (built from the traced types, so they are not
        # checked against them: a weak type is all they may lack).
        owner = wide.plan.leaf_owners(wide_exports)
        in_avals = list(jaxpr.in_avals)
        dummies = {
            i: zeros_like(in_avals[i])
            for i, u in enumerate(used[: len(owner)])
            if u and owner[i] not in chosen
        }

        def replay(flat: Sequence[Any], kwargs: dict[str, Any]) -> Any:
            n = program.plan.n_in
            args = [leaf for leaf in jax.tree.leaves((flat[n:], kwargs)) if _trace.is_tracer(leaf)]
            slot_leaves = iter(jax.tree.leaves(flat[:n]))
            leaves = [
                next(slot_leaves) if owner[i] in chosen else dummies.get(i)
                for i in range(len(owner))
            ]
            leaves += args
            if len(leaves) != len(in_avals) or any(
                u and i not in dummies and jax.typeof(leaf) != aval
                for i, (leaf, aval, u) in enumerate(zip(leaves, in_avals, used, strict=True))
            ):
                return None
            results = iter(evaluate(*(leaf for leaf, u in zip(leaves, used, strict=True) if u)))
            outs = [next(results) if i in keep else None for i in range(out_tree.num_leaves)]
            out, outputs = jax.tree.unflatten(out_tree, outs)
            outcomes = wide.outcomes(outputs)
            return out, program.pack([outcomes[i] for i in chosen])

        return replay


def _abstract(transform: Transform) -> tuple[Transform, bool]:
    """`transform` as a decorator, and whether its results are abstract.

    ``jax.eval_shape(fn, *args)`` is not a decorator: it is applied to the wrapper
    here, and its (abstract) outcomes are never absorbed.
    """
    transform = normalize_transform(transform)
    if transform is jax.eval_shape:
        return (lambda f: ft.partial(jax.eval_shape, f)), True
    return transform, False
