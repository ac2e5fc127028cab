"""`Tap`: named sites on intermediate values, and the handlers that switch them
off (`Ignorer`), record them (`Recorder`), replace them (`Replacer`) or take the
gradient with respect to them (`GradientRecorder`).

A handler that records keeps *entries*: each is one site's values from one place
in the program, stacked along leading axes (one per enclosing loop, taps in the
order a Python program would make them) and, where an `effax.cond` branch may
not have run, a mask of the taps that happened. Reading ``hs[acts]`` flattens a
site's entries into one stack (`Recorder.value`). Replacements and perturbations
are consumed in the same order, by a counter per site.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from . import _trace
from ._effect import Effect
from ._errors import EffectTypeError, EffectUsageError
from ._protocol import BatchPolicy, Export, Handler, Outcome, PyTree

__all__ = ["GradientRecorder", "Ignorer", "Recorder", "Replacer", "Tap", "TapHandler"]

T = TypeVar("T")


class Tap(Effect["TapHandler[T]"], Generic[T]):
    """A family of named sites on intermediate values: ``acts.tap(site, x)``
    returns `x`, or what the handler puts in its place.

    Handlers: `ignore` (taps off: a compiled function is the untapped program),
    `record` (``hs[acts]`` is ``{site: value}``), `replace` (interventions) and
    `gradients` (the gradient of an `effax.grad` result with respect to each site).

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> acts = effax.Tap[jnp.ndarray]("acts")
    >>> def f(x):
    ...     h = acts.tap("hidden", x * 2)
    ...     return acts.tap("out", h + 1)
    >>> with effax.handlers(acts.record("hid*")) as hs:
    ...     y = effax.jit(f)(jnp.float32(3))
    >>> float(y), {site: float(v) for site, v in hs[acts].items()}
    (7.0, {'hidden': 6.0})
    >>> with acts.replace({"hidden": jnp.float32(10)}):
    ...     float(effax.jit(f)(jnp.float32(3)))
    11.0

    """

    __slots__ = ()

    handler_hint = "{name}.ignore()"
    operations = ("tap",)

    def unhandled_hint(self) -> str:
        return (
            f" `{self.variable_name()}.ignore()` switches the taps off; "
            f"`{self.variable_name()}.record()` records them."
        )

    @_trace.api_boundary
    def tap(self, site: str, value: T) -> T:
        """`value`, or what the innermost handler puts in its place (a tap site named
        `site`)."""
        if not isinstance(site, str):
            raise EffectTypeError(
                f"{self!r}.tap(site, value) takes the site's name as a str (e.g. "
                f"'block3/mlp'), but got {type(site).__name__}: {site!r}."
            )
        return self.handler().tap(site, value)

    def ignore(self) -> Ignorer[T]:
        """Taps off: every site returns its value, and nothing crosses a compiled
        boundary (a compiled function is the program without the taps)."""
        return Ignorer(self)

    def record(self, *patterns: str) -> Recorder[T]:
        """Record the sites whose names match any of the `fnmatch` `patterns` (all
        sites if none are given): ``hs[acts]`` is ``{site: value}``, a site tapped
        several times (in a loop) stacked along a leading axis."""
        return Recorder(self, _patterns(self, patterns, "record"))

    def replace(
        self,
        replacements: Mapping[str, Any] | Callable[[str, T], T],
        *,
        where: Mapping[str, Any] | None = None,
    ) -> Replacer[T]:
        """Interventions: a mapping ``{site: value}`` (traced inputs: a new value
        never retraces; a value with one more leading axis than the site's gives the
        k-th tap of the site its k-th row), or a function ``fn(site, value) ->
        value`` (static, as ``jax.jit`` treats functions).

        `where` (with a mapping) gives some sites a boolean mask, broadcast against
        the site's replacement: a tap takes the replacement where the mask is true
        and keeps its own value elsewhere (activation patching of one layer in a
        loop over layers: ``where={"resid": jnp.arange(n_layers) == 3}``)."""
        if callable(replacements) and not isinstance(replacements, Mapping):
            if where is not None:
                raise EffectUsageError(
                    f"{self!r}.replace(fn, where=...): `where` masks the values of a "
                    "mapping; a function decides where to replace by itself."
                )
            return Replacer(self, fn=replacements)
        if not isinstance(replacements, Mapping):
            raise EffectTypeError(
                f"{self!r}.replace(...) takes a mapping {{site: value}} or a function "
                f"fn(site, value) -> value, but got {type(replacements).__name__}: "
                f"{replacements!r}."
            )
        sites = tuple(sorted(replacements))
        for site in sites:
            if not isinstance(site, str):
                raise EffectTypeError(
                    f"{self!r}.replace({{...}}) takes site names (str) as keys, but got "
                    f"{type(site).__name__}: {site!r}."
                )
        values = tuple(_as_array(self, site, replacements[site]) for site in sites)
        masks = tuple(_mask(self, site, (where or {}).get(site), v) for site, v in zip(sites, values, strict=True))
        unknown = set(where or {}) - set(sites)
        if unknown:
            raise EffectUsageError(
                f"{self!r}.replace(..., where=...) masks sites that are not replaced: "
                f"{sorted(unknown)}. Give each masked site a replacement."
            )
        return Replacer(self, sites=sites, values=values, masks=masks, counters=(0,) * len(sites))

    def gradients(self, *patterns: str) -> GradientRecorder[T]:
        """Under `effax.grad` / `effax.value_and_grad`: ``hs[acts]`` is, for each
        site matching the `fnmatch` `patterns` (all if none), the gradient of the
        result with respect to the site's value (the cotangent that flowed into it)."""
        return GradientRecorder(self, _patterns(self, patterns, "gradients"))


def _patterns(effect: Tap[Any], patterns: tuple[Any, ...], method: str) -> tuple[str, ...]:
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise EffectTypeError(
                f"{effect!r}.{method}(*patterns) takes fnmatch patterns of site names "
                f"(str, e.g. 'block*/mlp'), but got {type(pattern).__name__}: {pattern!r}."
            )
    return patterns


def _as_array(effect: Tap[Any], site: str, value: Any) -> Any:
    leaves = jax.tree.leaves(value)
    if len(leaves) != 1 or leaves[0] is not value:
        raise EffectTypeError(
            f"{effect!r}.replace({{{site!r}: ...}}) takes an array (or a Python number) "
            f"for each site, but got {type(value).__name__}: {value!r}."
        )
    if isinstance(value, (bool, int, float, complex)):
        return value
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise EffectTypeError(
            f"{effect!r}.replace({{{site!r}: ...}}) takes an array (or a Python number), "
            f"but got {type(value).__name__}: {value!r}."
        )
    return value


def _mask(effect: Tap[Any], site: str, mask: Any, value: Any) -> Any:
    """`mask` (for `site`'s replacement `value`) broadcast to `value`'s shape."""
    if mask is None:
        return None
    dtype = getattr(mask, "dtype", None)
    if not (isinstance(mask, bool) or (dtype is not None and jnp.issubdtype(dtype, jnp.bool_))):
        raise EffectTypeError(
            f"{effect!r}.replace(..., where={{{site!r}: ...}}) takes a boolean mask, but "
            f"got {type(mask).__name__}{'' if dtype is None else f' of dtype {dtype}'}."
        )
    try:
        return jnp.broadcast_to(mask, np.shape(value))
    except ValueError:
        raise EffectTypeError(
            f"{effect!r}.replace(..., where={{{site!r}: ...}}): the mask's shape "
            f"{np.shape(mask)} does not broadcast to its replacement's {np.shape(value)}."
        ) from None


def _matches(patterns: tuple[str, ...], site: str) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(site, p) for p in patterns)


class TapHandler(Handler[Tap[T]]):
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


class Ignorer(TapHandler[T]):
    """The handler of a :class:`Tap` that switches its sites off (`Tap.ignore`)."""

    __slots__ = ()

    def tap(self, site: str, value: T) -> T:
        return value

    @property
    def value(self) -> dict[str, Any]:
        return {}

    def export(self) -> Export:
        return Export()

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Ignorer[Any]:
        return cls(effect)

    def outcome(self, *, carry_required: bool) -> Outcome:
        return Outcome()

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        pass


class Entry(NamedTuple):
    """One site's values from one place in the program: `value` has shape
    ``lead + shape`` (`lead`: one axis per enclosing loop, taps in program order);
    `present` (shape ``lead``, or more axes under a batch) marks the taps that
    happened (None: all of them; False where an `effax.cond` branch did not run)."""

    site: str
    lead: tuple[int, ...]
    shape: tuple[int, ...]
    value: Any
    present: Any


def _count(lead: tuple[int, ...]) -> int:
    return math.prod(lead)


def _flat(entry: Entry) -> tuple[Any, Any]:
    """`entry`'s taps along one axis, and their mask (None: all present)."""
    n = _count(entry.lead)
    value = jnp.reshape(entry.value, (n, *entry.shape))
    present = None if entry.present is None else jnp.reshape(entry.present, (n, -1))
    return value, present


class Recorder(TapHandler[T]):
    """The handler of a :class:`Tap` that records the matching sites (`Tap.record`).

    `value` (what ``hs[acts]`` returns) is ``{site: value}``: the value of a site
    tapped once, or every tap of a site tapped several times (in a Python loop, an
    `effax.scan`, ...) stacked along a new leading axis in the order the taps were
    made. Taps in an `effax.cond` branch that did not run are not recorded, as with
    a Python ``if``. Under `effax.vmap`, each tap's value carries the batch axis.
    """

    __slots__ = ("entries", "patterns")

    def __init__(self, effect: Tap[T], patterns: tuple[str, ...] = ()) -> None:
        super().__init__(effect)
        self.patterns = patterns
        self.entries: list[Entry] = []

    def __repr__(self) -> str:
        return f"{self.effect!r}.record({', '.join(map(repr, self.patterns))})"

    def tap(self, site: str, value: T) -> T:
        if _matches(self.patterns, site):
            self.effect.check_store(self, value)
            self.entries.append(Entry(site, (), tuple(np.shape(value)), value, None))
        return value

    def clear(self) -> None:
        """Forget what was recorded so far (e.g. after logging it)."""
        self.entries.clear()

    @property
    def value(self) -> dict[str, Any]:
        return _read(self.effect, self.entries)

    # --- the plumbing protocol: entries leave as values, their layout as static

    def export(self) -> Export:
        return Export(static=self.patterns)

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Recorder[Any]:
        return cls(effect, static)

    def outcome(self, *, carry_required: bool) -> Outcome:
        return _entries_outcome(self.entries)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        if outcome.static is not None:  # (None: a while_loop, where nothing is recorded)
            self.entries.extend(_absorbed(outcome.static, outcome.values))

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        if outcome.static is not None:
            self.entries.extend(_batch_absorbed(outcome.static, outcome.values))

    def align_branch(self, outcome: Outcome, statics: Sequence[Hashable]) -> Outcome:
        return _aligned(outcome, statics)[0]


def _entries_outcome(entries: Sequence[Entry]) -> Outcome:
    static = tuple(
        (e.site, e.lead, e.shape, str(jnp.result_type(e.value)), e.present is not None)
        for e in entries
    )
    values = tuple((e.value, e.present) if e.present is not None else e.value for e in entries)
    return Outcome(static=static, values=values)


def _unpack(static: Any, values: Any) -> list[Entry]:
    if values is None:  # (an outcome with no entries may come back without values)
        values = ()
    out = []
    for (site, lead, shape, _, masked), value in zip(static, values, strict=True):
        value, present = value if masked else (value, None)
        out.append(Entry(site, lead, shape, value, present))
    return out


def _absorbed(static: Any, values: Any) -> list[Entry]:
    """The entries an outcome sends out, as seen outside its region: a loop's
    steps stacked each entry along new leading axes; a site's entries of one step
    are joined so that its taps stay in program order."""
    entries = _unpack(static, values)
    if not entries:
        return []
    first = entries[0]
    extra = tuple(np.shape(first.value))[: np.ndim(first.value) - len(first.lead) - len(first.shape)]
    if not extra:
        return entries
    by_site: dict[str, list[Entry]] = {}
    for entry in entries:
        by_site.setdefault(entry.site, []).append(entry)
    joined = []
    k = len(extra)
    for site, group in by_site.items():
        shape = group[0].shape
        values, presents = [], []
        for e in group:
            if e.shape != shape:
                raise _shape_error(site, shape, e.shape)
            n = _count(e.lead)
            values.append(jnp.reshape(e.value, (*extra, n, *shape)))
            presents.append(
                jnp.ones((*extra, n), bool)
                if e.present is None
                else jnp.reshape(e.present, (*extra, n, -1))[..., 0]
                if np.ndim(e.present) > k + len(e.lead)
                else jnp.reshape(e.present, (*extra, n))
            )
        masked = any(e.present is not None for e in group)
        value = values[0] if len(values) == 1 else jnp.concatenate(values, axis=k)
        present = None
        if masked:
            present = presents[0] if len(presents) == 1 else jnp.concatenate(presents, axis=k)
        joined.append(Entry(site, (*extra, value.shape[k]), shape, value, present))
    return joined


def _batch_absorbed(static: Any, values: Any) -> list[Entry]:
    """The entries of a batched region (values stacked per element along axis 0):
    the batch axis becomes part of each tap's value."""
    out = []
    for e in _unpack(static, values):
        value = jnp.moveaxis(e.value, 0, len(e.lead))
        present = None if e.present is None else jnp.moveaxis(e.present, 0, -1)
        out.append(Entry(e.site, e.lead, (value.shape[len(e.lead)], *e.shape), value, present))
    return out


def _aligned(outcome: Outcome, statics: Sequence[Hashable]) -> tuple[Outcome, dict[str, int]]:
    """In one branch of an `effax.cond` whose branches record different sites:
    this branch's entries laid out as every branch's are, one masked entry per site
    with as many taps as the branch that taps it most (the others padded with
    zeros, marked absent). Also returns how many padding taps each site got."""
    layout: dict[str, tuple[int, tuple[int, ...], str]] = {}
    for static in statics:
        if not isinstance(static, tuple):
            continue
        counts: dict[str, int] = {}
        for site, lead, shape, dtype, _ in static:
            counts[site] = counts.get(site, 0) + _count(lead)
            known = layout.get(site)
            if known is not None and known[1] != shape:
                raise _shape_error(site, known[1], shape)
            layout[site] = (known[0] if known else 0, shape, dtype)
        for site, n in counts.items():
            total, shape, dtype = layout[site]
            layout[site] = (max(total, n), shape, dtype)
    mine = _unpack(outcome.static, outcome.values)
    entries, pads = [], {}
    for site in sorted(layout):
        total, shape, dtype = layout[site]
        own = [e for e in mine if e.site == site]
        values, presents = [], []
        for e in own:
            value, present = _flat(e)
            values.append(value)
            presents.append(jnp.ones(value.shape[:1], bool) if present is None else present[:, 0])
        n = sum(_count(e.lead) for e in own)
        pads[site] = total - n
        if n < total:
            values.append(jnp.zeros((total - n, *shape), dtype))
            presents.append(jnp.zeros((total - n,), bool))
        value = values[0] if len(values) == 1 else jnp.concatenate(values)
        present = presents[0] if len(presents) == 1 else jnp.concatenate(presents)
        entries.append(Entry(site, (total,), shape, value, present))
    aligned = _entries_outcome(entries)
    return Outcome(static=aligned.static, carry=outcome.carry, values=aligned.values), pads


def _shape_error(site: str, a: tuple[int, ...], b: tuple[int, ...]) -> EffectUsageError:
    return EffectUsageError(
        f"Tap site {site!r} was tapped with values of shape {a} and {b}; the taps of one "
        "site are stacked, so they must have one shape. Give the differently shaped "
        "values sites of their own."
    )


def _read(effect: Tap[Any], entries: Sequence[Entry]) -> dict[str, Any]:
    """``{site: value}`` of recorded entries (see `Recorder`)."""
    by_site: dict[str, list[Entry]] = {}
    for entry in entries:
        by_site.setdefault(entry.site, []).append(entry)
    out: dict[str, Any] = {}
    for site, group in by_site.items():
        shape = group[0].shape
        if any(e.shape != shape for e in group):
            raise _shape_error(site, shape, next(e.shape for e in group if e.shape != shape))
        if len(group) == 1 and not group[0].lead and group[0].present is None:
            out[site] = group[0].value
            continue
        values, keep = [], []
        for e in group:
            value, present = _flat(e)
            values.append(value)
            if present is None:
                keep.append(np.ones(value.shape[0], bool))
                continue
            if isinstance(present, jax.core.Tracer):
                raise EffectUsageError(
                    f"The taps of {site!r} ({effect!r}) in an effax.cond are known only "
                    "when the compiled call has run: read the recording outside the "
                    "traced function that installed the handler."
                )
            present = np.asarray(present)
            taken = present.all(axis=1)
            if (taken != present.any(axis=1)).any():
                raise EffectUsageError(
                    f"Tap site {site!r} ({effect!r}) was tapped in an effax.cond branch "
                    "that ran for some elements of an effax.vmap batch and not for others, "
                    "so its recording is not one array per tap. Tap it outside the cond, "
                    "or record it unbatched."
                )
            keep.append(taken)
        mask = np.concatenate(keep)
        stacked = values[0] if len(values) == 1 else jnp.concatenate(values)
        if not mask.all():
            stacked = stacked[np.flatnonzero(mask)]
        if stacked.shape[0] == 1:
            out[site] = stacked[0]
        elif stacked.shape[0] > 1:
            out[site] = stacked
    return out


def _take(effect: Tap[Any], site: str, value: Any, rows: Any, k: Any, what: str) -> tuple[Any, int | None]:
    """The part of `rows` (a replacement or perturbation of `site`) that tap number
    `k` of the site gets, and how many rows `rows` has (None: one value for every
    tap). `k` is a Python int while it is known, an int32 tracer in compiled loops
    (where a past-the-end index is refused after the call, see `_check_counts`)."""
    shape = tuple(np.shape(value))
    rshape = tuple(np.shape(rows))
    if rshape == shape:
        return rows, None
    if len(rshape) > len(shape) and rshape[len(rshape) - len(shape) :] == shape:
        table = jnp.reshape(rows, (-1, *shape))
        n = table.shape[0]
        if isinstance(k, (int, np.integer)):
            _check_count(effect, site, int(k) + 1, n, what)
            return table[k], n
        return jax.lax.dynamic_index_in_dim(table, k, 0, keepdims=False), n
    raise EffectTypeError(
        f"Tap site {site!r} ({effect!r}) has a value of shape {shape}, but its "
        f"{what} has shape {rshape}: give a value of shape {shape}, or one row per "
        f"tap (shape (taps, *{shape}))."
    )


def _check_count(effect: Tap[Any], site: str, taps: int, rows: int, what: str) -> None:
    if taps > rows:
        raise EffectUsageError(
            f"Tap site {site!r} ({effect!r}) was tapped {taps} times, but its {what} holds "
            f"{rows} rows (one per tap). Give one row per tap, or a value of the site's "
            "own shape for every tap."
        )


def _check_counts(
    effect: Tap[Any], sites: Sequence[str], counters: Sequence[Any], rows: Any, what: str
) -> None:
    """After a compiled region: refuse a site tapped more times than its rows (a
    compiled index past the end would have taken the last row)."""
    if not isinstance(rows, tuple):
        return
    for site, k, n in zip(sites, counters, rows, strict=True):
        if n is not None and not isinstance(k, jax.core.Tracer):
            _check_count(effect, site, int(k), n, what)


class Replacer(TapHandler[T]):
    """The handler of a :class:`Tap` that replaces sites' values (`Tap.replace`).

    With a mapping, the replacements are traced inputs of a compiled call (a new
    value never retraces) and each site counts its taps: a replacement shaped like
    the site's value replaces every tap; one with an extra leading axis gives tap
    k its row k (what `Tap.record` records for a site tapped in a loop). With a
    function ``fn(site, value)``, it is static (its identity is in the cache key).
    """

    __slots__ = ("counters", "fn", "masks", "rows", "sites", "values")

    def __init__(
        self,
        effect: Tap[T],
        *,
        fn: Callable[[str, T], T] | None = None,
        sites: tuple[str, ...] = (),
        values: tuple[Any, ...] = (),
        masks: tuple[Any, ...] = (),
        counters: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(effect)
        self.fn = fn
        self.sites = sites
        self.values = values
        self.masks = masks or (None,) * len(sites)
        # per site: how many times it was tapped; how many rows its replacement has
        # (None: one value for every tap, or not tapped yet)
        self.counters = list(counters)
        self.rows: list[int | None] = [None] * len(sites)

    def __repr__(self) -> str:
        what = self.fn if self.fn is not None else "{" + ", ".join(map(repr, self.sites)) + "}"
        return f"{self.effect!r}.replace({what})"

    def tap(self, site: str, value: T) -> T:
        if self.fn is not None:
            out = self.fn(site, value)
            _check_alike(self.effect, site, value, out, "replace(fn) returned a value")
            return out
        try:
            i = self.sites.index(site)
        except ValueError:
            return value
        k = self.counters[i]
        out, self.rows[i] = _take(self.effect, site, value, self.values[i], k, "replacement")
        if isinstance(out, (bool, int, float, complex)):
            out = jnp.asarray(out, jnp.result_type(value))
        _check_alike(self.effect, site, value, out, "its replacement is")
        if self.masks[i] is not None:
            mask, _ = _take(self.effect, site, value, self.masks[i], k, "replacement")
            out = jnp.where(mask, out, value)
        self.counters[i] = k + 1
        return out  # type: ignore[no-any-return]

    @property
    def value(self) -> dict[str, Any]:
        """How many times each replaced site was tapped."""
        return dict(zip(self.sites, self.counters, strict=True))

    def export(self) -> Export:
        if self.fn is not None:
            return Export(static=("fn", self.fn))
        const = (self.values, self.masks)
        return Export(static=("map", self.sites), const=const, carry=tuple(self.counters))

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Replacer[Any]:
        if static[0] == "fn":
            return cls(effect, fn=static[1])
        values, masks = const
        return cls(
            effect, sites=static[1], values=tuple(values), masks=tuple(masks), counters=tuple(carry)
        )

    def outcome(self, *, carry_required: bool) -> Outcome:
        if self.fn is not None or not self.sites:
            return Outcome()
        carry = tuple(jnp.asarray(k, jnp.int32) for k in self.counters)
        return Outcome(static=tuple(self.rows), carry=carry)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        if outcome.carry is None:
            return
        counters = [k if isinstance(k, jax.core.Tracer) else int(k) for k in outcome.carry]
        _check_counts(self.effect, self.sites, counters, outcome.static, "replacement")
        self.counters = counters
        if isinstance(outcome.static, tuple):
            self.rows = [r if r is not None else n for r, n in zip(outcome.static, self.rows, strict=True)]


def _check_alike(effect: Tap[Any], site: str, value: Any, out: Any, what: str) -> None:
    a = (tuple(np.shape(value)), jnp.result_type(value))
    b = (tuple(np.shape(out)), jnp.result_type(out))
    if a != b:
        raise EffectTypeError(
            f"Tap site {site!r} ({effect!r}) has a value of shape {a[0]} and dtype {a[1]}, "
            f"but {what} of shape {b[0]} and dtype {b[1]}: a tap returns a value like the "
            "one it was given (cast it with .astype, or reshape it)."
        )


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
    __slots__ = ("carried", "counters", "eps", "mode", "rows", "sites")

    def __init__(
        self,
        effect: Tap[T],
        patterns: tuple[str, ...] = (),
        mode: str = "collect",
        sites: tuple[str, ...] = (),
        eps: tuple[Any, ...] = (),
        counters: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(effect, patterns)
        self.mode = mode
        self.sites = sites
        self.eps = eps
        self.counters = list(counters)
        self.rows: list[int | None] = [None] * len(sites)
        # whether its counters crossed into the region it is in (they come back out)
        self.carried = mode == "perturb"

    def __repr__(self) -> str:
        return f"{self.effect!r}.gradients({', '.join(map(repr, self.patterns))})"

    def tap(self, site: str, value: T) -> T:
        if self.mode == "collect" or not _matches(self.patterns, site):
            return value
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
        i = self.sites.index(site)
        k = self.counters[i]
        eps, self.rows[i] = _take(self.effect, site, value, self.eps[i], k, "perturbation")
        self.counters[i] = k + 1
        self.entries.append(Entry(site, (), (), jnp.ones((), bool), None))
        return value + eps  # type: ignore[no-any-return, operator]

    # --- effax.grad's hooks (see `Handler.differentiates`)

    def differentiates(self) -> bool:
        return self.mode == "collect"

    def begin_probe(self) -> None:
        self.mode = "probe"

    def perturbations(self) -> tuple[Hashable, tuple[jax.ShapeDtypeStruct, ...]]:
        totals: dict[str, list[Any]] = {}
        for e in self.entries:
            n, shape, dtype = totals.get(e.site, (0, e.shape, jnp.result_type(e.value)))
            if shape != e.shape:
                raise _shape_error(e.site, shape, e.shape)
            totals[e.site] = [n + _count(e.lead), shape, dtype]
        structs = (jax.ShapeDtypeStruct((n, *shape), dtype) for n, shape, dtype in totals.values())
        return tuple(totals), tuple(structs)

    def perturb(self, eps: tuple[Any, ...], sites: Hashable) -> None:
        assert isinstance(sites, tuple)
        self.mode, self.sites, self.eps = "perturb", sites, eps
        self.counters = [0] * len(sites)
        self.rows = [None] * len(sites)
        self.entries = []

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
        for e in _unpack(outcome.static[0], outcome.values):
            i = sites.index(e.site)
            n, at = _count(e.lead), position[e.site]
            rows = cotangents[i]
            value = jnp.reshape(rows[at : at + n], (*e.lead, *rows.shape[1:]))
            position[e.site] = at + n
            entries.append(Entry(e.site, e.lead, tuple(rows.shape[1:]), value, e.present))
        return _entries_outcome(entries)

    # --- the plumbing protocol

    def export(self) -> Export:
        if self.mode == "perturb":
            static = ("perturb", self.patterns, self.sites)
            return Export(static=static, const=self.eps, carry=tuple(self.counters))
        return Export(static=(self.mode, self.patterns))

    @classmethod
    def rebuild(
        cls, effect: Any, static: Any, const: PyTree, carry: PyTree
    ) -> GradientRecorder[Any]:
        if static[0] == "perturb":
            return cls(effect, static[1], "perturb", static[2], tuple(const), tuple(carry))
        return cls(effect, static[1], static[0])

    def outcome(self, *, carry_required: bool) -> Outcome:
        out = _entries_outcome(self.entries)
        if self.mode != "perturb":
            return out
        carry = None
        if self.carried:
            carry = tuple(jnp.asarray(k, jnp.int32) for k in self.counters)
        return Outcome(static=(out.static, tuple(self.rows)), carry=carry, values=out.values)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        static = outcome.static
        if self.mode == "perturb":
            static, rows = static if static is not None else (None, None)
            if outcome.carry is not None:  # (None: passed through, no site tapped)
                counters = [
                    k if isinstance(k, jax.core.Tracer) else int(k) for k in outcome.carry
                ]
                _check_counts(self.effect, self.sites, counters, rows, "perturbation")
                self.counters = counters
            if isinstance(rows, tuple):
                self.rows = [r if r is not None else n for r, n in zip(rows, self.rows, strict=True)]
        if static is not None:
            self.entries.extend(_absorbed(static, outcome.values))

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        if self.mode in ("perturb", "probe"):
            mode = "probe" if self.mode == "probe" else "batched"
            return Export(static=(mode, self.patterns)), None
        return self.export(), None

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        if outcome.static is not None and outcome.carry is None:
            self.entries.extend(_batch_absorbed(outcome.static, outcome.values))

    def align_branch(self, outcome: Outcome, statics: Sequence[Hashable]) -> Outcome:
        if self.mode != "perturb":
            return super().align_branch(outcome, statics)
        flags = Outcome(static=outcome.static[0], values=outcome.values)
        known = [s for s in statics if isinstance(s, tuple)]
        aligned, pads = _aligned(flags, [s[0] for s in known])
        carry = tuple(
            k + pads.get(site, 0) for site, k in zip(self.sites, outcome.carry, strict=True)
        )
        # rows of each site's perturbation, from a branch that tapped it
        rows = tuple(
            next((s[1][i] for s in known if s[1][i] is not None), None)
            for i in range(len(self.sites))
        )
        return Outcome(static=(aligned.static, rows), carry=carry, values=aligned.values)
