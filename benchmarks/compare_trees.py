"""Before/after comparison of two effax source trees in one run (cases 1-3 and 7).

Run: .venvs/default/bin/python benchmarks/compare_trees.py --before PATH [--after PATH]
     [--rounds 3] [--quick] [--json FILE]

`--before` and `--after` are source trees, each holding ``effax/`` and
``benchmarks/`` (default `--after`: the repository containing this script; e.g. a
``git archive`` of the old commit unpacked into ``/tmp`` as `--before`). Each
round runs, from each tree, its own ``benchmarks/bench_dispatch.py`` (cases 1, 2,
3) and ``benchmarks/bench_first_call.py`` (case 7) with ``--json``, each in a
fresh subprocess whose working directory is that tree's ``benchmarks/`` folder and
whose ``PYTHONPATH`` is that tree (so ``import effax`` and ``import _harness``
come from it; the subprocess checks where effax came from). Processes alternate
between the trees, and the order flips every round (before, after; after,
before; ...), so that both see the same machine load.

The table has, per case and contender: the ratio to its baseline in each tree
(the bench script's own paired ratio, median over rounds), and ``after/before``:
the median over rounds of the contender's time in the after tree divided by its
time in the before tree in the same round; ``base a/b`` is the same for the
row's baseline (a drift check: for cases 1, 2 and 7 it is plain ``jax.jit``,
which neither tree changes, so it should be near 1). Lower is better throughout.

A default run is 3 rounds of the full bench scripts, about 40 s per tree and
round on a quiet 2-core machine (about 4 minutes; more under load, which is
printed: a run of one tree against itself shows how far apart the same code lands
on a busy machine); `--quick` runs one round of the scripts' one-iteration smoke
mode (the numbers then mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
SCRIPTS = ("bench_dispatch.py", "bench_first_call.py")
MARK = "@@compare_trees effax="

# Runs a bench script as __main__ (sys.path[0] is the working directory, the tree's
# benchmarks/ folder, as for `python bench_x.py`), then says where effax came from.
RUNNER = f"""
import runpy, sys
script, *args = sys.argv[1:]
sys.argv = [script, *args]
runpy.run_path(script, run_name="__main__")
import effax
print({MARK!r} + effax.__file__)
"""

Key = tuple[str, str]  # (case, contender)


def run_bench(python: str, tree: pathlib.Path, script: str, quick: bool) -> list[dict[str, Any]]:
    """The result rows of one run of `script` from `tree`."""
    args = [python, "-c", RUNNER, script, "--json", *(["--quick"] if quick else [])]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        args, cwd=tree / "benchmarks", env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode:
        raise RuntimeError(
            f"{script} from {tree} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
            f"\n{proc.stderr[-4000:]}"
        )
    lines = proc.stdout.splitlines()
    where = [line[len(MARK) :] for line in lines if line.startswith(MARK)]
    expected = tree / "effax"
    if not where or pathlib.Path(where[-1]).resolve().parent != expected.resolve():
        raise RuntimeError(f"{script} from {tree} imported effax from {where}, not {expected}")
    results = [line for line in lines if line.startswith('{"rows"')]
    if not results:
        raise RuntimeError(f"{script} from {tree} printed no JSON results")
    rows: list[dict[str, Any]] = json.loads(results[-1])["rows"]
    return rows


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _per_round(after: Sequence[float], before: Sequence[float]) -> float | None:
    return _median([a / b for a, b in zip(after, before, strict=False) if b])


def compare(
    trees: dict[str, pathlib.Path], rounds: int, quick: bool, python: str
) -> dict[str, Any]:
    """Every row of every run: ``runs[tree][key]`` lists one row per round."""
    runs: dict[str, dict[Key, list[dict[str, Any]]]] = {name: {} for name in trees}
    order: list[Key] = []
    wall: dict[str, float] = {name: 0.0 for name in trees}
    loads: list[float] = []
    names = list(trees)
    for r in range(rounds):
        for script in SCRIPTS:
            for name in names if r % 2 == 0 else names[::-1]:
                loads.append(os.getloadavg()[0])
                start = time.perf_counter()
                rows = run_bench(python, trees[name], script, quick)
                elapsed = time.perf_counter() - start
                wall[name] += elapsed
                print(
                    f"  round {r + 1}/{rounds}: {script} from {name} ({elapsed:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
                for row in rows:
                    key = (row["case"], row["contender"])
                    if key not in order:
                        order.append(key)
                    runs[name].setdefault(key, []).append(row)
    table = []
    for key in order:
        b_rows, a_rows = runs["before"].get(key, []), runs["after"].get(key, [])
        first = (b_rows or a_rows)[0]
        # per round: the same round's after and before values (both run back to back)
        table.append(
            {
                "case": key[0],
                "contender": key[1],
                "unit": first["unit"],
                "baseline": first["baseline"],
                "target": first["target"],
                "before_ratio": _median([r["ratio"] for r in b_rows if r["ratio"] is not None]),
                "after_ratio": _median([r["ratio"] for r in a_rows if r["ratio"] is not None]),
                "before_value": _median([r["value"] for r in b_rows]),
                "after_value": _median([r["value"] for r in a_rows]),
                "after_over_before": _per_round(
                    [r["value"] for r in a_rows], [r["value"] for r in b_rows]
                ),
                "baseline_after_over_before": _per_round(
                    [r["baseline_value"] for r in a_rows if r["baseline_value"]],
                    [r["baseline_value"] for r in b_rows if r["baseline_value"]],
                ),
                "before_ratios": [r["ratio"] for r in b_rows],
                "after_ratios": [r["ratio"] for r in a_rows],
            }
        )
    return {
        "trees": {name: str(path) for name, path in trees.items()},
        "rounds": rounds,
        "quick": quick,
        "wall_s": wall,
        # the 1-minute load average before each process: above the CPU count, other
        # processes competed for the machine and the after/before times are noisy
        "load_averages": loads,
        "cpu_count": os.cpu_count(),
        "rows": table,
    }


def _f(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    header = (
        "case",
        "contender",
        "before ratio",
        "after ratio",
        "target",
        "before",
        "after",
        "after/before",
        "base a/b",
    )
    lines = [header]
    for r in rows:
        lines.append(
            (
                r["case"],
                r["contender"],
                _f(r["before_ratio"], ".3f"),
                _f(r["after_ratio"], ".3f"),
                _f(r["target"], ".2f"),
                f"{_f(r['before_value'], '.2f')} {r['unit']}",
                f"{_f(r['after_value'], '.2f')} {r['unit']}",
                _f(r["after_over_before"], ".3f"),
                _f(r["baseline_after_over_before"], ".3f"),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, type=pathlib.Path, help="the old source tree")
    parser.add_argument(
        "--after", default=HERE.parent, type=pathlib.Path, help="the new tree (default: this repo)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; quick: 1)")
    parser.add_argument("--quick", action="store_true", help="one round of one-iteration runs")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name, tree in trees.items():
        missing = [s for s in SCRIPTS if not (tree / "benchmarks" / s).is_file()]
        if missing or not (tree / "effax" / "__init__.py").is_file():
            parser.error(f"--{name} {tree}: no effax/ or benchmarks/{', '.join(missing)}")
    rounds = args.rounds or (1 if args.quick else 3)

    start = time.perf_counter()
    results = compare(trees, rounds, args.quick, args.python)
    results["total_s"] = time.perf_counter() - start
    print(f"\nbefore: {trees['before']}\nafter:  {trees['after']}")
    print(
        f"{rounds} round(s){' (quick: the numbers mean nothing)' if args.quick else ''}; "
        f"ratios: median over rounds of each script's paired ratio to its baseline; "
        f"after/before: median over rounds of the same round's times"
    )
    for line in table_lines(results["rows"]):
        print(line)
    wall = ", ".join(f"{name} {s:.0f} s" for name, s in results["wall_s"].items())
    print(f"\ntotal {results['total_s']:.0f} s ({wall})")
    loads = results["load_averages"]
    print(
        f"1-minute load average before each process: {min(loads):.1f} to {max(loads):.1f} "
        f"({results['cpu_count']} CPUs)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
