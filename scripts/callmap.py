"""Call map: which effax modules a first and a warm ``effax.jit(f)(x)`` call pass through.

Run: .venvs/default/bin/python scripts/callmap.py [--tree PATH] [--json] [--warmup N]
     [--max-nesting N]

`--tree` is a source tree holding an ``effax/`` package (default: the repository
containing this script); it is put first on ``sys.path`` before anything imports
effax or JAX, and the script checks that effax was imported from it.

The measured function performs one traced `Ask`, one `State` update and one key
draw::

    def f(x):
        s.set(s.get() + 1)
        return x * a.ask() + jax.random.uniform(k.next_key())

under ``effax.handlers(a.provide(jnp.float32(2)), s.init(jnp.int32(0)),
k.seed(0))`` and 3 unrelated handlers (an `Ask`, a `State`, an `Emit`); with
``--intercept``, also ``effax.intercept(a, ask=lambda outer: 2 * outer.ask())``
inside them, and the call counts how often an interceptor's chain was resolved
(``chain resolutions``: calls of ``_intercept.chain_of``, or of
``Interceptor._reached`` in trees before issue 40, where "which handler does this
interceptor forward to" was asked from several modules). The
compiled function ``g = effax.jit(f)`` is made beforehand (not recorded); then
the script records ``g(x)`` (the first call), runs `--warmup` more calls
unrecorded, and records one more ``g(x)`` (the warm call).

While recording, ``sys.setprofile`` sees every Python 'call' event; those whose
code lies in the tree's ``effax/`` package are kept (generated code, whose file
is named like ``<effax.handle #N>``, counts as the module
``_warmpath(generated)``); frames of JAX, NumPy, the user function, ... are not
kept, but a call from effax into JAX that calls back into effax is kept (its
caller is shown as ``via jax``). Every kept event is an effax frame, so it runs
with an effax frame on the stack; its depth is counted in frames below the
outermost effax frame.

Output per recorded call: the events as ``module:function``, collapsed into
*stays* (a run of consecutive events in the same module; shown as
``module: fn1, fn2 x3, ...``, with the smallest depth in the stay and how it was
entered), the number of stays, of distinct modules, and the re-entries (stays -
distinct modules: how often a module is visited again after leaving it); and how
many times each handler's ``export()`` ran (profile events named ``export``
whose ``self`` is an ``effax.Handler``, counted per handler object; an
``export`` called inside an ``export`` of the same handler is not counted
again). ``--json`` prints the same as JSON, with every kept event.

``--max-nesting N`` keeps only the events with at most N effax frames among their
callers (0: the outermost effax frame), and every callback into effax from
outside it (from JAX, or the user function), before collapsing them into stays:
a coarser, top-level view. By default every effax call event is kept. The export counts always
cover every event.

Only the calling thread is profiled (``sys.setprofile``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

GENERATED = "_warmpath(generated)"
HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Event:
    module: str
    function: str
    depth: int  # frames below the outermost effax frame (0: the outermost itself)
    nesting: int  # effax frames among its callers (0: the outermost effax frame)
    via: str  # "effax" if called by an effax frame, else what called it ("jax", ...)


@dataclass
class Stay:
    module: str
    functions: list[str]
    depth: int  # the smallest depth of its events
    nesting: int  # the smallest nesting of its events
    entered_via: str  # `via` of its first event


@dataclass
class Recording:
    label: str
    events: list[Event] = field(default_factory=list)
    exports: Counter[int] = field(default_factory=Counter)


class Recorder:
    """A profile function keeping the 'call' events of the effax package in `pkg_dir`."""

    def __init__(self, pkg_dir: str, handler_type: type, user_file: str) -> None:
        self.prefix = os.path.join(pkg_dir, "")
        self.handler_type = handler_type
        self.user_file = user_file
        self._modules: dict[str, str | None] = {}
        self.current: Recording | None = None

    def module_of(self, filename: str) -> str | None:
        """The effax module a code file belongs to, or `None` outside effax."""
        try:
            return self._modules[filename]
        except KeyError:
            pass
        module: str | None = None
        if os.path.basename(filename).startswith("<effax"):
            module = GENERATED
        else:
            path = os.path.abspath(filename) if not filename.startswith("<") else filename
            if path.startswith(self.prefix):
                rel = os.path.splitext(path[len(self.prefix) :])[0]
                module = rel.replace(os.sep, ".")
        self._modules[filename] = module
        return module

    def outside(self, filename: str, code_name: str) -> str:
        """A short name for a non-effax caller."""
        if filename == self.user_file:
            return f"{os.path.basename(filename)}:{code_name}"
        parts = filename.replace(os.sep, "/").split("/")
        if "site-packages" in parts:
            i = parts.index("site-packages")
            if i + 1 < len(parts):
                return parts[i + 1].removesuffix(".py")
        return os.path.basename(filename) or filename

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.current is None:
            return
        code = frame.f_code
        module = self.module_of(code.co_filename)
        if module is None:
            return
        parent = frame.f_back
        if parent is None or self.module_of(parent.f_code.co_filename) is not None:
            via = "effax"
        else:
            via = self.outside(parent.f_code.co_filename, parent.f_code.co_name)
        depth, outermost, nesting, up = 0, 0, 0, parent
        while up is not None:
            depth += 1
            if self.module_of(up.f_code.co_filename) is not None:
                outermost = depth
                nesting += 1
            up = up.f_back
        self.current.events.append(Event(module, code.co_name, outermost, nesting, via))
        if code.co_name == "export":
            this = frame.f_locals.get("self")
            if isinstance(this, self.handler_type) and not _inside_export_of(parent, this):
                self.current.exports[id(this)] += 1


def _inside_export_of(frame: FrameType | None, handler: object) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "export" and frame.f_locals.get("self") is handler:
            return True
        frame = frame.f_back
    return False


def stays(events: list[Event]) -> list[Stay]:
    out: list[Stay] = []
    for e in events:
        if out and out[-1].module == e.module:
            out[-1].functions.append(e.function)
            out[-1].depth = min(out[-1].depth, e.depth)
            out[-1].nesting = min(out[-1].nesting, e.nesting)
        else:
            out.append(Stay(e.module, [e.function], e.depth, e.nesting, e.via))
    return out


def _runs(names: list[str]) -> str:
    """``a, a, b`` as ``a x2, b``."""
    parts: list[str] = []
    i = 0
    while i < len(names):
        j = i
        while j < len(names) and names[j] == names[i]:
            j += 1
        parts.append(names[i] if j - i == 1 else f"{names[i]} x{j - i}")
        i = j
    return ", ".join(parts)


def summary(rec: Recording, labels: dict[int, str], max_nesting: int | None) -> dict[str, Any]:
    """The stays of `rec`'s events (those at most `max_nesting` effax frames deep, and
    the callbacks into effax from outside it)."""
    events = [
        e for e in rec.events if max_nesting is None or e.nesting <= max_nesting or e.via != "effax"
    ]
    st = stays(events)
    modules = {s.module for s in st}
    visits = Counter(s.module for s in st)
    return {
        "label": rec.label,
        "events": len(rec.events),
        "max_nesting": max_nesting,
        "events_kept": len(events),
        "stays": [asdict(s) for s in st],
        "n_stays": len(st),
        "distinct_modules": len(modules),
        "re_entries": len(st) - len(modules),
        "visits_per_module": dict(visits.most_common()),
        "exports": {labels.get(k, f"handler@{k:#x}"): v for k, v in rec.exports.items()},
        "export_total": sum(rec.exports.values()),
        "chain_resolutions": sum(
            e.module == "_intercept" and e.function in _RESOLVERS for e in rec.events
        ),
        "steps": [asdict(e) for e in events],
    }


# what resolves an interceptor's chain: `chain_of` (issue 40), `_reached` before it
_RESOLVERS = ("chain_of", "_reached")


def print_summary(s: dict[str, Any]) -> None:
    kept = (
        ""
        if s["max_nesting"] is None
        else f", {s['events_kept']} with nesting <= {s['max_nesting']}"
    )
    print(f"== {s['label']}: {s['events']} effax call events{kept}")
    for i, stay in enumerate(s["stays"], 1):
        how = "" if stay["entered_via"] == "effax" else f"  [via {stay['entered_via']}]"
        print(
            f"{i:3d}. {stay['module']}: {_runs(stay['functions'])}"
            f"  (depth {stay['depth']}, nesting {stay['nesting']}){how}"
        )
    print(
        f"stays: {s['n_stays']}, distinct modules: {s['distinct_modules']}, "
        f"re-entries: {s['re_entries']}"
    )
    print("visits per module: " + ", ".join(f"{m} {n}" for m, n in s["visits_per_module"].items()))
    if s["exports"]:
        per = ", ".join(f"{k} {v}" for k, v in s["exports"].items())
        print(f"export() calls: {s['export_total']} ({per})")
    else:
        print("export() calls: 0")
    print(f"chain resolutions: {s['chain_resolutions']}")
    print()


def run(
    tree: str, warmup: int, max_nesting: int | None = None, intercept: bool = False
) -> dict[str, Any]:
    tree = os.path.abspath(tree)
    sys.path.insert(0, tree)
    import jax
    import jax.numpy as jnp

    import effax

    pkg_dir = os.path.dirname(os.path.abspath(effax.__file__))
    if pkg_dir != os.path.join(tree, "effax"):
        raise SystemExit(f"effax was imported from {pkg_dir}, not from {tree}")

    a = effax.Ask[jax.Array]("callmap.a")
    s = effax.State[jax.Array]("callmap.s")
    k = effax.RandomKey("callmap.k")

    def f(x: jax.Array) -> jax.Array:
        s.set(s.get() + 1)
        return x * a.ask() + jax.random.uniform(k.next_key())

    counter = s.init(jnp.int32(0))
    own: dict[str, effax.Handler[Any]] = {
        "a.provide": a.provide(jnp.float32(2)),
        "s.init": counter,
        "k.seed": k.seed(0),
    }
    unrelated: dict[str, effax.Handler[Any]] = {
        "unrelated Ask.provide": effax.Ask[int]("callmap.u_ask").provide(1),
        "unrelated State.init": effax.State[jax.Array]("callmap.u_state").init(jnp.zeros(3)),
        "unrelated Emit.collect": effax.Emit[int]("callmap.u_emit").collect(),
    }
    if intercept:
        own["intercept(a)"] = effax.intercept(a, ask=lambda outer: 2 * outer.ask())
    labels = {id(h): name for name, h in {**unrelated, **own}.items()}
    recorder = Recorder(pkg_dir, effax.Handler, os.path.abspath(__file__))
    g = effax.jit(f)
    x = jnp.float32(1.5)

    def recorded(label: str) -> Recording:
        rec = Recording(label)
        recorder.current = rec
        sys.setprofile(recorder.profile)
        try:
            y: jax.Array = g(x)
        finally:
            sys.setprofile(None)
            recorder.current = None
        y.block_until_ready()
        return rec

    with effax.handlers(*unrelated.values(), *own.values()):
        first = recorded("first call")
        for _ in range(warmup):
            g(x).block_until_ready()
        warm = recorded(f"warm call (call {warmup + 2})")
    return {
        "tree": tree,
        "effax": pkg_dir,
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "final_state": int(counter.value),
        "calls": [summary(first, labels, max_nesting), summary(warm, labels, max_nesting)],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=os.path.dirname(HERE), help="source tree with effax/")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--warmup", type=int, default=1, help="unrecorded calls between the first and the warm one"
    )
    parser.add_argument(
        "--max-nesting",
        type=int,
        default=None,
        help="keep only events with at most this many effax frames among their callers"
        " (and callbacks into effax from outside it)",
    )
    parser.add_argument(
        "--intercept", action="store_true", help="an interceptor of the Ask inside the handlers"
    )
    args = parser.parse_args(argv)
    results = run(args.tree, args.warmup, args.max_nesting, args.intercept)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"effax from {results['effax']} (python {results['python']}, jax {results['jax']})\n")
    for call in results["calls"]:
        print_summary(call)


if __name__ == "__main__":
    main()
