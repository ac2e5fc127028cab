"""Where effax's per-call time goes, for the step of cases 1 and 3.

Run: python benchmarks/profile_dispatch.py [--quick] [--calls N] [--top K]

Prints, interleaved and paired like the suite:

- the per-call time of hand-plumbed ``jax.jit``, of ``effax.handle(step,
  transform=jax.jit)`` (handlers around; and with 100 unrelated handlers), and of
  *the very jitted function effax built, called directly* with the arguments effax
  passed it: the difference between the last two is effax's own Python work per
  call, the difference between the last and the first is what effax's argument
  and output structure costs inside JAX's dispatch;
- a cProfile of effax's calls (case 1, then case 3), sorted by own time;
- the code effax generated for case 1's calls (what runs on every call once the
  handled function is warm; see effax/_warmpath.py).

Not a benchmark (nothing here has a target); a tool for whoever optimises
``effax.handle``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import linecache
import pstats
from collections.abc import Callable
from typing import Any

import _harness as h
import bench_dispatch as bd
import jax

import effax as fx


class Recorder:
    """A transform: ``jax.jit``, remembering the jitted function and its last arguments."""

    def __init__(self) -> None:
        self.jitted: Callable[..., Any] | None = None
        self.args: tuple[Any, ...] = ()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        jitted = jax.jit(fn)
        self.jitted = jitted

        def call(*args: Any) -> Any:
            self.args = args
            return jitted(*args)

        return call


def direct_contender(inp: dict[str, Any]) -> Callable[[int], Any]:
    """The jitted function effax built for `step`, called without effax around it."""
    recorder = Recorder()
    fn = fx.handle(bd.step, transform=recorder)
    cells = (bd.scale.provide(inp["scale"]), bd.noise.seed(inp["key"]), bd.total.init(inp["total"]))
    with fx.handlers(*cells):
        fn(inp["x"])
        fn(inp["x"])
    jitted, args = recorder.jitted, recorder.args
    assert jitted is not None

    def batch(n: int) -> Any:
        for _ in range(n):
            out = jitted(*args)
        return jax.block_until_ready(out)

    return batch


def profile(batch: Callable[[int], Any], calls: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    batch(calls)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repeat (smoke test)")
    parser.add_argument("--calls", type=int, default=20_000, help="calls profiled per case")
    parser.add_argument("--top", type=int, default=25, help="functions shown per profile")
    args = parser.parse_args(argv)
    number, repeat, calls = (1, 1, 10) if args.quick else (500, 31, args.calls)

    inp = bd._inputs()
    hand, _ = bd.hand_contender(inp)
    around, _ = bd.effax_around_contender(inp)
    around100, _ = bd.effax_around_contender(inp, unrelated=True)
    direct = direct_contender(inp)
    names = {
        "hand": bd.HAND,
        "direct": "effax's jitted function, called directly",
        "around": bd.AROUND,
        "around100": bd.AROUND_100,
    }
    samples = h.interleaved(
        {
            names["hand"]: hand,
            names["direct"]: direct,
            names["around"]: around,
            names["around100"]: around100,
        },
        number=number,
        repeat=repeat,
        warmup=3,
    )
    rows = h.compared_rows("prof", samples, names["hand"])
    h.print_rows("where the time goes (median us per call; ratio paired vs hand)", rows)
    base = h.median(samples[names["hand"]])
    split = {
        "jax.jit dispatch, hand-plumbed": base,
        "extra in JAX's dispatch for effax's argument/output structure": (
            h.paired_ratio(samples[names["direct"]], samples[names["hand"]]) - 1
        )
        * base,
        "effax's own Python per call": (
            h.paired_ratio(samples[names["around"]], samples[names["hand"]])
            - h.paired_ratio(samples[names["direct"]], samples[names["hand"]])
        )
        * base,
    }
    print()
    for what, us in split.items():
        print(f"  {what:<64} {us:7.2f} us")

    profiles = {
        "case 1": profile(around, calls, args.top),
        "case 3": profile(around100, calls, args.top),
    }
    for case, text in profiles.items():
        print(f"\n== cProfile, {case}, {calls} calls (own time; cProfile inflates Python calls)")
        print(text)
    source = generated_source()
    print("== the code effax runs for each call of case 1, once warm\n")
    print(source)
    return {"rows": rows, "split_us": split, "profiles": profiles, "generated": source}


def generated_source() -> str:
    """The generated per-call code of `handle(step, transform=jax.jit)`, warmed up."""
    inp = bd._inputs()
    fn = fx.handle(bd.step, transform=jax.jit)
    cells = (bd.scale.provide(inp["scale"]), bd.noise.seed(inp["key"]), bd.total.init(inp["total"]))
    with fx.handlers(*cells):
        for _ in range(3):
            fn(inp["x"])
        code = fn.__code__
    return "".join(linecache.getlines(code.co_filename))


if __name__ == "__main__":
    main()
