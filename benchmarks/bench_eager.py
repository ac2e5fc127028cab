"""Case 5: eager cost of the effect operations against the raw work they wrap.

Run: python benchmarks/bench_eager.py [--quick]

Takes the numbers of ``bench_context.py`` (``ask``, ``get``, ``set``, ``next_key``,
``emit`` under installed handlers, the stdlib ``ContextVar.get`` and
``jax.random.fold_in``) and adds, in the same run, the plain-Python operations
that the other effects replace: reading and writing an attribute, appending to a
list. ``next_key`` against ``fold_in`` (both about 100 us eager dispatches) is
re-measured here interleaved. Ratios are effect operation / raw operation; for
``ask``, ``get`` and ``set`` the raw floor is a stdlib ``ContextVar.get`` (any
context lookup pays it), so the absolute overhead (in the notes) is what counts.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import _harness as h
import bench_context
import jax
import jax.numpy as jnp

import effax as fx


class _Cell:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    number, repeat = (10, 1) if args.quick else (100_000, 7)

    context = bench_context.main(["--quick"] if args.quick else [])
    x = jnp.float32(1.0)
    cell = _Cell(x)
    values: list[Any] = []

    def attribute_set() -> None:
        cell.value = x

    raw = {
        "attribute read": bench_context.median_us(lambda: cell.value, number, repeat),
        "attribute write": bench_context.median_us(attribute_set, number, repeat),
        "list.append": bench_context.median_us(lambda: values.append(x), number, repeat),
    }
    values.clear()

    # next_key against fold_in is re-measured interleaved (both are ~100 us eager
    # dispatches, so noise matters), with the counter varying on both sides.
    stream = fx.RandomKey("eager.stream")
    key = jax.random.key(0)
    with stream.seed(key):
        counter = iter(range(10**9))

        def raw_fold_in(n: int) -> object:
            for _ in range(n):
                k = jax.random.fold_in(key, next(counter))
            return jax.block_until_ready(k)

        def next_key(n: int) -> object:
            for _ in range(n):
                k = stream.next_key()
            return jax.block_until_ready(k)

        keys = h.interleaved(
            {"fold_in": raw_fold_in, "next_key": next_key},
            number=1 if args.quick else 200,
            repeat=1 if args.quick else 21,
        )

    stdlib = "ContextVar.get (stdlib)"
    fold_in = "jax.random.fold_in (raw work)"
    pairs = [
        ("Ask.ask", stdlib, context[stdlib]),
        ("State.get", stdlib, context[stdlib]),
        ("State.set", stdlib, context[stdlib]),
        ("Emit.emit", "list.append", raw["list.append"]),
    ]
    rows = [
        h.row(
            "5",
            f"{name} (eager)",
            context[name],
            unit="us/op",
            baseline=base_name,
            baseline_value=base,
            ratio=context[name] / base,
            notes=f"overhead {context[name] - base:+.3f} us",
        )
        for name, base_name, base in pairs
    ]
    key_ratio = h.paired_ratio(keys["next_key"], keys["fold_in"])
    rows.insert(
        3,
        h.row(
            "5",
            "RandomKey.next_key (eager)",
            h.median(keys["next_key"]),
            unit="us/op",
            baseline="jax.random.fold_in (raw work)",
            baseline_value=h.median(keys["fold_in"]),
            ratio=key_ratio,
            notes=(
                "overhead ~ (ratio - 1) x baseline = "
                f"{(key_ratio - 1) * h.median(keys['fold_in']):+.1f} us; "
                "re-measured interleaved (bench_context's own, not interleaved: "
                f"{context['RandomKey.next_key']:.1f} vs {context[fold_in]:.1f} us)"
            ),
        ),
    )
    h.print_rows("case 5: eager effect operations (median us per op)", rows)
    results = {"rows": rows, "bench_context": context, "raw": raw, "keys": keys}
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
