"""Recorded taps: how a site's values are laid out across loops, branches and
batches, and how a replacement or perturbation is indexed per tap.

A handler that records keeps *entries*: each is one site's values from one place
in the program, stacked along leading axes (one per enclosing loop, taps in the
order a Python program would make them) and, where an `effax.cond` branch may
not have run, a mask of the taps that happened. An entry crosses a traced
boundary as an outcome's values, its layout (site, leading axes, shape, dtype,
mask width) as the outcome's static part. Reading a recording flattens a site's
entries into one stack (`read`). Replacements and perturbations are consumed in
the same order, by a counter per site (`take`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _trace
from ._errors import EffectTypeError, EffectUsageError

__all__ = [
    "Entry",
    "absorbed",
    "aligned",
    "batch_absorbed",
    "by_site",
    "check_alike",
    "check_array",
    "check_count",
    "check_counts",
    "count",
    "dtype_error",
    "entries_outcome",
    "flat",
    "read",
    "shape_error",
    "take",
    "unpack",
]


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


def count(lead: tuple[int, ...]) -> int:
    return math.prod(lead)


def flat(entry: Entry) -> tuple[Any, Any]:
    """`entry`'s taps along one axis, and their mask (None: all present)."""
    n = count(entry.lead)
    value = jnp.reshape(entry.value, (n, *entry.shape))
    present = None if entry.present is None else jnp.reshape(entry.present, (n, -1))
    return value, present


def _mask_width(entry: Entry) -> int | None:
    """How many mask elements each of `entry`'s taps has (the elements of the
    batches it ran in; 1 unbatched), None where it has no mask."""
    if entry.present is None:
        return None
    return int(math.prod(np.shape(entry.present)[len(entry.lead) :]))


def entries_outcome(entries: Sequence[Entry]) -> tuple[Any, Any]:
    """The static layout and the values an outcome sends out for `entries` (the
    layout holds each mask's width: a cond's branches must agree on it)."""
    static = tuple(
        (e.site, e.lead, e.shape, str(jnp.result_type(e.value)), _mask_width(e)) for e in entries
    )
    values = tuple((e.value, e.present) if e.present is not None else e.value for e in entries)
    return static, values


def unpack(static: Any, values: Any) -> list[Entry]:
    if values is None:  # (an outcome with no entries may come back without values)
        values = ()
    out = []
    for (site, lead, shape, _, masked), value in zip(static, values, strict=True):
        value, present = value if masked is not None else (value, None)
        out.append(Entry(site, lead, shape, value, present))
    return out


def absorbed(static: Any, values: Any) -> list[Entry]:
    """The entries an outcome sends out, as seen outside its region: a loop's
    steps stacked each entry along new leading axes; a site's entries of one step
    are joined so that its taps stay in program order."""
    entries = unpack(static, values)
    if not entries:
        return []
    first = entries[0]
    # the axes the region stacked: a loop's steps (none for a single call)
    shape = tuple(first.value.shape)
    extra = shape[: len(shape) - len(first.lead) - len(first.shape)]
    if not extra:
        return entries
    joined = []
    k = len(extra)
    for site, group in by_site(entries).items():
        shape = group[0].shape
        values = [jnp.reshape(e.value, (*extra, count(e.lead), *shape)) for e in group]
        value = values[0] if len(values) == 1 else jnp.concatenate(values, axis=k)
        present = None
        if any(e.present is not None for e in group):
            # (a mask may carry the axes of batches the taps ran in: kept, for
            # `read` to refuse a tap some elements made and others did not)
            masks = [_mask_rows(e, extra) for e in group]
            masks = _at_width(masks, _common_width([m.shape[-1] for m in masks]))
            present = masks[0] if len(masks) == 1 else jnp.concatenate(masks, axis=k)
        joined.append(Entry(site, (*extra, value.shape[k]), shape, value, present))
    return joined


def by_site(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    """`entries` grouped by site, in order; a site's taps must have one shape and
    one dtype (they are stacked)."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        group = groups.setdefault(entry.site, [])
        if group and entry.shape != group[0].shape:
            raise shape_error(entry.site, group[0].shape, entry.shape)
        if group:
            first, dtype = jnp.result_type(group[0].value), jnp.result_type(entry.value)
            if dtype != first:
                raise dtype_error(entry.site, str(first), str(dtype), branches=False)
        group.append(entry)
    return groups


def _mask_rows(entry: Entry, extra: tuple[int, ...] = ()) -> Any:
    """`entry`'s mask as (*extra, taps, batch) (batch 1 where it has none)."""
    n = count(entry.lead)
    if entry.present is None:
        return jnp.ones((*extra, n, 1), bool)
    return jnp.reshape(entry.present, (*extra, n, -1))


def _common_width(widths: Sequence[int]) -> int | None:
    """The width masks of `widths` are laid out at together: the widest, where
    the others are 1 (broadcast); None where two differ otherwise (masks of
    batches of different sizes), each then summarized as (all, any) of its row,
    which is what `read` asks of a mask (and composes: a batch of summaries
    summarizes as the batch's elements would)."""
    wide = set(widths) - {1}
    return max(wide, default=1) if len(wide) <= 1 else None


def _at_width(masks: Sequence[Any], width: int | None) -> list[Any]:
    """`masks` (..., taps, width) at one width (None: summarized, see
    `_common_width`)."""
    if width is None:
        return [jnp.stack([m.all(axis=-1), m.any(axis=-1)], axis=-1) for m in masks]
    return [jnp.broadcast_to(m, (*m.shape[:-1], width)) for m in masks]


def batch_absorbed(static: Any, values: Any) -> list[Entry]:
    """The entries of a batched region (values stacked per element along axis 0):
    the batch axis becomes part of each tap's value."""
    out = []
    for e in unpack(static, values):
        value = jnp.moveaxis(e.value, 0, len(e.lead))
        present = None if e.present is None else jnp.moveaxis(e.present, 0, -1)
        out.append(Entry(e.site, e.lead, (value.shape[len(e.lead)], *e.shape), value, present))
    return out


def aligned(
    static: Any, values: Any, statics: Sequence[Hashable]
) -> tuple[Any, Any, dict[str, int]]:
    """In one branch of an `effax.cond` whose branches record different sites:
    this branch's entries laid out as every branch's are, one masked entry per site
    with as many taps as the branch that taps it most (the others padded with
    zeros, marked absent): its static layout and values, and how many padding taps
    each site got."""
    layout: dict[str, tuple[int, tuple[int, ...], str]] = {}
    widths: dict[str, list[int]] = {}
    for branch in statics:
        if not isinstance(branch, tuple):
            continue
        counts: dict[str, int] = {}
        for site, lead, shape, dtype, masked in branch:
            counts[site] = counts.get(site, 0) + count(lead)
            widths.setdefault(site, []).append(1 if masked is None else masked)
            known = layout.get(site)
            if known is not None and known[1] != shape:
                raise shape_error(site, known[1], shape)
            if known is not None and known[2] != dtype:
                raise dtype_error(site, known[2], dtype, branches=True)
            layout[site] = (known[0] if known else 0, shape, dtype)
        for site, n in counts.items():
            total, shape, dtype = layout[site]
            layout[site] = (max(total, n), shape, dtype)
    mine = unpack(static, values)
    entries, pads = [], {}
    for site in sorted(layout):
        total, shape, dtype = layout[site]
        own = [e for e in mine if e.site == site]
        rows = [flat(e)[0] for e in own]
        masks = [_mask_rows(e) for e in own]
        n = sum(count(e.lead) for e in own)
        pads[site] = total - n
        if n < total:
            rows.append(jnp.zeros((total - n, *shape), dtype))
            masks.append(jnp.zeros((total - n, 1), bool))
        # (one width in every branch, from every branch's layout: a branch that
        # taps a site in a batch and one that does not, or in another batch)
        masks = _at_width(masks, _common_width(widths[site]))
        value = rows[0] if len(rows) == 1 else jnp.concatenate(rows)
        present = masks[0] if len(masks) == 1 else jnp.concatenate(masks)
        entries.append(Entry(site, (total,), shape, value, present))
    return (*entries_outcome(entries), pads)


def dtype_error(site: str, a: str, b: str, *, branches: bool) -> EffectUsageError:
    """The error of a site tapped with values of dtypes `a` and `b` (in the
    `branches` of a cond, or anywhere: its taps are stacked)."""
    where, why = (
        (
            " in the branches of an effax.cond or effax.switch",
            "compiled, the branches send out one layout, so a site has one dtype in every branch",
        )
        if branches
        else ("", "the taps of one site are stacked into one array, so they have one dtype")
    )
    return EffectUsageError(
        f"Tap site {site!r} was tapped with values of dtype {a} and {b}{where}; {why}. "
        "Cast the values (.astype), or give each its own site."
    )


def shape_error(site: str, a: tuple[int, ...], b: tuple[int, ...]) -> EffectUsageError:
    return EffectUsageError(
        f"Tap site {site!r} was tapped with values of shape {a} and {b}; the taps of one "
        "site are stacked, so they must have one shape. Give the differently shaped "
        "values sites of their own."
    )


def read(effect: Any, entries: Sequence[Entry]) -> dict[str, Any]:
    """``{site: value}`` of recorded entries (see `Recorder`)."""
    out: dict[str, Any] = {}
    for site, group in by_site(entries).items():
        if len(group) == 1 and not group[0].lead and group[0].present is None:
            out[site] = group[0].value
            continue
        values: list[Any] = []
        keep: list[Any] = []
        for e in group:
            value, present = flat(e)
            values.append(value)
            if present is None:
                keep.append(np.ones(value.shape[0], bool))
                continue
            if _trace.is_tracer(present):
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


def take(
    effect: Any, site: str, value: Any, rows: Any, k: Any, what: str
) -> tuple[Any, int | None]:
    """The part of `rows` (a replacement or perturbation of `site`) that tap number
    `k` of the site gets, and how many rows `rows` has (None: one value for every
    tap). `k` is a Python int while it is known, an int32 tracer in compiled loops
    (where a past-the-end index is refused after the call, see `check_counts`)."""
    shape = tuple(np.shape(value))
    rshape = tuple(np.shape(rows))
    if rshape == shape:
        return rows, None
    if len(rshape) > len(shape) and rshape[len(rshape) - len(shape) :] == shape:
        table = jnp.reshape(rows, (-1, *shape))
        n = table.shape[0]
        if isinstance(k, (int, np.integer)):
            check_count(effect, site, int(k) + 1, n, what)
            return table[k], n
        row = jax.lax.dynamic_index_in_dim(table, k, 0, keepdims=False)
        if jnp.issubdtype(row.dtype, jnp.inexact):
            # past the last row (refused once the call returns): NaN, not the last
            # row again, so that a loop on it stops rather than spinning
            row = jnp.where(k < n, row, jnp.nan)
        return row, n
    raise EffectTypeError(
        f"Tap site {site!r} ({effect!r}) has a value of shape {shape}, but its "
        f"{what} has shape {rshape}: give a value of shape {shape}, or one row per "
        f"tap (shape (taps, *{shape}))."
    )


def check_count(effect: Any, site: str, taps: int, rows: int, what: str) -> None:
    if taps > rows:
        raise EffectUsageError(
            f"Tap site {site!r} ({effect!r}) was tapped {taps} times, but its {what} holds "
            f"{rows} rows (one per tap). Give one row per tap, or a value of the site's "
            "own shape for every tap."
        )


def check_counts(
    effect: Any, sites: Sequence[str], counters: Sequence[Any], rows: Any, what: str
) -> None:
    """After a compiled region: refuse a site tapped more times than its rows (a
    compiled tap past the last row got NaN). `rows` per site: how many rows its
    value has (None or -1: one value for every tap, or unknown)."""
    if not isinstance(rows, (tuple, list)):
        return
    for site, k, n in zip(sites, counters, rows, strict=True):
        known = n is not None and not any(_trace.is_tracer(x) for x in (k, n))
        if known and int(n) >= 0:
            check_count(effect, site, int(k), int(n), what)


_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def check_array(effect: Any, site: str, value: Any, what: str) -> None:
    """Refuse a tap's value that is not one array (or Python number): what is
    recorded, replaced or differentiated is laid out per array."""
    if not isinstance(value, _ARRAY_TYPES):
        raise EffectTypeError(
            f"Tap site {site!r} ({effect!r}) was given a {type(value).__name__}, but "
            f"{what} taps of arrays (or Python numbers). Tap each leaf of a pytree with a "
            "site of its own (e.g. `jax.tree_util.tree_map_with_path`), or switch this "
            "site off with a pattern that does not match it."
        )


def check_alike(effect: Any, site: str, value: Any, out: Any, what: str) -> None:
    """Refuse `out` (what a handler puts in place of a tap's `value`; `what` says
    where it came from) unless it is an array of `value`'s shape and dtype."""
    if not isinstance(out, _ARRAY_TYPES):
        shown = repr(out) if len(repr(out)) <= 60 else repr(out)[:57] + "..."
        raise EffectTypeError(
            f"Tap site {site!r} ({effect!r}): {what} of type {type(out).__name__} "
            f"({shown}), not an array: a tap returns an array like the one it was given "
            "(of its shape and dtype)."
        )
    a = (tuple(np.shape(value)), jnp.result_type(value))
    b = (tuple(np.shape(out)), jnp.result_type(out))
    if a != b:
        raise EffectTypeError(
            f"Tap site {site!r} ({effect!r}) has a value of shape {a[0]} and dtype {a[1]}, "
            f"but {what} of shape {b[0]} and dtype {b[1]}: a tap returns a value like the "
            "one it was given (cast it with .astype, or reshape it)."
        )
