"""`Tap`: named sites on intermediate values, and the handlers that switch them
off (`Ignorer`), record them (`Recorder`), replace them (`Replacer`) or take the
gradient with respect to them (`GradientRecorder`); how recorded values are laid
out is `_entries`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from . import _entries, _trace
from ._arguments import check_unleaked
from ._context import run_at
from ._effect import Effect
from ._errors import EffectTypeError, EffectUsageError
from ._protocol import Export, Fields, Outcome, PyTree
from ._recorder import GradientRecorder, Recorder, TapHandler

__all__ = ["Ignorer", "Replacer", "Tap"]

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
        handler = self.handler()
        return run_at(self, handler, handler.tap, site, value)

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
        # a Python number replaces a site of its kind, cast to the site's dtype
        kinds = tuple(type(v).__name__ if type(v) in _NUMBER_KINDS else None for v in values)
        masks = tuple(
            _mask(self, site, (where or {}).get(site), v)
            for site, v in zip(sites, values, strict=True)
        )
        unknown = set(where or {}) - set(sites)
        if unknown:
            raise EffectUsageError(
                f"{self!r}.replace(..., where=...) masks sites that are not replaced: "
                f"{sorted(unknown)}. Give each masked site a replacement."
            )
        check_unleaked((values, masks), "its values or where=", f"{self!r}.replace(...)")
        return Replacer(
            self, sites=sites, values=values, masks=masks, kinds=kinds, counters=(0,) * len(sites)
        )

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


# Which site dtypes a Python number of each kind may replace (cast to the dtype).
_NUMBER_KINDS: dict[type, Callable[[Any], bool]] = {
    bool: lambda dtype: dtype == jnp.bool_,
    int: lambda dtype: jnp.issubdtype(dtype, jnp.number),
    float: lambda dtype: jnp.issubdtype(dtype, jnp.inexact),
    complex: lambda dtype: jnp.issubdtype(dtype, jnp.complexfloating),
}
_KIND_OF = {kind.__name__: accepts for kind, accepts in _NUMBER_KINDS.items()}


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


class Ignorer(TapHandler[T]):
    """The handler of a :class:`Tap` that switches its sites off (`Tap.ignore`)."""

    __slots__ = ()
    fields = Fields()  # nothing crosses: a compiled call has no input or output for it

    def tap(self, site: str, value: T) -> T:
        return value

    @property
    def value(self) -> dict[str, Any]:
        return {}

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Ignorer[Any]:
        return cls(effect)


class Replacer(TapHandler[T]):
    """The handler of a :class:`Tap` that replaces sites' values (`Tap.replace`).

    With a mapping, the replacements are traced inputs of a compiled call (a new
    value never retraces) and each site counts its taps: a replacement shaped like
    the site's value replaces every tap; one with an extra leading axis gives tap
    k its row k (what `Tap.record` records for a site tapped in a loop). With a
    function ``fn(site, value)``, it is static (its identity is in the cache key).
    """

    __slots__ = ("counters", "fn", "kinds", "masks", "rows", "sites", "values")

    def __init__(
        self,
        effect: Tap[T],
        *,
        fn: Callable[[str, T], T] | None = None,
        sites: tuple[str, ...] = (),
        values: tuple[Any, ...] = (),
        masks: tuple[Any, ...] = (),
        kinds: tuple[str | None, ...] = (),
        counters: tuple[Any, ...] = (),
        rows: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(effect)
        self.fn = fn
        self.sites = sites
        self.values = values
        self.masks = masks or (None,) * len(sites)
        # per site: the kind of Python number its replacement is (None: an array)
        self.kinds = kinds or (None,) * len(sites)
        # Per site: how many times it was tapped, and how many rows its replacement
        # has (-1: one value for every tap, or not tapped yet). Both cross compiled
        # regions as int32 carries, so that a tap past the last row, which compiled
        # code cannot refuse, is refused when the call returns (also out of a
        # while_loop, whose static outcomes are lost).
        self.counters = list(counters)
        self.rows = list(rows or (-1,) * len(sites))

    def __repr__(self) -> str:
        what = self.fn if self.fn is not None else "{" + ", ".join(map(repr, self.sites)) + "}"
        return f"{self.effect!r}.replace({what})"

    def tap(self, site: str, value: Any) -> Any:
        if self.fn is not None:
            _entries.check_array(self.effect, site, value, "replace(fn) replaces")
            replaced = self.fn(site, value)
            _entries.check_alike(self.effect, site, value, replaced, "replace(fn) returned a value")
            return replaced
        try:
            i = self.sites.index(site)
        except ValueError:
            return value
        _entries.check_array(self.effect, site, value, "replace() replaces")
        k = self.counters[i]
        out, rows = _entries.take(self.effect, site, value, self.values[i], k, "replacement")
        kind = self.kinds[i]
        if kind is not None:  # a Python number (weakly typed once compiled)
            dtype = jnp.result_type(value)
            if not _KIND_OF[kind](dtype):
                raise EffectTypeError(
                    f"Tap site {site!r} ({self.effect!r}) has a value of dtype {dtype}, but "
                    f"its replacement is a Python {kind}, which would change its kind. "
                    f"Give a value of dtype {dtype}."
                )
            out = jnp.asarray(out, dtype)
        _entries.check_alike(self.effect, site, value, out, "its replacement is")
        if self.masks[i] is not None:
            mask, _ = _entries.take(self.effect, site, value, self.masks[i], k, "replacement")
            out = jnp.where(mask, out, value)
        self.counters[i] = k + 1
        self.rows[i] = -1 if rows is None else rows
        return out

    @property
    def value(self) -> dict[str, Any]:
        """How many times each replaced site was tapped."""
        return dict(zip(self.sites, self.counters, strict=True))

    def export(self) -> Export:
        if self.fn is not None:
            return Export(static=("fn", self.fn))
        const = (self.values, self.masks)
        carry = (tuple(self.counters), tuple(self.rows))
        return Export(static=("map", self.sites, self.kinds), const=const, carry=carry)

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> Replacer[Any]:
        if static[0] == "fn":
            return cls(effect, fn=static[1])
        (values, masks), (counters, rows) = const, carry
        return cls(
            effect,
            sites=static[1],
            kinds=static[2],
            values=tuple(values),
            masks=tuple(masks),
            counters=tuple(counters),
            rows=tuple(rows),
        )

    def outcome(self, *, carry_required: bool) -> Outcome:
        if self.fn is not None or not self.sites:
            return Outcome()
        carry = tuple(
            tuple(jnp.asarray(k, jnp.int32) for k in part) for part in (self.counters, self.rows)
        )
        return Outcome(carry=carry)

    def absorb(self, outcome: Outcome, *, steps: int | None) -> None:
        if outcome.carry is None:
            return
        counters, rows = (
            [k if _trace.is_tracer(k) else int(k) for k in part] for part in outcome.carry
        )
        self.counters, self.rows = counters, rows

    def check_absorb(self, outcome: Outcome) -> None:
        if self.fn is None and outcome.carry is not None:
            counters, rows = outcome.carry
            _entries.check_counts(self.effect, self.sites, counters, rows, "replacement")
