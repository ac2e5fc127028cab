"""The effax benchmark suite: every case, side by side, in one run.

Run: python benchmarks/run.py [--quick] [--out DIR] [--cases 1-3 4 5 6 7 8-9 10 12]

Cases (see each module's docstring):

- 1-3 ``bench_dispatch.py``: per-call dispatch of a compiled step, effax against
  hand-plumbed ``jax.jit`` (one of each effect; 100 `State` leaves; 100 unrelated
  handlers installed around the call).
- 4 ``bench_compile.py``: trace + lower + compile of 1,000 effect operations.
- 5 ``bench_eager.py``: eager ``ask``, ``get``/``set``, ``next_key``, ``emit``.
- 6 ``bench_peers.py``: two small models (an MLP, a CNN) trained in effax,
  hand-plumbed JAX, Flax NNX, Haiku, Equinox and NumPyro (the peers are optional:
  ``effax[bench]``).
- 7 ``bench_first_call.py``: the first call (trace, lower, compile, run) of a
  compiled step with 100 unrelated handlers installed.
- 8-9 ``bench_keys.py``: key draws in compiled code: a Metropolis-Hastings chain
  (one chain, 64 chains) against the hand-written kernel splitting its key per
  step; trace time of 200 key draws among 1,000 operations.
- 10 ``bench_donation.py``: a training step with donated state (``donate_state``)
  against the hand-plumbed donated step: time per step and compiled peak memory.
- 12 ``bench_taps.py``: `effax.Tap` in a compiled training step (layers in a Python
  loop, and in an ``effax.scan``): under ``ignore()`` against the step without taps,
  under ``record()`` against the step returning its activations by hand.
- 13 ``bench_nnx.py``: `effax.nnx` on Flax's scan-over-layers model (examples/
  nnx_scan_layers.py) against the pure Flax NNX program: per step and first call.

Prints a table of medians and ratios (contender / baseline, lower is better) and
writes ``results.json``, ``results.md`` and ``results.png`` (if matplotlib is
installed) into ``--out`` (default: ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import _harness as h
import bench_compile
import bench_dispatch
import bench_donation
import bench_eager
import bench_first_call
import bench_keys
import bench_nnx
import bench_peers
import bench_taps
import jax

HERE = pathlib.Path(__file__).resolve().parent

CASES: dict[str, tuple[str, Callable[[list[str]], dict[str, Any]]]] = {
    "1-3": ("dispatch", bench_dispatch.main),
    "4": ("compile", bench_compile.main),
    "5": ("eager", bench_eager.main),
    "6": ("peers", bench_peers.main),
    "7": ("first_call", bench_first_call.main),
    "8-9": ("keys", bench_keys.main),
    "10": ("donation", bench_donation.main),
    "12": ("taps", bench_taps.main),
    "13": ("nnx", bench_nnx.main),
}


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def metadata(quick: bool) -> dict[str, Any]:
    return {
        "git": h.git_commit("effax"),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # the 1-minute load when the run started: above the CPU count, other
        # processes competed for the machine and absolute times are inflated
        "load_average": os.getloadavg()[0],
        "jax_backend": jax.default_backend(),
        "versions": {
            name: _version(name)
            for name in ("effax", "jax", "jaxlib", "flax", "dm-haiku", "equinox", "numpyro")
        },
    }


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v)
    kind = "quick (smoke) run: the numbers mean nothing" if meta["quick"] else "full run"
    lines = [
        "# effax benchmark results",
        "",
        f"{meta['date']}, {kind}, effax at {meta['git']}; "
        f"Python {meta['python']}, {meta['platform']}, {meta['cpu_count']} CPUs "
        f"(load {meta['load_average']:.1f} at the start), "
        f"backend {meta['jax_backend']}; {versions}.",
        "",
        "Ratio = contender / baseline, the median of per-round ratios of interleaved "
        "runs (lower is better); target met: ok, MISSED, or no target.",
        "",
        "| case | contender | value | baseline | ratio | target | |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in results["rows"]:
        value = "skipped" if math.isnan(r["value"]) else f"{r['value']:.2f} {r['unit']}"
        base = f"{r['baseline']} ({r['baseline_value']:.2f})" if r["baseline"] is not None else ""
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        target = "" if r["target"] is None else f"<= {r['target']:.2f}"
        verdict = {True: "ok", False: "MISSED", None: ""}[r["meets_target"]]
        lines.append(
            f"| {r['case']} | {r['contender']} | {value} | {base} | {ratio} | {target} "
            f"| {verdict} |"
        )
    notes = [r for r in results["rows"] if r["notes"]]
    if notes:
        lines += ["", "Notes:", ""]
        lines += [f"- case {r['case']}, {r['contender']}: {r['notes']}" for r in notes]
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: pathlib.Path) -> str | None:
    """Three panels: ratios against targets (cases 1-4), eager operations against
    the raw work (case 5), time per training step (case 6)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError as exc:
        return f"no chart: {exc}"
    rows = results["rows"]
    ratios = [r for r in rows if r["case"] in ("1", "2", "3", "4", "7")][::-1]
    eager = [r for r in rows if r["case"] == "5"][::-1]
    peers = [r for r in rows if r["case"] == "6" and not math.isnan(r["value"])][::-1]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5), width_ratios=(5, 3, 3))
    ax1, ax2, ax3 = axes

    if ratios:
        colors = [
            {True: "tab:green", False: "tab:red", None: "tab:gray"}[r["meets_target"]]
            for r in ratios
        ]
        ax1.barh(
            [f"[{r['case']}] {r['contender']}" for r in ratios],
            [r["ratio"] for r in ratios],
            color=colors,
        )
        for i, r in enumerate(ratios):
            if r["target"] is not None:
                ax1.plot([r["target"]] * 2, [i - 0.4, i + 0.4], color="black", linewidth=2)
        ax1.axvline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax1.set_xscale("log")
        ax1.xaxis.set_major_formatter(ticker.FormatStrFormatter("%.2g"))
        ax1.xaxis.set_minor_formatter(ticker.FormatStrFormatter("%.2g"))
        ax1.tick_params(axis="x", which="minor", labelsize=7)
    ax1.set_xlabel("effax / baseline (log; black ticks: targets; green: met)")
    ax1.set_title("cases 1-4: effax against hand-plumbed jax.jit")

    if eager:
        ys = range(len(eager))
        ax2.barh(
            [y + 0.2 for y in ys],
            [r["value"] for r in eager],
            height=0.4,
            color="tab:blue",
            label="effax operation",
        )
        ax2.barh(
            [y - 0.2 for y in ys],
            [r["baseline_value"] for r in eager],
            height=0.4,
            color="tab:gray",
            label="raw work",
        )
        ax2.set_yticks(list(ys), [r["contender"] for r in eager])
        ax2.set_xscale("log")
        ax2.legend(loc="lower right", fontsize=8)
    ax2.set_xlabel("us per operation (log)")
    ax2.set_title("case 5: eager operations")

    if peers:
        ax3.barh(
            [r["contender"] for r in peers],
            [r["value"] for r in peers],
            color=["tab:blue" if r["contender"].startswith("effax") else "tab:gray" for r in peers],
        )
        ax3.set_xscale("log")  # the CNN's steps take tens of times the MLP's
    ax3.set_xlabel("us per training step (median, log)")
    ax3.set_title("case 6: one training step")
    for ax in axes:
        ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one iteration each (smoke test)")
    parser.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    sub_argv = ["--quick"] if args.quick else []

    results: dict[str, Any] = {"meta": metadata(args.quick), "rows": [], "cases": {}}
    for case in args.cases:
        name, run = CASES[case]
        start = time.perf_counter()
        out = run(sub_argv)
        out["seconds"] = time.perf_counter() - start
        results["cases"][name] = out
        results["rows"] += out["rows"]

    h.print_rows(
        "summary (ratio = contender / baseline, paired medians; lower is better)", results["rows"]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (args.out / "results.md").write_text(markdown(results))
    problem = chart(results, args.out / "results.png")
    written = ["results.json", "results.md"] + ([] if problem else ["results.png"])
    results["written"] = [str(args.out / name) for name in written]
    print(f"\nwrote {', '.join(results['written'])}" + (f" ({problem})" if problem else ""))
    return results


if __name__ == "__main__":
    sys.exit(main() and 0)
