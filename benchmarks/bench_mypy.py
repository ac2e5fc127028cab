"""What the effax mypy plugin costs: mypy with ``effax_stubs.mypy_plugin`` against
plain mypy, on the same files with the same configuration but for the plugin.

Run: python benchmarks/bench_mypy.py [--quick] [--out DIR] [--targets module examples]
     [--profile]

Two targets:

- *module*: one effectful module of about 400 lines, generated deterministically
  (``effectful_module()``): module-level declarations of every kind of effect
  (``Ask``, a static ``Ask``, an ``Ask`` with a default, ``State``, ``StateDict``,
  ``RandomKey``, ``Emit``, ``Tap``, a user-defined ``effax.Effect`` with its
  handler), blocks of functions with ``@fx.uses`` rows performing every kind of
  operation, calling each other, ``effax.jit`` / ``handle`` / ``scan`` /
  ``fori_loop`` / ``cond`` / ``switch`` / ``vmap`` / ``grad`` / ``checkpoint``,
  handlers in ``with`` blocks, a class with methods with rows, and module-level
  code under handlers. Its last line performs an effect with no handler: the
  plugin must report it (``effax-unhandled``), which proves the plugin ran;
- *examples*: a copy of ``examples/*.py``.

Both run from the repository root with mypy of the interpreter given by
``--python`` (default: ``.venvs/default``), ``python -m mypy``, under the plugin
corpus's configuration (``tests/types/plugin/mypy.ini``) and the same one without
its ``plugins =`` line (both written into the work folder), each with its own
cache folder, and with Python's bytecode cache on (kept in the work folder), as a
user's Python runs it:

- *cold*: a fresh cache, the whole run (jax, effax, Flax, optax, Equinox, ...
  checked too);
- *warm*: the cache filled by the previous run of the same configuration on the
  same files, then a comment line appended to every target file: mypy checks the
  user's files again and reads every library from its cache.

The plugin and plain runs alternate in order, one of each per round; each row
gives the medians of the CPU time (user + system) of the whole ``mypy`` process
and the *paired* ratio (median over rounds of plugin / plain); its note gives the
same for wall-clock time. CPU time is the row's measure because a small shared
machine's wall time varies by 2x from one cold run to the next with the load
(mypy checks on one core, so the two agree on a quiet machine). A round during which a file of
``effax/`` or ``effax_stubs/`` changed (someone editing the working tree: mypy
would check the library again) is discarded, the caches refilled, and run again.

``--profile`` then runs one more warm run of each target with the plugin under
cProfile and reports the plugin's share: the time spent inside its functions
(entered from mypy), per hook, with call counts (``profile_<target>.prof`` is
kept in ``--out``). cProfile slows the interpreted plugin much more than
compiled mypy, so the share overstates the real one; the timed ratios do not.

Writes ``mypy.json`` into ``--out`` (default: a folder in the system's
temporary directory; ``benchmarks/results/`` is tracked).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _harness as h

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIG = ROOT / "tests" / "types" / "plugin" / "mypy.ini"
PLUGIN_LINE = re.compile(r"^\s*plugins\s*=.*effax_stubs\.mypy_plugin.*$", re.MULTILINE)
DEFAULT_PYTHON = ROOT / ".venvs" / "default" / "bin" / "python"
DEFAULT_OUT = Path(tempfile.gettempdir()) / "effax-bench-mypy"
TARGETS = {"cold": 1.10, "warm": 1.10}  # issue 28 item 3, issue 42 item 5: plugin / plain mypy
METRICS = ("cpu", "wall")  # the rows compare CPU times; wall times in their notes
WATCHED = ("effax", "effax_stubs")  # a change there invalidates the caches

# --- the generated effectful module ---------------------------------------------------

HEADER = '''\
"""A generated effectful module (benchmarks/bench_mypy.py): every kind of effect,
rows, handlers, control flow, a class and module-level code."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
mode = fx.Ask[str]("mode", static=True)
verbose = fx.Ask[bool]("verbose", static=True, default=False)
steps = fx.State[jax.Array]("steps")
stats = fx.StateDict[jax.Array]("stats")
noise = fx.RandomKey("noise")
losses = fx.Emit[jax.Array]("losses")
acts = fx.Tap[jax.Array]("acts")
ROW = (temperature, steps)


class Visited(fx.Effect["Visits"]):
    """A user-defined effect: `visit` is its operation, `record` its handler maker."""

    def visit(self, name: str) -> None:
        self.handler().names.append(name)

    def record(self) -> Visits:
        return Visits(self)


class Visits(fx.Handler[Visited]):
    fields = fx.Fields()

    def __init__(self, effect: Visited) -> None:
        self.effect = effect
        self.names: list[str] = []

    @property
    def value(self) -> Any:
        return self.names

    @classmethod
    def rebuild(cls, effect: Visited, static: Any, const: Any, carry: Any) -> Visits:
        return cls(effect)


visited = Visited("visited")
'''

BLOCK = '''

# --- block {i} ---


@fx.uses(*ROW)
def layer_{i}(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return jnp.tanh(x * temperature.ask() + {i})


@fx.uses(temperature, steps, noise, losses, acts)
def noisy_{i}(x: jax.Array) -> jax.Array:
    y = layer_{i}(x) + fx.random.normal(x.shape, stream=noise)
    losses.emit(jnp.mean(y))
    return acts.tap("block{i}/out", y)


@fx.uses(stats, verbose)
def normalised_{i}(x: jax.Array) -> jax.Array:
    mean = stats.get("mean{i}", init=lambda: jnp.zeros(x.shape[-1]))
    stats.set("mean{i}", 0.9 * mean + 0.1 * x)
    return (x - mean) * (2.0 if verbose.ask() else 1.0)


@fx.uses(temperature, steps, noise, losses, acts, stats, verbose, mode)
def step_{i}(x: jax.Array) -> jax.Array:
    def body(c: jax.Array, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return noisy_{i}(c) + xs, c

    carry, _ = fx.scan(body, x, jnp.ones((3,) + x.shape))
    carry = fx.fori_loop(0, 2, lambda j, c: layer_{i}(c), carry)
    carry = fx.cond(mode.ask() == "train", noisy_{i}, layer_{i}, carry)
    carry = fx.switch(1, [layer_{i}, noisy_{i}], carry)
    key = noise.next_key()
    return normalised_{i}(carry + jax.random.uniform(key, carry.shape))


@fx.uses(temperature, steps, noise, losses, acts)
def loss_{i}(x: jax.Array) -> jax.Array:
    g = fx.grad(lambda v: jnp.sum(noisy_{i}(v)))(x)
    batched = fx.vmap(layer_{i})(jnp.stack([x, x]))
    kept = fx.checkpoint(noisy_{i})(x)
    return jnp.sum(g) + jnp.sum(batched) + jnp.sum(kept)


@fx.uses(temperature, verbose)
def handled_{i}(x: jax.Array) -> jax.Array:
    with steps.init(jnp.int32(0)), noise.seed({i}), losses.collect() as got:
        with acts.record("block{i}/*") as taps, visited.record() as rec:
            y = loss_{i}(x)
            visited.visit("block{i}")
            with fx.handlers(stats.init(), mode.provide("train")):
                y = y + step_{i}(x)
    return y + len(got.value) + len(taps.value) + len(rec.value)


fast_{i} = fx.jit(handled_{i})
pure_{i} = fx.handle(layer_{i}, steps.init(jnp.int32(0)))


class Model{i}:
    """Methods with rows, a property, and an entry point handling everything."""

    def __init__(self, width: int) -> None:
        self.width = width

    @fx.uses(temperature, steps)
    def forward(self, x: jax.Array) -> jax.Array:
        return layer_{i}(x) * self.width

    @property
    @fx.uses(temperature)
    def scale(self) -> jax.Array:
        return temperature.ask() * self.width

    @fx.uses()
    def run(self, x: jax.Array) -> jax.Array:
        with temperature.provide(jnp.float32({i})), steps.init(jnp.int32(0)):
            return self.forward(x) + self.scale


with temperature.provide(jnp.float32(0.5)):
    out_{i} = fast_{i}(jnp.ones(4))
    out_{i} = out_{i} + pure_{i}(jnp.ones(4)) + Model{i}(2).run(jnp.ones(4))
    with steps.init(jnp.int32(0)), noise.seed(0), losses.discard(), acts.ignore():
        out_{i} = out_{i} + fx.jit(noisy_{i})(jnp.ones(4)) + Model{i}(3).forward(out_{i})
'''

FOOTER = """

if __name__ == "__main__":
    with temperature.provide(jnp.float32(1.0)):
        print(fast_0(jnp.ones(4)))
    steps.get()  # the one effect left unhandled: the plugin reports it
"""


def effectful_module(lines: int = 400) -> str:
    """The generated module: the header, as many numbered blocks as make about
    `lines` lines, and the footer (deterministic)."""
    head, block, foot = (len(part.splitlines()) for part in (HEADER, BLOCK, FOOTER))
    blocks = max(1, round((lines - head - foot) / block))
    return HEADER + "".join(BLOCK.format(i=i) for i in range(blocks)) + FOOTER


# --- running mypy ---------------------------------------------------------------------


def configs(folder: Path) -> dict[str, Path]:
    """The plugin corpus's configuration, and the same without the plugin."""
    text = CONFIG.read_text()
    if not PLUGIN_LINE.search(text):
        raise SystemExit(f"{CONFIG} does not enable effax_stubs.mypy_plugin")
    paths = {"plugin": folder / "plugin.ini", "plain": folder / "plain.ini"}
    paths["plugin"].write_text(text)
    paths["plain"].write_text(PLUGIN_LINE.sub("", text))
    return paths


def mypy_command(python: Path, config: Path, cache: Path, files: list[Path]) -> list[str]:
    return [
        str(python),
        "-m",
        "mypy",
        "--config-file",
        str(config),
        "--cache-dir",
        str(cache),
        "--show-error-codes",
        "--no-error-summary",
        "--no-color-output",
        *map(str, files),
    ]


def run_mypy(
    python: Path, config: Path, cache: Path, files: list[Path]
) -> tuple[dict[str, float], str]:
    """One whole mypy process: ({"wall": s, "cpu": s}, its output). The CPU time
    (user + system, of the process and its children) is what the run cost the
    machine, whatever else runs on it. Errors in the checked files are expected
    (exit status 1); a crash (2) is not."""
    command = mypy_command(python, config, cache, files)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=False, env=bytecode_env(cache)
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mypy failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return {"wall": wall, "cpu": cpu}, done.stdout + done.stderr


def bytecode_env(cache: Path) -> dict[str, str]:
    """The environment mypy runs in: Python's bytecode cache on, as a user's Python
    writes it, kept in the work folder (a machine with ``PYTHONDONTWRITEBYTECODE``
    set would compile the plugin from source on every run: ~17 ms of a 0.35 s one)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache.parent / "pycache")}


def stamp() -> tuple[tuple[str, int, int], ...]:
    """The sources mypy reads from the working tree (a change: it checks them again)."""
    files = sorted(p for name in WATCHED for p in (ROOT / name).rglob("*.py*"))
    return tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.is_file())


def touch(files: list[Path], note: str) -> None:
    """Append a comment line: mypy checks the file again, nothing else changes."""
    for path in files:
        with path.open("a") as f:
            f.write(f"# {note}\n")


def _progress(samples: dict[str, dict[str, list[float]]], order: list[str]) -> str:
    return ", ".join(
        f"{c} {samples['cpu'][c][-1]:.2f} s CPU ({samples['wall'][c][-1]:.2f} s wall)"
        for c in order
    )


def measure(
    name: str,
    files: list[Path],
    python: Path,
    config: dict[str, Path],
    work: Path,
    *,
    cold: int,
    warm: int,
) -> dict[str, Any]:
    """Cold and warm samples (seconds) of each configuration on `files`, interleaved;
    the warm runs start from each configuration's last cold cache."""
    # samples[kind][metric][configuration]: seconds per run
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        kind: {metric: {c: [] for c in config} for metric in METRICS} for kind in ("cold", "warm")
    }
    outputs: dict[str, str] = {}
    caches = {c: work / f"cache-{name}-{c}" for c in config}
    discarded = 0
    order = list(config)
    for r in range(cold):
        for c in order if r % 2 == 0 else order[::-1]:
            shutil.rmtree(caches[c], ignore_errors=True)
            seconds, outputs[c] = run_mypy(python, config[c], caches[c], files)
            for metric in METRICS:
                samples["cold"][metric][c].append(seconds[metric])
        print(f"  {name} cold {r + 1}/{cold}: {_progress(samples['cold'], order)}")
    r = 0
    while r < warm:
        before = stamp()
        touch(files, f"warm run {r} {discarded}")
        times = {}
        for c in order if r % 2 == 0 else order[::-1]:
            times[c], outputs[c] = run_mypy(python, config[c], caches[c], files)
        if stamp() != before:  # the library changed under us: refill and run again
            discarded += 1
            if discarded > 2 * warm:
                raise RuntimeError("effax/ or effax_stubs/ keeps changing: no warm run possible")
            print(f"  {name} warm {r + 1}/{warm}: effax changed during the round, again")
            touch(files, "refill")
            for c in order:
                run_mypy(python, config[c], caches[c], files)
            continue
        for c in order:
            for metric in METRICS:
                samples["warm"][metric][c].append(times[c][metric])
        print(f"  {name} warm {r + 1}/{warm}: {_progress(samples['warm'], order)}")
        r += 1
    return {"samples": samples, "outputs": outputs, "caches": caches, "discarded": discarded}


# --- profiling ------------------------------------------------------------------------


def _in_plugin(func: tuple[str, int, str]) -> bool:
    return f"{os.sep}effax_stubs{os.sep}" in func[0]


def _label(func: tuple[str, int, str]) -> str:
    return f"{Path(func[0]).stem}.{func[2]}" if func[0] != "~" else func[2]


def profile(
    name: str, files: list[Path], python: Path, config: Path, cache: Path, out: Path
) -> dict[str, Any]:
    """One warm run with the plugin under cProfile: the time spent inside the plugin
    (entered from mypy, whatever it calls), per function, with call counts."""
    touch(files, "profiled run")
    prof = out / f"profile_{name}.prof"
    # not `-m cProfile -m mypy`: mypy ends with os._exit, before cProfile writes
    script = (
        "import cProfile, sys\n"
        "from mypy.main import main\n"
        f"cProfile.run('main(args=sys.argv[1:], clean_exit=True)', {str(prof)!r})\n"
    )
    python_, _, _, *rest = mypy_command(python, config, cache, files)
    command = [python_, "-c", script, *rest]
    start = time.perf_counter()
    subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, check=False, env=bytecode_env(cache)
    )
    wall = time.perf_counter() - start
    stats = pstats.Stats(str(prof))
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = stats.total_tt  # type: ignore[attr-defined]
    entries: dict[str, dict[str, float]] = {}  # plugin functions called from outside it
    inside = 0.0
    for func, (*_, callers) in raw.items():
        if not _in_plugin(func):
            continue
        for caller, (_, caller_calls, _, caller_cum) in callers.items():
            # a builtin (`any`, `all`) or an import called from the plugin's own code
            # is not an entry, but for the plugin's own import (by mypy)
            indirect = caller[0] == "~" or caller[0].startswith("<frozen")
            if not _in_plugin(caller) and (not indirect or func[0].endswith("mypy_plugin.py")):
                entry = entries.setdefault(_label(func), {"calls": 0, "seconds": 0.0})
                entry["calls"] += caller_calls
                entry["seconds"] += caller_cum
                inside += caller_cum
    own = sorted(
        (
            {"function": _label(f), "calls": v[1], "tottime": v[2], "cumtime": v[3]}
            for f, v in raw.items()
            if _in_plugin(f)
        ),
        key=lambda d: -d["cumtime"],
    )
    # what the plugin's code spends its time in (its own functions and what they call)
    called: dict[str, dict[str, float]] = {}
    for func, (*_, callers) in raw.items():
        from_plugin = [v for c, v in callers.items() if _in_plugin(c)]
        if from_plugin and not _in_plugin(func):
            entry = called.setdefault(_label(func), {"calls": 0, "seconds": 0.0})
            entry["calls"] += sum(v[1] for v in from_plugin)
            entry["seconds"] += sum(v[3] for v in from_plugin)
    return {
        "profile": str(prof),
        "wall_seconds_profiled": wall,
        "profiled_seconds": total,
        "plugin_seconds": inside,
        "plugin_share": inside / total if total else None,
        "entries": dict(sorted(entries.items(), key=lambda kv: -kv[1]["seconds"])),
        "functions": own[:40],
        "called_from_plugin": dict(sorted(called.items(), key=lambda kv: -kv[1]["seconds"])[:25]),
    }


def print_profile(name: str, p: dict[str, Any]) -> None:
    print(
        f"\n== profile of a warm run with the plugin, {name}: {p['plugin_seconds']:.3f} s "
        f"in the plugin of {p['profiled_seconds']:.3f} s profiled "
        f"({100 * p['plugin_share']:.1f}%; cProfile inflates the plugin's part)"
    )
    print("  entered from mypy (calls, seconds inclusive):")
    for label, e in list(p["entries"].items())[:12]:
        print(f"    {label:45s} {int(e['calls']):8d}  {e['seconds']:.3f}")
    print("  plugin functions by cumulative time (calls, own, cumulative):")
    for f in p["functions"][:20]:
        print(f"    {f['function']:45s} {f['calls']:8d}  {f['tottime']:.3f}  {f['cumtime']:.3f}")


# --- the benchmark --------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one cold and one warm run each")
    parser.add_argument("--cold", type=int, default=3, help="cold rounds (default 3)")
    parser.add_argument("--warm", type=int, default=5, help="warm rounds (default 5)")
    parser.add_argument(
        "--targets", nargs="+", choices=("module", "examples"), default=["module", "examples"]
    )
    parser.add_argument("--lines", type=int, default=400, help="the generated module's size")
    parser.add_argument("--python", type=Path, default=None, help="the interpreter running mypy")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--profile", action="store_true", help="also profile a warm run")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    cold, warm = (1, 1) if args.quick else (args.cold, args.warm)
    python = args.python or (DEFAULT_PYTHON if DEFAULT_PYTHON.exists() else Path(sys.executable))
    version = subprocess.run(
        [str(python), "-m", "mypy", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()

    work = Path(tempfile.mkdtemp(prefix="effax-bench-mypy-"))
    args.out.mkdir(parents=True, exist_ok=True)
    config = configs(work)
    targets: dict[str, list[Path]] = {}
    if "module" in args.targets:
        (work / "module").mkdir()
        module = work / "module" / "effectful.py"
        module.write_text(effectful_module(args.lines))
        targets["module"] = [module]
    if "examples" in args.targets:
        shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("out"))
        targets["examples"] = sorted((work / "examples").glob("*.py"))
    sizes = {n: sum(len(p.read_text().splitlines()) for p in fs) for n, fs in targets.items()}

    rows: list[dict[str, Any]] = []
    results: dict[str, Any] = {
        "meta": {
            "git": h.git_commit(*WATCHED),
            "mypy": version,
            "python": str(python),
            "config": str(CONFIG.relative_to(ROOT)),
            "quick": args.quick,
            "cold_rounds": cold,
            "warm_rounds": warm,
        },
        "commands": {},
        "targets": {},
    }
    print(f"{version}, {python}; work folder {work}")
    try:
        for name, files in targets.items():
            label = f"{name} ({len(files)} file{'s' * (len(files) > 1)}, {sizes[name]} lines)"
            print(f"\n{label}")
            m = measure(name, files, python, config, work, cold=cold, warm=warm)
            if name == "module":  # the plugin ran: it reports the one unhandled effect
                assert "[effax-unhandled]" in m["outputs"]["plugin"], m["outputs"]["plugin"]
                assert "[effax-" not in m["outputs"]["plain"], m["outputs"]["plain"]
            target: dict[str, Any] = {"files": len(files), "lines": sizes[name]}
            for kind in ("cold", "warm"):
                s, w = m["samples"][kind]["cpu"], m["samples"][kind]["wall"]
                discarded = m["discarded"] if kind == "warm" else 0
                rows.append(
                    h.row(
                        "mypy",
                        f"{label}, {kind}: mypy + plugin",
                        h.median(s["plugin"]),
                        unit="s CPU/run",
                        baseline="plain mypy",
                        baseline_value=h.median(s["plain"]),
                        ratio=h.paired_ratio(s["plugin"], s["plain"]),
                        target=TARGETS[kind],
                        notes=(
                            f"{len(s['plugin'])} rounds"
                            + (f" ({discarded} discarded)" if discarded else "")
                            + f"; wall {h.median(w['plugin']):.2f} s against "
                            f"{h.median(w['plain']):.2f} s, paired ratio "
                            f"{h.paired_ratio(w['plugin'], w['plain']):.3f}"
                        ),
                    )
                )
                target[kind] = {
                    "samples": m["samples"][kind],
                    "median": {
                        metric: {c: h.median(v) for c, v in m["samples"][kind][metric].items()}
                        for metric in METRICS
                    },
                    "paired_ratio": {
                        metric: h.paired_ratio(
                            m["samples"][kind][metric]["plugin"],
                            m["samples"][kind][metric]["plain"],
                        )
                        for metric in METRICS
                    },
                }
            target["reported_by_plugin"] = sorted(
                set(re.findall(r"\[(effax-[a-z-]+)\]", m["outputs"]["plugin"]))
            )
            if args.profile:
                target["profile"] = profile(
                    name, files, python, config["plugin"], m["caches"]["plugin"], args.out
                )
            results["targets"][name] = target
            results["commands"][name] = " ".join(
                mypy_command(python, config["plugin"], Path("<cache>"), [Path(f"<{name}>")])
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    h.print_rows(
        "mypy: with the effax plugin against plain mypy (median CPU s per run; ratio paired)",
        rows,
    )
    for name, target in results["targets"].items():
        if "profile" in target:
            print_profile(name, target["profile"])
    results["rows"] = rows
    (args.out / "mypy.json").write_text(json.dumps(results, indent=1))
    print(f"\nwritten: {args.out / 'mypy.json'}")
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
