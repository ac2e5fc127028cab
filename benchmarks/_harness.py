"""Timing and reporting shared by the benchmark suite (not a benchmark itself).

Every comparison here is *interleaved*: each round times every contender once, in
a shuffled order, so that a slow drift of the machine (another process, frequency
scaling, a noisy neighbour) hits all of them alike. Ratios are *paired*: the
median over rounds of ``contender_i / baseline_i``, which cancels that drift much
better than dividing two medians taken at different times.
"""

from __future__ import annotations

import gc
import pathlib
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

# A contender is `batch(n)`: make n calls and block until their results are ready.
Batch = Callable[[int], object]


def interleaved(
    contenders: Mapping[str, Batch], *, number: int, repeat: int, warmup: int = 2, seed: int = 0
) -> dict[str, list[float]]:
    """Microseconds per call of each contender: `repeat` samples of `number` calls.

    Each contender first runs `warmup` calls untimed (compilation, caches). The
    garbage collector is off while timing, as in :mod:`timeit`.
    """
    if warmup:
        for batch in contenders.values():
            batch(warmup)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders)
    shuffle = random.Random(seed).shuffle
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            shuffle(order)
            for name in order:
                start = time.perf_counter()
                contenders[name](number)
                samples[name].append((time.perf_counter() - start) / number * 1e6)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def paired_ratio(values: Sequence[float], baseline: Sequence[float]) -> float:
    """Median over rounds of ``values[i] / baseline[i]``."""
    return statistics.median(v / b for v, b in zip(values, baseline, strict=True))


def row(
    case: str,
    contender: str,
    value: float,
    *,
    unit: str,
    baseline: str | None = None,
    baseline_value: float | None = None,
    ratio: float | None = None,
    target: float | None = None,
    notes: str = "",
) -> dict[str, Any]:
    """One line of the results table. `ratio` is contender / baseline (lower is
    better); `meets_target` is `ratio <= target` where a target is set."""
    return {
        "case": case,
        "contender": contender,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": ratio,
        "target": target,
        "meets_target": None if target is None or ratio is None else bool(ratio <= target),
        "notes": notes,
    }


def compared_rows(
    case: str,
    samples: Mapping[str, Sequence[float]],
    baseline: str,
    *,
    unit: str = "us/call",
    targets: Mapping[str, float] | None = None,
    notes: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A row per contender other than `baseline`, with its paired ratio to it."""
    targets = targets or {}
    notes = notes or {}
    base = samples[baseline]
    return [
        row(
            case,
            name,
            median(values),
            unit=unit,
            baseline=baseline,
            baseline_value=median(base),
            ratio=paired_ratio(values, base),
            target=targets.get(name),
            notes=notes.get(name, ""),
        )
        for name, values in samples.items()
        if name != baseline
    ]


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def table_lines(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Rows as aligned plain-text lines (what the suite prints)."""
    header = ("case", "contender", "value", "baseline", "ratio", "target", "")
    lines = [header]
    for r in rows:
        verdict = {True: "ok", False: "MISSED", None: ""}[r["meets_target"]]
        lines.append(
            (
                r["case"],
                r["contender"],
                f"{_fmt(r['value'], '.2f')} {r['unit']}",
                f"{_fmt(r['baseline_value'], '.2f')} {r['baseline'] or ''}".strip(),
                _fmt(r["ratio"], ".3f"),
                _fmt(r["target"], ".2f"),
                verdict,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def same_bits(a: Any, b: Any) -> bool:
    """Whether two pytrees have the same leaves, bit for bit."""
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def paired_runs(
    runs: Mapping[str, Callable[[], tuple[Any, Any]]], repeat: int
) -> dict[str, list[Any]]:
    """`repeat` rounds of every run in `runs`, their order alternating, after a first
    round that warms JAX's own caches (untimed). Each run returns ``(measurement,
    output)``; every round's outputs must agree bit for bit. Returns each run's
    measurements."""
    names = list(runs)
    measured: dict[str, list[Any]] = {name: [] for name in names}
    for i in range(repeat + 1):
        outs = {}
        for name in names if i % 2 == 0 else names[::-1]:
            measurement, outs[name] = runs[name]()
            if i:
                measured[name].append(measurement)
        first, *others = outs.values()
        if not all(same_bits(first, other) for other in others):
            raise AssertionError(f"{' and '.join(names)} disagree")
    return measured


def print_rows(title: str, rows: Iterable[Mapping[str, Any]]) -> None:
    rows = list(rows)
    print(f"\n== {title}")
    for line in table_lines(rows):
        print(line)
    for r in rows:
        if r["notes"]:
            print(f"  [{r['case']}] {r['contender']}: {r['notes']}")


def git_commit(*watched: str) -> str | None:
    """The commit benchmarked, with "+dirty" if the working tree has changes under
    the `watched` folders (relative to the repository root)."""
    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *watched],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
