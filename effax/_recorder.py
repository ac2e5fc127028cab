"""The handlers of a `Tap` that record: `Recorder` (the values at the sites) and
`GradientRecorder` (the gradient of an `effax.grad` result with respect to
them), on `TapHandler`, the base class of a tap's handlers. How recorded values
are laid out is `_entries`."""

from __future__ import annotations

import fnmatch
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from . import _context, _entries, _trace
from ._effect import installed_at
from ._entries import Entry
from ._errors import EffectTypeError, EffectUsageError
from ._protocol import BatchPolicy, Export, Fields, Handler, Outcome, PyTree

if TYPE_CHECKING:
    from ._tap import Tap

__all__ = ["GradientRecorder", "Recorder", "TapHandler", "matches"]

T = TypeVar("T")


def matches(patterns: tuple[str, ...], site: str) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(site, p) for p in patterns)


class TapHandler(Handler["Tap[T]"], Generic[T]):
    """Base class of the handlers of a :class:`Tap`: `tap` answers the operation."""

    __slots__ = ("effect",)

    def __init__(self, effect: Tap[T]) -> None:
        self.effect = effect

    def tap(self, site: str, value: T) -> T:
        """The operation of `Tap`: what site `site` returns for `value`."""
        raise NotImplementedError

    def snapshot(self) -> PyTree:
        return None  # nothing to resume: what was recorded is not training state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.effect!r})"


class Recorder(TapHandler[T]):
    """The handler of a :class:`Tap` that records the matching sites (`Tap.record`).

    `value` (what ``hs[acts]`` returns) is ``{site: value}``: the value of a site
    tapped once, or every tap of a site tapped several times (in a Python loop, an
    `effax.scan`, ...) stacked along a new leading axis in the order the taps were
    made. Taps in an `effax.cond` branch that did not run are not recorded, as with
    a Python ``if``. Under `effax.vmap`, each tap's value carries the batch axis.
    """

    __slots__ = ("_recorded", "patterns")
    # the static export is its patterns; the warm path of a compiled call reads it
    fields = Fields(static="patterns")

    def __init__(self, effect: Tap[T], patterns: tuple[str, ...] = ()) -> None:
        super().__init__(effect)
        self.patterns = patterns
        # Entries, and what compiled calls sent out as they sent it: (static,
        # values, batched), laid out as entries when next read (`entries`), so that
        # a warm call only appends.
        self._recorded: list[Any] = []

    @property
    def entries(self) -> list[Entry]:
        """What was recorded, as entries (see `effax._entries`)."""
        recorded = self._recorded
        if any(type(r) is tuple for r in recorded):
            settled: list[Entry] = []
            for r in recorded:
                if type(r) is not tuple:
                    settled.append(r)
                elif r[2]:
                    settled.extend(_entries.batch_absorbed(r[0], r[1]))
                else:
                    settled.extend(_entries.absorbed(r[0], r[1]))
            recorded[:] = settled
        return recorded

    def __repr__(self) -> str:
        return f"{self.effect!r}.record({', '.join(map(repr, self.patterns))})"

    def tap(self, site: str, value: Any) -> Any:
        if matches(self.patterns, site):
            _entries.check_array(self.effect, site, value, "record() records")
            self.effect.check_store(self, value, "tap")
            self._recorded.append(Entry(site, (), tuple(np.shape(value)), value, None))
        return value

    def clear(self) -> None:
        """Forget what was recorded so far (e.g. after logging it)."""
        self._recorded.clear()

    @property
    def value(self) -> dict[str, Any]:
        return _entries.read(self.effect, self.entries)

    # --- the plumbing protocol: entries leave as values, their layout as static

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Recorder[Any]:
        return cls(effect, static)

    def outcome(self, *, carry_required: bool) -> Outcome:
        static, values = _entries.entries_outcome(self.entries)
        return Outcome(static=static, values=values)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        # (no static: a while_loop, which records nothing; no values: a loop of
        # no steps, which recorded nothing)
        if outcome.static and outcome.values is not None:
            self._recorded.append((outcome.static, outcome.values, False))

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        if outcome.static and outcome.values is not None:
            self._recorded.append((outcome.static, outcome.values, True))

    # --- in loops and branches (`_control.Records`): taps stack in the order they
    # were made, and a cond's branches record the sites of every branch, masked

    def align_branch(self, outcome: Outcome, statics: Sequence[Hashable]) -> Outcome:
        static, values, _ = _entries.aligned(outcome.static, outcome.values, statics)
        return Outcome(static=static, carry=outcome.carry, values=values)


class GradientRecorder(Recorder[T]):
    """The handler of a :class:`Tap` that records, under `effax.grad` and
    `effax.value_and_grad`, the gradient of the result with respect to each
    matching site's value (`Tap.gradients`).

    `value` is ``{site: gradient}``, laid out as `Recorder` lays out values. Taps
    outside a differentiated call return their value and record nothing. Inside
    one, each matching tap adds a zero perturbation that the call differentiates
    (``x + eps``, ``eps`` an input of the differentiated function): the gradient
    with respect to ``eps`` is the cotangent that flowed into the site. The
    outermost `effax.grad` around the taps owns them.
    """

    # `mode`: "collect" (outside a differentiated call: taps pass through, the
    # entries are gradients), "probe" (a first, abstract run inside one: the
    # entries are the tapped values, to size the perturbations), "perturb" (the
    # differentiated run: taps add `eps`, the entries are flags marking the taps
    # that happened), "batched" (inside a batched region inside the call: refused).
    __slots__ = ("carried", "counters", "eps", "mode", "raw", "rows", "sites")

    def __init__(
        self,
        effect: Tap[T],
        patterns: tuple[str, ...] = (),
        mode: str = "collect",
        sites: tuple[str, ...] = (),
        eps: tuple[Any, ...] = (),
        counters: tuple[Any, ...] = (),
        raw: bool = False,
    ) -> None:
        super().__init__(effect, patterns)
        self.mode = mode
        # (collect mode) whether a raw jax.grad lies between it and the handler it
        # was rebuilt from: a matching tap here is one it cannot differentiate
        self.raw = raw
        self.sites = sites
        self.eps = eps
        self.counters = list(counters)
        self.rows: list[int | None] = [None] * len(sites)
        # whether its counters crossed into the region it is in (they come back out)
        self.carried = mode == "perturb"

    def __repr__(self) -> str:
        return f"{self.effect!r}.gradients({', '.join(map(repr, self.patterns))})"

    def tap(self, site: str, value: Any) -> Any:
        if not matches(self.patterns, site):
            return value
        if self.mode == "collect":
            if self.raw or self._differentiated(value):
                raise EffectUsageError(
                    f"Tap site {site!r} ({self.effect!r}) was tapped under a JAX "
                    "transformation inside its gradients() handler (e.g. a raw jax.grad), "
                    "whose gradients it cannot see. Differentiate with effax.grad or "
                    "effax.value_and_grad, which give it the gradient at each site."
                )
            return value
        _entries.check_array(self.effect, site, value, "gradients() differentiates")
        if not jnp.issubdtype(jnp.result_type(value), jnp.inexact):
            raise EffectTypeError(
                f"Tap site {site!r} ({self.effect!r}) has a value of dtype "
                f"{jnp.result_type(value)}, which has no gradient: narrow "
                f"{self.effect.variable_name()}.gradients(...)'s patterns to float sites."
            )
        if self.mode == "probe":
            self.entries.append(Entry(site, (), tuple(np.shape(value)), value, None))
            return value
        if self.mode == "batched":
            raise EffectUsageError(
                f"Tap site {site!r} ({self.effect!r}) was tapped inside effax.vmap (or "
                "effax.shard_map) inside the effax.grad whose gradients "
                f"{self.effect.variable_name()}.gradients() records. Take the gradient "
                "per element instead: effax.vmap(effax.grad(f)) gives each element's."
            )
        if site not in self.sites:
            # the abstract run recorded no tap of it: it is tapped only where no step
            # runs (a loop of no steps) and records nothing, as the Python loop would
            return value
        i = self.sites.index(site)
        k = self.counters[i]
        eps, self.rows[i] = _entries.take(self.effect, site, value, self.eps[i], k, "perturbation")
        self.counters[i] = k + 1
        self.entries.append(Entry(site, (), (), jnp.ones((), bool), None))
        return value + eps

    def _differentiated(self, value: Any = None) -> bool:
        """Whether a JAX transformation inside the handler (a raw ``jax.grad``)
        traces this point (`value`, a tap's, holds its tracers; without one, a
        differentiating trace lies between)."""
        ref = installed_at(self.effect, self)
        if ref is None or ref is _trace.current_trace_ref():
            return False
        home = _context.home_trace(ref)
        if value is None:
            return _trace.transformed_between(home, "differentiating")
        return _trace.foreign_tracers(jax.tree.leaves(value), home)

    # --- effax.grad's hooks (`_grad.Differentiating`)

    def differentiates(self) -> bool:
        return self.mode == "collect"

    def begin_probe(self) -> None:
        self.mode = "probe"

    def perturbations(self) -> tuple[Hashable, tuple[jax.ShapeDtypeStruct, ...]]:
        totals: dict[str, list[Any]] = {}
        for e in self.entries:
            n, shape, dtype = totals.get(e.site, (0, e.shape, jnp.result_type(e.value)))
            if shape != e.shape:
                raise _entries.shape_error(e.site, shape, e.shape)
            totals[e.site] = [n + _entries.count(e.lead), shape, dtype]
        struct: Any = jax.ShapeDtypeStruct
        structs = (struct((n, *shape), dtype) for n, shape, dtype in totals.values())
        return tuple(totals), tuple(structs)

    def perturb(self, eps: tuple[Any, ...], sites: Hashable) -> None:
        assert isinstance(sites, tuple)
        self.mode, self.sites, self.eps = "perturb", sites, eps
        self.counters = [0] * len(sites)
        self.rows = [None] * len(sites)
        self._recorded = []

    def with_cotangents(
        self, outcome: Outcome, sites: Hashable, cotangents: tuple[Any, ...]
    ) -> Outcome:
        """The outcome of the differentiated call, as this handler (outside it)
        absorbs it: the flags its inner handler sent out (which taps of `sites`
        happened, in order) laid over the gradients with respect to their
        perturbations."""
        assert isinstance(sites, tuple)
        position = dict.fromkeys(sites, 0)
        entries = []
        layout: Any = outcome.static
        for e in _entries.unpack(layout[0], outcome.values):
            i = sites.index(e.site)
            n, at = _entries.count(e.lead), position[e.site]
            rows = cotangents[i]
            value = jnp.reshape(rows[at : at + n], (*e.lead, *rows.shape[1:]))
            position[e.site] = at + n
            entries.append(Entry(e.site, e.lead, tuple(rows.shape[1:]), value, e.present))
        static, values = _entries.entries_outcome(entries)
        return Outcome(static=static, values=values)

    # --- the plumbing protocol

    def export(self) -> Export:
        if self.mode == "perturb":
            static = ("perturb", self.patterns, self.sites)
            return Export(static=static, const=self.eps, carry=tuple(self.counters))
        if self.mode == "collect":
            raw = self.raw or self._differentiated()
            return Export(static=(self.mode, self.patterns, raw))
        return Export(static=(self.mode, self.patterns))

    @classmethod
    def rebuild(
        cls, effect: Any, static: Any, const: PyTree, carry: PyTree
    ) -> GradientRecorder[Any]:
        if static[0] == "perturb":
            return cls(effect, static[1], "perturb", static[2], tuple(const), tuple(carry))
        return cls(effect, static[1], static[0], raw=static[0] == "collect" and static[2])

    def outcome(self, *, carry_required: bool) -> Outcome:
        static, values = _entries.entries_outcome(self.entries)
        if self.mode != "perturb":
            return Outcome(static=static, values=values)
        carry = None
        if self.carried:
            carry = tuple(jnp.asarray(k, jnp.int32) for k in self.counters)
        return Outcome(static=(static, tuple(self.rows)), carry=carry, values=values)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        static: Any = outcome.static
        rows: Any
        if self.mode == "perturb":
            static, rows = static if static is not None else (None, None)
            if outcome.carry is not None:  # (None: passed through, no site tapped)
                self.counters = [k if _trace.is_tracer(k) else int(k) for k in outcome.carry]
            if isinstance(rows, tuple):
                self.rows = [
                    r if r is not None else n for r, n in zip(rows, self.rows, strict=True)
                ]
        if static and outcome.values is not None:
            self.entries.extend(_entries.absorbed(static, outcome.values))

    def check_absorb(self, outcome: Outcome) -> None:
        static: Any = outcome.static
        if self.mode == "perturb" and outcome.carry is not None and static is not None:
            _entries.check_counts(self.effect, self.sites, outcome.carry, static[1], "perturbation")

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        if self.mode in ("perturb", "probe"):
            mode = "probe" if self.mode == "probe" else "batched"
            return Export(static=(mode, self.patterns)), None
        return self.export(), None

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        if outcome.static and outcome.values is not None and outcome.carry is None:
            self.entries.extend(_entries.batch_absorbed(outcome.static, outcome.values))

    def align_branch(self, outcome: Outcome, statics: Sequence[Hashable]) -> Outcome:
        if self.mode != "perturb":
            return super().align_branch(outcome, statics)
        known = [s for s in statics if isinstance(s, tuple)]
        mine: Any = outcome.static
        static, values, pads = _entries.aligned(mine[0], outcome.values, [s[0] for s in known])
        carry = tuple(
            k + pads.get(site, 0) for site, k in zip(self.sites, outcome.carry, strict=True)
        )
        # rows of each site's perturbation, from a branch that tapped it
        rows = tuple(
            next((s[1][i] for s in known if s[1][i] is not None), None)
            for i in range(len(self.sites))
        )
        return Outcome(static=(static, rows), carry=carry, values=values)
