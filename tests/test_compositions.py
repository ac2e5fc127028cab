"""Composition fuzzer for transparency: random nestings of every wrapper, against an
independent Python reference.

Part of the test command: 500 programs on the default JAX (the `ci` profile of
`HYPOTHESIS_PROFILE`, which the test command sets), 100 on the other JAX lines
(`ci-small`).

Programs. A seeded generator (`random.Random`, one seed per program, so every CI run
checks the same programs) builds nestings, up to `MAX_DEPTH` = 4 wrappers deep, of
`fx.jit`, `fx.checkpoint`, `fx.scan`, `fx.fori_loop` (Python-int bounds and traced
bounds), `fx.while_loop` (trip count from the input), `fx.cond`, `fx.switch`,
`fx.vmap` (keys="split" and "shared"), `fx.grad`, `fx.value_and_grad`, `fx.map`
and interceptor regions (`fx.intercept` of the Ask, a State, the key stream and the
Emit around a body, at three levels that nest; the reference applies them by hand),
over bodies of leaf operations that map a float32 scalar `acc` to a new one: read
a traced Ask (`A`) and a static one (`STATIC`, used in Python `if`), read and
update two States (`S1` float32, `S2` uint32[2] xor-accumulating key bits), draw
keys from a `RandomKey` (`fx.random.uniform(stream=K)` and raw bits
`jax.random.key_data(K.next_key())`), emit to an `Emit` (`E`), tap `acc` at the
sites "t/a" and "t/b" of a `Tap` (`T`), read an entry of a `StateDict` (`D`,
`get(name, init=c)`, creating it on first use) and set an existing one; regions of
a `Scaled(E, k)`, an `fx.Interceptor` subclass with an `__init__(effect, k)` of
its own, multiply what is emitted under them by k. Each program picks the handler
of `T`: `record(*patterns)`, `replace(fn)`, `replace(mapping, where=...)` (rows
with a mask for "t/a", one value for "t/b") or `gradients(*patterns)`. Every body
also receives the program input `x0` (never differentiated), from which trip
counts, some predicates and switch indices are computed.

Runs. Each program is built once (its wrapped functions made once, as user code
makes them) and called twice, on inputs 0.7 and -1.1 (other trip counts and
branches) with fresh handlers (other Ask values, seeds and initial states; the
static value changes between the runs in some programs), first unwrapped (eager)
then under one outer `fx.jit` (the same inner wrapped functions). One of the two
modes (drawn per program) then makes a third run, on input 0.7, under a
*different* handler environment: fresh handlers plus an unused `RandomKey` (`K2`),
an unrelated `State` (`S3`) and an `fx.intercept` of E (`emit(v - 1)`), at other
positions of the stack, with the same already-built wrapped functions (the
pattern of a nested `fx.jit` traced under fewer handlers, called under more).
Outputs, final states, final key counters (`hs[K].counter`, and `K2`'s), emitted
values (`hs[E]`), `hs[T]`, the entries `hs[D]` and `hs[S3]` are compared with
`reference`, an interpreter of the same program description that
never calls effax: Python loops, `if` and `while`; vmap as a Python loop over
the elements with the documented key policy (keys="split": the stream draws one
key `Kb = fold_in(base, counter)` where the body draws from it anywhere (any
branch, any loop body), as effax and tests/test_properties.py do — and element b
uses a stream seeded with
`fold_in(Kb, b)`; keys="shared": every element draws the keys of the unbatched
program); keys computed by the reference itself as `fold_in(base_key, counter)`;
emits of a loop or a vmap stacked per site along a new leading axis; the
gradients of `fx.grad` / `fx.value_and_grad` taken by `jax.grad` (eagerly, Python
control flow included) over the reference's own evaluation of the body. Integers
and key bits must match exactly, floats to `RTOL` = 1e-5 (relative, with the same
absolute floor). A program the reference finds too close to a decision boundary
(a predicate or a switch index within `MARGIN` of flipping, where rounding could
pick the other branch) is replaced by the next one the generator draws. The
programs of shard 0 run under `jax.checking_leaks()` (the suite's autouse
fixture), the other shards without it (it bypasses the compile cache on jax 0.10);
an escaped tracer (`UnexpectedTracerError`) anywhere is a failure like any other.
JAX's key-reuse checker is off here (it rejects plain JAX's vmap of a cond with a
batched predicate that draws a key in one branch); the keys are compared bit for
bit with the reference's instead.

The reference's taps: a recorded site holds its value if tapped once, else every
value stacked along one leading axis in program order (Python loops; a vmap is a
tap of every element at once, its value stacked along the batch axis, after the
taps' axis; a cond records only the branch taken); `replace(fn)` applies
`replace_fn`; the mapping's tap k of "t/a" takes row k where the mask's row k is
true, and `hs[T]` counts the taps of each site (a vmap's tap once); under
`gradients`, the taps of an `fx.grad` body return `value + eps_k` and the gradient
of the body's result with respect to each `eps_k` is recorded (taps outside any
grad pass through). `D`'s entries are created by the first `get`, with its init,
and carried like a state; `K2` never advances (no body draws from it, so no
`vmap(keys="split")` splits it).

Semantics chosen where a combination is documented as an error (docs/howto/
control-flow.md, emit.md, vmap.md, docs/errors.md) — the generator avoids it:
no emit under `fx.while_loop` or traced-bound `fx.fori_loop` (EffectUsageError:
the trip count is not known; a traced-bound fori_loop whose bounds are concrete
eagerly is a scan there, so it would emit eagerly and raise compiled); no
`fx.while_loop` / traced-bound `fori_loop` under `fx.grad` (JAX cannot
reverse-differentiate a while loop); branches of `fx.cond` / `fx.switch` emit the
same structure (otherwise their emits are dropped: EffectUsageError); under
`fx.vmap` (state="shared", the default; state="batched" is not generated) no
state write that differs across the batch (no `S1.set(acc * c)`, no `S2` update
from split keys, no state write under a batched predicate), and under a batched
predicate whose innermost vmap shares keys, branches draw the same number of
keys. The untaken branch of a cond records nothing; a loop of no steps emits
nothing; `fx.map` bodies run at least once. Taps (docs/howto/taps.md): no
recorded site (record, or gradients under a grad) under `fx.while_loop` /
traced-bound `fori_loop` (EffectUsageError: the number of taps is not known);
no tap counted or recorded (record, gradients, the mapping of replace) under a
batched predicate (a branch taken by some elements only: "not one array per
tap"); under `gradients`, no recorded site under two grads or under a vmap inside
the grad (EffectUsageError naming `fx.vmap(fx.grad(f))`); the taps of one recorded
site all have one shape (the same enclosing vmap sizes; a rewrite that breaks
this redraws the program); the mapping has 64 rows (a program tapping "t/a" more
often is redrawn: a tap past the last row is an error). StateDict
(docs/howto/state.md): an entry is created only outside loop bodies and branches
(StateTypeError: a loop or branch cannot grow its carry); inside one, only
entries created before are read or set; under vmap (state="shared") only values
the same for every element are set, never under a batched predicate.

Size: `EFFAX_FUZZ_PROGRAMS` programs (default 500, 100 under ci-small; split over
`SHARDS` tests; the leak-checked shard gets a fiftieth), `EFFAX_FUZZ_SEED` (default 0) picks another
set, e.g. ``EFFAX_FUZZ_PROGRAMS=5000 EFFAX_FUZZ_SEED=1``. A failing test lists
every failing program (its seed and its nesting) and a count per distinct failure.
``python tests/test_compositions.py 123 --shrink`` re-checks program 123 and
shrinks it by hand-written rules.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import random
import re
import sys
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

SHARDS = 8
_DEFAULT_PROGRAMS = "100" if os.environ.get("HYPOTHESIS_PROFILE") == "ci-small" else "500"
PROGRAMS = int(os.environ.get("EFFAX_FUZZ_PROGRAMS", _DEFAULT_PROGRAMS))
BASE_SEED = int(os.environ.get("EFFAX_FUZZ_SEED", "0"))
MAX_DEPTH = 4
MAX_LEAVES = 6  # per program, so that a program compiles in about a second
RTOL = 1e-5
MARGIN = 1e-3
INPUTS = (0.7, -1.1, 0.7)  # run 2: the second handler environment

A = fx.Ask[jax.Array]("a")
STATIC = fx.Ask[int]("static", static=True)
S1 = fx.State[jax.Array]("s1")
S2 = fx.State[jax.Array]("s2")
K = fx.RandomKey("k")
E = fx.Emit[jax.Array]("e")
T = fx.Tap[jax.Array]("t")
D = fx.StateDict[jax.Array]("d")
# only in the second handler environment (run 2), never used by a program
K2 = fx.RandomKey("k2")
S3 = fx.State[jax.Array]("s3")

F32 = jnp.float32
COEFFICIENTS = (0.5, -1.0, 1.5)


def interceptors(n):
    """The interceptors (issue 25) of level `n` of A, S1, K and E; a program's
    ("intercept", n, body) installs them around its body. Nested regions take
    other levels (one interceptor object is installed once per chain)."""
    return (
        fx.intercept(A, ask=lambda outer: outer.ask() * 2 + n),
        fx.intercept(
            S1,
            get=lambda outer: outer.get() + 0.25 * (n + 1),
            set=lambda outer, v: outer.set(v * 0.5 - n),
        ),
        fx.intercept(K, next_key=lambda outer: jax.random.fold_in(outer.next_key(), n + 3)),
        fx.intercept(E, emit=lambda outer, v: outer.emit(v * 3 + n)),
    )


LEVELS = 3
INTERCEPTORS = [interceptors(n) for n in range(LEVELS)]


class Scaled(fx.Interceptor):
    """An interceptor subclass with a parameter of its own: emits `k * v` outside."""

    def __init__(self, effect, k):
        super().__init__(effect, ())
        self.k = k

    def emit(self, v):
        self.outer().emit(v * self.k)


SCALES = (2.0, -0.5)
SITES = ("t/a", "t/b")
TAP_MODES = ("record", "replace_fn", "replace_map", "gradients")
PATTERNS = ((), ("t/a",), ("*b",))
ROWS = 64  # the rows of the replacement of "t/a" under replace_map
REPLACE_ROWS = 0.125 * np.arange(ROWS, dtype=np.float32) - 1.0
REPLACE_WHERE = (np.arange(ROWS) % 3) != 1
REPLACE_B = np.float32(0.375)
NAMES = ("d/u", "d/v")


def replace_fn(site, value):
    """The rule of replace_fn (static, as `replace(fn)` is)."""
    return value * 0.5 + (0.25 if site == "t/a" else -0.5)


def matches(site, patterns):
    return not patterns or any(fnmatch.fnmatchcase(site, p) for p in patterns)


# --- programs -----------------------------------------------------------------------
# An op is a tuple: a leaf ("ask",), ("static",), ("get",), ("set", c), ("modify", c),
# ("uniform",), ("bits_state",), ("bits_emit",), ("emit",), or a wrapper:
# ("jit", body), ("checkpoint", body), ("grad", body), ("value_and_grad", body),
# ("scan", n, body), ("fori", n, body), ("map", n, body),
# ("fori_traced", (n_pos, n_neg), body), ("while", (n_pos, n_neg), body),
# ("cond", source, body_true, body_false), ("switch", source, (body, ...)),
# ("vmap", keys, size, body), ("intercept", level, body); a body is a tuple of ops;
# source is "acc" or "x0". Also the leaves ("tap", site), ("dget", name, c),
# ("dset", name, c) and the wrapper ("scaled", k, body) (a `Scaled` of E).

WRAPPERS = ("jit", "checkpoint", "grad", "value_and_grad", "scan", "fori", "map",
            "fori_traced", "while", "cond", "switch", "vmap", "intercept", "scaled")  # fmt: skip
BODIES = {"cond": (2, 3), "switch": (3, None)}  # ops holding several bodies


@dataclasses.dataclass(frozen=True)
class Context:
    """What the generator must avoid at a point of the program (see the docstring)."""

    no_emit: bool = False  # under a while_loop / traced-bound fori_loop
    under_grad: bool = False
    in_vmap: bool = False
    keys_batched: bool = False  # some enclosing vmap splits keys
    inner_keys: str | None = None  # the key policy of the innermost vmap
    batched_pred: bool = False  # under a cond/switch whose predicate is batched
    levels: tuple[int, ...] = ()  # the interceptor levels installed around it
    confined: bool = False  # in a loop body or a branch: no StateDict entry created
    grads: int = 0  # how many fx.grad / value_and_grad enclose it
    vmap_in_grad: bool = False  # a vmap between the innermost grad and here
    batch: tuple[int, ...] = ()  # the sizes of the enclosing vmaps


def bodies_of(op):
    kind = op[0]
    if kind == "cond":
        return [op[2], op[3]]
    if kind == "switch":
        return list(op[2])
    if kind in WRAPPERS:
        return [op[-1]]
    return []


def with_bodies(op, bodies):
    kind = op[0]
    if kind == "cond":
        return (*op[:2], bodies[0], bodies[1])
    if kind == "switch":
        return (*op[:2], tuple(bodies))
    return (*op[:-1], bodies[0])


def emit_signature(ops):
    """The (shape, dtype) of each value `ops` emits, in order (known statically)."""
    out = []
    for op in ops:
        kind = op[0]
        if kind == "emit":
            out.append(((), "float32"))
        elif kind == "bits_emit":
            out.append(((2,), "uint32"))
        elif kind in ("scan", "fori", "map"):
            if op[1]:
                out += [((op[1], *s), d) for s, d in emit_signature(op[2])]
        elif kind == "vmap":
            out += [((op[2], *s), d) for s, d in emit_signature(op[3])]
        elif kind in ("cond", "switch"):
            out += emit_signature(bodies_of(op)[0])
        elif kind in ("jit", "checkpoint", "grad", "value_and_grad"):
            out += emit_signature(op[1])
        elif kind in ("intercept", "scaled"):
            out += emit_signature(op[2])
    return out


def may_draw(ops):
    """Whether `ops` perform the key stream anywhere (in any branch or loop body,
    however many steps: a traced region sees them all)."""
    return any(
        op[0] in ("uniform", "bits_state", "bits_emit") or any(map(may_draw, bodies_of(op)))
        for op in ops
    )


def draws(ops):
    """How many keys `ops` draw, or None where it is not known statically."""
    total = 0
    for op in ops:
        kind = op[0]
        if kind in ("uniform", "bits_state", "bits_emit"):
            n = 1
        elif kind in ("scan", "fori", "map"):
            inner = draws(op[2])
            n = None if inner is None else op[1] * inner
        elif kind in ("fori_traced", "while"):
            inner = draws(op[2])
            n = 0 if inner == 0 else None
        elif kind in ("cond", "switch"):
            counts = {draws(b) for b in bodies_of(op)}
            n = counts.pop() if len(counts) == 1 else None
        elif kind == "vmap":
            n = int(may_draw(op[3])) if op[1] == "split" else draws(op[3])
        elif kind in ("jit", "checkpoint", "grad", "value_and_grad"):
            n = draws(op[1])
        elif kind in ("intercept", "scaled"):
            n = draws(op[2])
        else:
            n = 0
        if n is None:
            return None
        total += n
    return total


def strip_emits(ops):
    out = []
    for op in ops:
        if op[0] in ("emit", "bits_emit"):
            out.append(("ask",))
        elif bodies_of(op):
            out.append(with_bodies(op, [strip_emits(b) for b in bodies_of(op)]))
        else:
            out.append(op)
    return tuple(out)


class Generator:
    def __init__(self, rng, tap_mode="record", patterns=()):
        self.rng = rng
        self.leaves = 0
        self.tap_mode = tap_mode
        self.patterns = patterns
        self.created = set()  # StateDict entries that exist from here on, surely
        self.batches = {}  # record / gradients: the batch of each site's taps

    def body(self, ctx, depth, most=2):
        n = self.rng.randint(1, most)
        return tuple(self.op(ctx, depth) for _ in range(n))

    def tap_sites(self, ctx):
        """The sites a tap may use here (see the docstring's documented errors)."""
        mode = self.tap_mode
        if mode == "replace_fn":
            return SITES
        if ctx.batched_pred:  # taps counted or recorded per tap, not per element
            return ()
        if mode == "replace_map":
            return SITES
        unmatched = tuple(s for s in SITES if not matches(s, self.patterns))
        if mode == "gradients" and not ctx.grads:
            return SITES  # let through, nothing recorded
        if mode == "gradients" and (ctx.grads > 1 or ctx.vmap_in_grad):
            return unmatched
        if ctx.no_emit:  # no recorded value (or gradient) in a while_loop
            return unmatched
        # every tap of a recorded site has one shape (the batch of its vmaps)
        return unmatched + tuple(
            s for s in SITES if s not in unmatched and self.batches.get(s, ctx.batch) == ctx.batch
        )

    def leaf(self, ctx):
        rng = self.rng
        choices = ["ask", "static", "get", "uniform", "uniform"]
        writes = not ctx.batched_pred
        if writes:
            choices.append("modify")
            if not ctx.in_vmap:
                choices += ["set", "set"]
            if not ctx.keys_batched:
                choices.append("bits_state")
        if not ctx.no_emit:
            choices += ["emit", "emit", "bits_emit"]
        sites = self.tap_sites(ctx)
        if sites:
            choices += ["tap", "tap"]
        names = NAMES if not ctx.confined else tuple(sorted(self.created))
        if names:
            choices.append("dget")
            if writes and self.created:
                choices.append("dset")
        kind = rng.choice(choices)
        self.leaves += 1
        if kind in ("set", "modify"):
            return (kind, rng.choice(COEFFICIENTS))
        if kind == "tap":
            site = rng.choice(sites)
            if matches(site, self.patterns):
                self.batches.setdefault(site, ctx.batch)
            return (kind, site)
        if kind == "dget":
            name = rng.choice(names)
            self.created.add(name)
            return (kind, name, rng.choice(COEFFICIENTS))
        if kind == "dset":
            return (kind, rng.choice(sorted(self.created)), rng.choice(COEFFICIENTS))
        return (kind,)

    def op(self, ctx, depth):
        rng = self.rng
        if depth >= MAX_DEPTH or self.leaves >= MAX_LEAVES or rng.random() > 0.5:
            return self.leaf(ctx)
        kinds = [k for k in WRAPPERS if not (ctx.under_grad and k in ("while", "fori_traced"))]
        kind = rng.choice(kinds)
        d = depth + 1
        if kind in ("jit", "checkpoint"):
            return (kind, self.body(ctx, d))
        if kind == "scaled":
            return (kind, rng.choice(SCALES), self.body(ctx, d))
        if kind == "intercept":
            free = [n for n in range(LEVELS) if n not in ctx.levels]
            if not free:
                return self.leaf(ctx)
            level = rng.choice(free)
            return (
                kind,
                level,
                self.body(dataclasses.replace(ctx, levels=(*ctx.levels, level)), d),
            )
        if kind in ("grad", "value_and_grad"):
            inner = dataclasses.replace(
                ctx, under_grad=True, grads=ctx.grads + 1, vmap_in_grad=False
            )
            return (kind, self.body(inner, d))
        looped = dataclasses.replace(ctx, confined=True)
        if kind in ("scan", "fori"):
            return (kind, rng.randint(0, 3), self.body(looped, d))
        if kind == "map":
            return (kind, rng.randint(1, 3), self.body(looped, d))
        if kind in ("fori_traced", "while"):
            trips = (rng.randint(0, 3), rng.randint(0, 3))
            return (kind, trips, self.body(dataclasses.replace(looped, no_emit=True), d))
        if kind == "vmap":
            keys = rng.choice(["split", "shared"])
            inner = dataclasses.replace(
                ctx,
                in_vmap=True,
                keys_batched=ctx.keys_batched or keys == "split",
                inner_keys=keys,
                # an outer batched predicate still selects what the inner vmap
                # writes to the states it shares
                batched_pred=ctx.batched_pred,
                vmap_in_grad=ctx.grads > 0,
            )
            size = rng.randint(1, 3)
            inner = dataclasses.replace(inner, batch=(*ctx.batch, size))
            return (kind, keys, size, self.body(inner, d))
        # cond / switch
        source = rng.choice(["acc", "x0"])
        batched = ctx.batched_pred or (ctx.in_vmap and source == "acc")
        inner = dataclasses.replace(ctx, batched_pred=batched, confined=True)
        count = 2 if kind == "cond" else rng.randint(1, 3)
        branches = [self.body(inner, d, most=1 if count > 2 else 2) for _ in range(count)]
        if len({tuple(emit_signature(b)) for b in branches}) > 1 or rng.random() < 0.2:
            branches = [strip_emits(b) for b in branches]
        if (batched and ctx.inner_keys == "shared") and (
            len({draws(b) for b in branches}) > 1 or draws(branches[0]) is None
        ):
            branches = [strip_keys(b) for b in branches]
        if kind == "cond":
            return (kind, source, branches[0], branches[1])
        return (kind, source, tuple(branches))


def strip_keys(ops):
    """`ops` without key draws (and without vmaps, which draw keys when they split)."""
    out = []
    for op in ops:
        if op[0] in ("uniform", "bits_state", "bits_emit"):
            out.append(("get",))
        elif op[0] == "vmap":
            out.append(("jit", strip_keys(op[3])))
        elif bodies_of(op):
            out.append(with_bodies(op, [strip_keys(b) for b in bodies_of(op)]))
        else:
            out.append(op)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Program:
    ops: tuple
    statics: tuple[int, int]  # the static Ask's value in each run
    tap_mode: str = "record"  # the handler of T: one of TAP_MODES
    patterns: tuple[str, ...] = ()  # of record / gradients
    again: str = "jit"  # the mode ("eager" or "jit") that also makes run 2

    def __str__(self):
        taps = f"{self.tap_mode}{list(self.patterns) if self.patterns else ''}"
        return f"{show(self.ops)}  statics={self.statics} taps={taps}"


def generate(index, base_seed=BASE_SEED):
    rng = random.Random(f"effax-compositions:{base_seed}:{index}")
    tap_mode = rng.choice(TAP_MODES)
    patterns = rng.choice(PATTERNS) if tap_mode in ("record", "gradients") else ()
    gen = Generator(rng, tap_mode, patterns)
    ops = gen.body(Context(), 0, most=3)
    statics = rng.choice([(1, 1), (1, 2), (2, 2)])
    again = rng.choice(["eager", "jit"])
    return Program(ops, statics, tap_mode, patterns, again), rng


def show(ops):
    parts = []
    for op in ops:
        kind = op[0]
        if kind in ("set", "modify"):
            parts.append(f"{kind}({op[1]})")
        elif kind in ("jit", "checkpoint", "grad", "value_and_grad"):
            parts.append(f"{kind}[{show(op[1])}]")
        elif kind in ("scan", "fori", "map"):
            parts.append(f"{kind}({op[1]})[{show(op[2])}]")
        elif kind in ("fori_traced", "while"):
            parts.append(f"{kind}{op[1]}[{show(op[2])}]")
        elif kind == "cond":
            parts.append(f"cond({op[1]})[{show(op[2])} | {show(op[3])}]")
        elif kind == "switch":
            parts.append(f"switch({op[1]})[{' | '.join(show(b) for b in op[2])}]")
        elif kind == "vmap":
            parts.append(f"vmap({op[1]},{op[2]})[{show(op[3])}]")
        elif kind == "intercept":
            parts.append(f"intercept{op[1]}[{show(op[2])}]")
        elif kind == "scaled":
            parts.append(f"scaled({op[1]})[{show(op[2])}]")
        elif kind == "tap":
            parts.append(f"tap({op[1]})")
        elif kind in ("dget", "dset"):
            parts.append(f"{kind}({op[1]},{op[2]})")
        else:
            parts.append(kind)
    return ", ".join(parts)


# --- the program under effax ---------------------------------------------------------


def switch_index(acc, n):
    return jnp.clip(jnp.floor(acc + 1.0), 0, n - 1).astype(jnp.int32)


def build(ops):
    """`ops` as a function `(acc, x0) -> acc` of effax wrappers, each made once."""
    steps = [build_op(op) for op in ops]

    def run(acc, x0):
        for step in steps:
            acc = step(acc, x0)
        return acc

    return run


def build_op(op):
    kind = op[0]
    if kind == "ask":
        return lambda acc, x0: acc * A.ask() + 0.25
    if kind == "static":

        def static(acc, x0):
            s = STATIC.ask()
            acc = acc + 0.125 * s
            return -acc if s > 1 else acc

        return static
    if kind == "get":
        return lambda acc, x0: jnp.sin(acc) + S1.get()
    if kind == "set":
        return lambda acc, x0, c=op[1]: (S1.set(acc * c), acc)[1]
    if kind == "modify":
        return lambda acc, x0, c=op[1]: (S1.modify(lambda s: 0.5 * s + c), acc)[1]
    if kind == "uniform":
        return lambda acc, x0: acc + fx.random.uniform(stream=K)
    if kind == "bits_state":

        def bits_state(acc, x0):
            bits = jax.random.key_data(K.next_key())
            S2.set(S2.get() ^ bits)
            return acc

        return bits_state
    if kind == "bits_emit":
        return lambda acc, x0: (E.emit(jax.random.key_data(K.next_key())), acc)[1]
    if kind == "emit":
        return lambda acc, x0: (E.emit(acc), acc)[1]
    if kind == "tap":
        return lambda acc, x0, site=op[1]: T.tap(site, acc)
    if kind == "dget":
        return lambda acc, x0, name=op[1], c=op[2]: acc + 0.5 * D.get(name, init=F32(c))
    if kind == "dset":
        return lambda acc, x0, name=op[1], c=op[2]: (D.set(name, 0.5 * D.get(name) + c), acc)[1]
    if kind == "scaled":
        scaled, body = Scaled(E, op[1]), build(op[2])  # made once, as user code would

        def scaled_region(acc, x0):
            with scaled:
                return body(acc, x0)

        return scaled_region
    if kind in ("jit", "checkpoint"):
        return (fx.jit if kind == "jit" else fx.checkpoint)(build(op[1]))
    if kind == "grad":
        g = fx.grad(build(op[1]))
        return lambda acc, x0: acc + 0.5 * g(acc, x0)
    if kind == "value_and_grad":
        vg = fx.value_and_grad(build(op[1]))

        def value_and_grad(acc, x0):
            v, g = vg(acc, x0)
            return v + 0.5 * g

        return value_and_grad
    if kind == "scan":
        n, body = op[1], build(op[2])

        def step(carry, xi):
            c, x0 = carry
            c = body(c + 0.125 * xi, x0)
            return (c, x0), c

        def scan(acc, x0):
            (final, _), ys = fx.scan(step, (acc, x0), jnp.arange(n, dtype=F32))
            return final + 0.25 * jnp.sum(ys)

        return scan
    if kind == "fori":
        n, body = op[1], build(op[2])

        def fori_body(i, carry):
            c, x0 = carry
            return body(c + 0.125 * i, x0), x0

        return lambda acc, x0: fx.fori_loop(0, n, fori_body, (acc, x0))[0]
    if kind == "map":
        n, body = op[1], build(op[2])
        mapped = lambda t: body(t[0], t[1])

        def map_(acc, x0):
            xs = (acc + 0.25 * jnp.arange(n, dtype=F32), jnp.broadcast_to(x0, (n,)))
            return 0.5 * acc + 0.25 * jnp.sum(fx.map(mapped, xs))

        return map_
    if kind == "fori_traced":
        (pos, neg), body = op[1], build(op[2])

        def fori_body_traced(i, carry):
            c, x0 = carry
            return body(c + 0.125 * i, x0), x0

        def fori_traced(acc, x0):
            upper = jnp.where(x0 > 0, pos, neg)
            return fx.fori_loop(0, upper, fori_body_traced, (acc, x0))[0]

        return fori_traced
    if kind == "while":
        (pos, neg), body = op[1], build(op[2])

        def cond_fun(s):
            i, _, x0 = s
            return i.astype(F32) + 0.1 * A.ask() < jnp.where(x0 > 0, pos, neg)

        def body_fun(s):
            i, c, x0 = s
            return i + 1, body(c, x0), x0

        return lambda acc, x0: fx.while_loop(cond_fun, body_fun, (jnp.int32(0), acc, x0))[1]
    if kind == "cond":
        source, yes, no = op[1], build(op[2]), build(op[3])

        def cond(acc, x0):
            return fx.cond((acc if source == "acc" else x0) > 0, yes, no, acc, x0)

        return cond
    if kind == "switch":
        source, branches = op[1], [build(b) for b in op[2]]
        n = len(branches)

        def switch(acc, x0):
            index = switch_index(acc, n) if source == "acc" else jnp.where(x0 > 0, n - 1, 0)
            return fx.switch(index, branches, acc, x0)

        return switch
    if kind == "intercept":
        around, body = INTERCEPTORS[op[1]], build(op[2])

        def intercepted(acc, x0):
            with fx.handlers(*around):
                return body(acc, x0)

        return intercepted
    if kind == "vmap":
        keys, size = op[1], op[2]
        batched = fx.vmap(build(op[3]), in_axes=(0, None), keys=keys)
        return lambda acc, x0: jnp.mean(batched(acc + 0.5 * jnp.arange(size, dtype=F32), x0))
    raise AssertionError(op)


# --- the reference: plain Python, no effax -------------------------------------------


class Ambiguous(Exception):
    """A decision within MARGIN of its boundary: rounding could flip it."""


class Avoided(Exception):
    """A shape the generator avoids that a rewrite (strip_keys, shrinking) made:
    the taps of one recorded site of different shapes."""


class ReferenceError_(Exception):
    """The reference found the program outside what the generator promises."""


@dataclasses.dataclass
class Env:
    a: jax.Array
    static: int
    s1: jax.Array
    s2: jax.Array
    base: jax.Array
    counter: int
    emits: list
    # the interceptors installed, outermost first: an int n is the level n of
    # `interceptors(n)`, a float k a `Scaled(E, k)`, "shift" the extra interceptor
    # of E of the second handler environment (`emit(v - 1)`)
    levels: tuple = ()
    tap_mode: str = "record"
    patterns: tuple[str, ...] = ()
    taps: list = dataclasses.field(default_factory=list)  # (site, value), in order
    tap_count: int = 0  # replace_map: the taps of "t/a" so far
    tap_count_b: int = 0  # replace_map: the taps of "t/b" so far
    eps: dict | None = None  # gradients: the perturbations of the innermost grad
    d: dict = dataclasses.field(default_factory=dict)  # the StateDict's entries
    confined: bool = False  # in a loop body or a branch
    # run 2: the counter of the stream K2 the program never draws from (no vmap
    # splits it: a batched region splits only the streams its body draws from)
    k2: int | None = None

    def copy(self, **changes):
        return dataclasses.replace(self, **{"emits": [], "taps": [], **changes})

    @property
    def numbered(self):
        return [n for n in self.levels if isinstance(n, int)]

    # The operations through the interceptors: the innermost sees an operation
    # first; what it forwards (a read's value, a key) comes back through the
    # outer ones first.
    def ask(self):
        value = self.a
        for n in self.numbered:
            value = value * 2 + n
        return value

    def get(self):
        value = self.s1
        for n in self.numbered:
            value = value + 0.25 * (n + 1)
        return value

    def set(self, value):
        for n in reversed(self.numbered):
            value = value * 0.5 - n
        self.s1 = value

    def emit(self, value):
        for n in reversed(self.levels):
            if n == "shift":
                value = value - 1.0
            elif isinstance(n, float):
                value = value * n
            else:
                value = value * 3 + n
        self.emits.append(value)

    def draw(self, *, raw=False):
        """The next key; `raw`: the stream's own (a vmap's split key, which the
        stream draws itself, not through its interceptors)."""
        key = jax.random.fold_in(self.base, self.counter)
        self.counter += 1
        for n in () if raw else self.numbered:
            key = jax.random.fold_in(key, n + 3)
        return key

    def tap(self, site, value):
        mode, matched = self.tap_mode, matches(site, self.patterns)
        if mode == "record":
            if matched:
                self.taps.append((site, value))
            return value
        if mode == "replace_fn":
            return replace_fn(site, value)
        if mode == "replace_map":
            if site == "t/b":
                self.tap_count_b += 1
                return jnp.broadcast_to(REPLACE_B, jnp.shape(value)).astype(F32)
            k = self.tap_count
            self.tap_count += 1
            if k >= ROWS:
                raise Ambiguous(f"{k} taps of t/a")
            return jnp.where(REPLACE_WHERE[k], REPLACE_ROWS[k], value)
        # gradients: under a grad, the tap returns value + eps (see reference_op)
        if self.eps is None or not matched:
            return value
        k = len(self.eps["sites"])
        self.eps["sites"].append(site)
        values = self.eps["values"]
        return value if values is None else value + values[k]

    def dict_get(self, name, init):
        if name not in self.d:
            if self.confined:
                raise ReferenceError_(f"StateDict entry {name} created in a loop or branch")
            self.d = {**self.d, name: F32(init)}
        return self.d[name]

    def dict_set(self, name, value):
        if name not in self.d:
            raise ReferenceError_(f"StateDict entry {name} set before it exists")
        self.d = {**self.d, name: value}


def decide(value, boundary=0.0):
    if bool(jnp.abs(value - boundary) < MARGIN):
        raise Ambiguous(value)


def reference(ops, acc, x0, env):
    for op in ops:
        acc = reference_op(op, acc, x0, env)
    return acc


def stack_sites(per_step, env, what):
    """Append each emit site's values, stacked along a new leading axis."""
    if not per_step:
        return
    sites = len(per_step[0])
    if any(len(values) != sites for values in per_step):
        raise ReferenceError_(f"{what}: steps emitted different numbers of values")
    for site in range(sites):
        env.emits.append(jnp.stack([values[site] for values in per_step]))


def reference_loop(body, acc, x0, env, n, shift):
    per_step = []
    ys = []
    outer = env.emits
    for i in range(n):
        env.emits = []
        acc = reference(body, acc + shift(i), x0, env)
        per_step.append(env.emits)
        ys.append(acc)
    env.emits = outer
    stack_sites(per_step, env, "loop")
    return acc, ys


CONFINING = ("scan", "fori", "map", "fori_traced", "while", "cond", "switch")


def reference_op(op, acc, x0, env):
    if op[0] not in CONFINING:
        return reference_step(op, acc, x0, env)
    outer = env.confined
    env.confined = True
    try:
        return reference_step(op, acc, x0, env)
    finally:
        env.confined = outer


def reference_step(op, acc, x0, env):
    kind = op[0]
    if kind == "ask":
        return acc * env.ask() + 0.25
    if kind == "static":
        acc = acc + 0.125 * env.static
        return -acc if env.static > 1 else acc
    if kind == "get":
        return jnp.sin(acc) + env.get()
    if kind == "set":
        env.set(acc * op[1])
        return acc
    if kind == "modify":  # through interceptors: their get, then their set
        env.set(0.5 * env.get() + op[1])
        return acc
    if kind == "uniform":
        return acc + jax.random.uniform(env.draw())
    if kind == "bits_state":
        env.s2 = env.s2 ^ jax.random.key_data(env.draw())
        return acc
    if kind == "bits_emit":
        env.emit(jax.random.key_data(env.draw()))
        return acc
    if kind == "emit":
        env.emit(acc)
        return acc
    if kind == "tap":
        return env.tap(op[1], acc)
    if kind == "dget":
        return acc + 0.5 * env.dict_get(op[1], op[2])
    if kind == "dset":
        env.dict_set(op[1], 0.5 * env.dict_get(op[1], None) + op[2])
        return acc
    if kind in ("scaled", "intercept"):
        outer = env.levels
        env.levels = (*outer, op[1])
        try:
            return reference(op[2], acc, x0, env)
        finally:
            env.levels = outer
    if kind in ("jit", "checkpoint"):
        return reference(op[1], acc, x0, env)
    if kind in ("grad", "value_and_grad"):
        body = op[1]
        side = {}
        gradients = env.tap_mode == "gradients"

        def fun(a, eps):
            # gradients: the taps of this grad return value + eps[k] (the innermost
            # grad answers them; the generator puts none under two grads)
            sites = []
            inner = env.copy(eps={"sites": sites, "values": eps} if gradients else None)
            out = reference(body, a, x0, inner)
            counts = (inner.tap_count, inner.tap_count_b)
            side.update(counter=inner.counter, sites=sites, counts=counts, k2=inner.k2)
            return out, (inner.s1, inner.s2, inner.emits, inner.taps, inner.d)

        if gradients:  # count the taps first, as fx.grad sizes its perturbations
            fun(acc, None)
            eps = [F32(0)] * len(side["sites"])
        else:
            eps = []
        (value, aux), (g, g_eps) = jax.value_and_grad(fun, argnums=(0, 1), has_aux=True)(acc, eps)
        env.s1, env.s2, env.d = aux[0], aux[1], aux[4]
        env.counter, env.k2 = side["counter"], side["k2"]
        env.tap_count, env.tap_count_b = side["counts"]
        env.emits.extend(aux[2])
        env.taps.extend(aux[3])
        env.taps.extend(zip(side["sites"], g_eps, strict=True))
        return (acc if kind == "grad" else value) + 0.5 * g
    if kind == "scan":
        final, ys = reference_loop(op[2], acc, x0, env, op[1], lambda i: 0.125 * F32(i))
        return final + 0.25 * (jnp.sum(jnp.stack(ys)) if ys else F32(0))
    if kind == "fori":
        return reference_loop(op[2], acc, x0, env, op[1], lambda i: 0.125 * i)[0]
    if kind == "map":
        n, body = op[1], op[2]
        xs = acc + 0.25 * jnp.arange(n, dtype=F32)
        per_step, ys = [], []
        outer = env.emits
        for i in range(n):
            env.emits = []
            ys.append(reference(body, xs[i], x0, env))
            per_step.append(env.emits)
        env.emits = outer
        stack_sites(per_step, env, "map")
        return 0.5 * acc + 0.25 * jnp.sum(jnp.stack(ys))
    if kind == "fori_traced":
        (pos, neg), body = op[1], op[2]
        n = pos if x0 > 0 else neg
        before = len(env.emits)
        acc = reference_loop(body, acc, x0, env, n, lambda i: 0.125 * i)[0]
        if len(env.emits) != before:
            raise ReferenceError_("emit under a traced-bound fori_loop")
        return acc
    if kind == "while":
        (pos, neg), body = op[1], op[2]
        limit = pos if x0 > 0 else neg
        i = 0
        before = len(env.emits)
        while float(i) + 0.1 * float(env.ask()) < limit:
            acc = reference(body, acc, x0, env)
            i += 1
        if len(env.emits) != before:
            raise ReferenceError_("emit under a while_loop")
        return acc
    if kind == "cond":
        source = op[1]
        if source == "acc":
            decide(acc)
            taken = bool(acc > 0)
        else:
            taken = bool(x0 > 0)
        return reference(op[2] if taken else op[3], acc, x0, env)
    if kind == "switch":
        source, branches = op[1], op[2]
        n = len(branches)
        if source == "acc":
            for boundary in range(1, n):
                decide(acc + 1.0, float(boundary))
            # clip(floor(acc + 1), 0, n - 1), by comparisons (int() fails under jax.grad)
            index = sum(bool(acc + 1.0 >= b) for b in range(1, n))
        else:
            index = n - 1 if x0 > 0 else 0
        return reference(branches[index], acc, x0, env)
    if kind == "vmap":
        keys, size, body = op[1], op[2], op[3]
        xs = acc + 0.5 * jnp.arange(size, dtype=F32)
        # a stream the body never draws from is not split (K2 never is)
        split = env.draw(raw=True) if keys == "split" and may_draw(body) else None
        elements = []
        ys = []
        for b in range(size):
            if split is not None:
                k2 = None if env.k2 is None else 0
                element = env.copy(base=jax.random.fold_in(split, b), counter=0, k2=k2)
            else:
                element = env.copy()
            ys.append(reference(body, xs[b], x0, element))
            elements.append(element)
        first = elements[0]
        for element in elements[1:]:
            same = bool(jnp.all(element.s1 == first.s1)) and bool(jnp.all(element.s2 == first.s2))
            same = same and element.d.keys() == first.d.keys()
            same = same and all(bool(element.d[n] == first.d[n]) for n in first.d)
            counts = (element.tap_count, element.tap_count_b)
            same = same and counts == (first.tap_count, first.tap_count_b)
            if not same or (split is None and element.counter != first.counter):
                raise ReferenceError_("vmap elements ended with different shared state")
        env.s1, env.s2, env.d = first.s1, first.s2, first.d
        env.tap_count, env.tap_count_b = first.tap_count, first.tap_count_b
        if split is None:
            if any(e.k2 != first.k2 for e in elements):
                raise ReferenceError_("vmap elements split k2 differently")
            env.counter, env.k2 = first.counter, first.k2
        stack_sites([e.emits for e in elements], env, "vmap")
        # each tap's value carries the batch axis (a tap of every element at once)
        if any([s for s, _ in e.taps] != [s for s, _ in first.taps] for e in elements):
            raise ReferenceError_("vmap elements tapped different sites")
        for k, (site, _) in enumerate(first.taps):
            env.taps.append((site, jnp.stack([e.taps[k][1] for e in elements])))
        return jnp.mean(jnp.stack(ys))
    raise AssertionError(op)


# --- running and comparing ------------------------------------------------------------


# per run: the Ask's value, S1's and S2's initial values, the stream's seed
ASKED = (0.5, 0.75, 0.625)
S1_INIT = (1.0, -0.5, 0.25)
S2_INIT = ((0, 0), (7, 1 << 31), (3, 5))
SEEDS = (0, 1, 2)
RUNS = 3
S3_INIT = 3.0


def static_of(run, statics):
    return statics[run if run < 2 else 0]


def tap_handler(program):
    mode = program.tap_mode
    if mode == "record":
        return T.record(*program.patterns)
    if mode == "gradients":
        return T.gradients(*program.patterns)
    if mode == "replace_fn":
        return T.replace(replace_fn)
    rows = {"t/a": jnp.asarray(REPLACE_ROWS), "t/b": jnp.asarray(REPLACE_B)}
    return T.replace(rows, where={"t/a": jnp.asarray(REPLACE_WHERE)})


def handlers_of(run, program):
    """Fresh handlers for `run`; run 2 (the second handler environment, after runs
    0 and 1 of the same wrapped functions) adds an unused key stream, an unrelated
    State and an interceptor of E, at other positions of the stack."""
    core = [
        A.provide(F32(ASKED[run])),
        STATIC.provide(static_of(run, program.statics)),
        S1.init(F32(S1_INIT[run])),
        S2.init(jnp.array(S2_INIT[run], jnp.uint32)),
        K.seed(SEEDS[run]),
        E.collect(),
        tap_handler(program),
        D.init(),
    ]
    if run < 2:
        return tuple(core)
    shift = fx.intercept(E, emit=lambda outer, v: outer.emit(v - 1.0))
    return (K2.seed(5), *core[:2], S3.init(F32(S3_INIT)), *core[2:], shift)


def expected(program, run):
    s2 = jnp.array(S2_INIT[run], jnp.uint32)
    base = jax.random.key(SEEDS[run])
    static = static_of(run, program.statics)
    env = Env(F32(ASKED[run]), static, F32(S1_INIT[run]), s2, base, 0, [])
    env.levels = ("shift",) if run == 2 else ()
    env.k2 = 0 if run == 2 else None
    env.tap_mode, env.patterns = program.tap_mode, program.patterns
    x0 = F32(INPUTS[run])
    out = reference(program.ops, x0, x0, env)
    if program.tap_mode in ("record", "gradients"):
        taps = {}
        for site, value in env.taps:
            taps.setdefault(site, []).append(value)
        if any(len({jnp.shape(x) for x in v}) > 1 for v in taps.values()):
            raise Avoided("taps of one site with different shapes")
        taps = {s: v[0] if len(v) == 1 else jnp.stack(v) for s, v in taps.items()}
    elif program.tap_mode == "replace_map":
        taps = {"t/a": np.int32(env.tap_count), "t/b": np.int32(env.tap_count_b)}
    else:
        taps = {}
    return {
        "out": out,
        "s1": env.s1,
        "s2": env.s2,
        "counter": env.counter,
        "emits": env.emits,
        "taps": taps,
        "d": env.d,
        "extra": (env.k2, F32(S3_INIT)) if run == 2 else None,
    }


def observed(fn, program, run):
    with fx.handlers(*handlers_of(run, program)) as hs:
        x0 = F32(INPUTS[run])
        out = fn(x0, x0)
    counter = hs[K].counter
    taps = hs[T]
    if program.tap_mode == "replace_map":
        taps = {s: np.int32(taps.get(s, 0)) for s in SITES}
    extra = None
    if run == 2:
        extra = (int(np.asarray(hs[K2].counter).astype(np.uint32)), hs[S3])
    return {
        "out": out,
        "s1": hs[S1],
        "s2": hs[S2],
        "counter": int(np.asarray(counter).astype(np.uint32)),
        "emits": list(hs[E]),
        "taps": dict(taps),
        "d": dict(hs[D]),
        "extra": extra,
    }


def compare(ours, theirs):
    """None if `ours` matches `theirs`, else what differs."""
    if ours["counter"] != theirs["counter"]:
        return f"key counter {ours['counter']} != {theirs['counter']}"
    if len(ours["emits"]) != len(theirs["emits"]):
        return f"{len(ours['emits'])} emits != {len(theirs['emits'])}"
    for name in ("taps", "d"):
        if sorted(ours[name]) != sorted(theirs[name]):
            return f"{name}: sites {sorted(ours[name])} != {sorted(theirs[name])}"
    for name in ("out", "s1", "s2", "emits", "taps", "d", "extra"):
        left, right = ours[name], theirs[name]
        if name in ("taps", "d"):
            keys = sorted(right)
            left, right = [left[k] for k in keys], [right[k] for k in keys]
            labels = [f"{name}[{k}]" for k in keys]
        elif name == "extra":
            left, right = ([left[1]], [right[1]]) if right is not None else ([], [])
            labels = ["state s3"]
        elif name == "emits":
            labels = [f"emit {i}" for i in range(len(left))]
        else:
            left, right, labels = [left], [right], [name]
        for where, x, y in zip(labels, left, right, strict=False):
            x, y = np.asarray(x), np.asarray(y)
            if x.shape != y.shape or x.dtype != y.dtype:
                return f"{where}: {x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}"
            if np.issubdtype(x.dtype, np.floating):
                if not np.allclose(x, y, rtol=RTOL, atol=RTOL, equal_nan=True):
                    return f"{where}: {x.tolist()} != {y.tolist()}"
            elif not np.array_equal(x, y):
                return f"{where}: {x.tolist()} != {y.tolist()} (exact)"
    # last, so that another mismatch of the same run is reported first
    if (ours["extra"] is None) != (theirs["extra"] is None) or (
        ours["extra"] is not None and ours["extra"][0] != theirs["extra"][0]
    ):
        return f"unused stream k2: {ours['extra']} != {theirs['extra']}"
    return None


@dataclasses.dataclass
class Failure:
    index: int
    program: Program
    mode: str
    run: int
    what: str  # the mismatch, or the exception
    kind: str  # what groups failures: the exception type and message, numbers elided

    def __str__(self):
        return (
            f"#{self.index} [{self.mode}, run {self.run}, input {INPUTS[self.run]}] "
            f"{self.program}\n    {self.what}"
        )


def signature(error):
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    message = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", message)
    return f"{type(error).__name__}: {message[:120]}"


def finite(result):
    leaves = [result["out"], result["s1"], *result["emits"], *result["d"].values()]
    if not isinstance(next(iter(result["taps"].values()), None), np.integer):
        leaves += list(result["taps"].values())
    return all(
        bool(jnp.all(jnp.isfinite(x))) for x in leaves if jnp.issubdtype(x.dtype, jnp.floating)
    )


def program_for(index):
    """The index-th program, drawn again while the reference finds it ambiguous."""
    program, rng = generate(index)
    for _ in range(20):
        try:
            refs = [expected(program, run) for run in range(RUNS)]
            if all(finite(r) for r in refs):
                return program, refs, None
        except (Ambiguous, Avoided):
            pass
        except Exception as error:  # the reference or the generator is wrong
            return program, None, error
        gen = Generator(rng, program.tap_mode, program.patterns)
        program = dataclasses.replace(program, ops=gen.body(Context(), 0, most=3))
    raise AssertionError(f"no unambiguous program for index {index}")


def check(program, refs):
    """The failures of `program` (empty if it is transparent)."""
    failures = []
    eager = build(program.ops)
    modes = {"eager": eager, "jit": fx.jit(eager)}
    for mode, fn in modes.items():
        for run in range(RUNS if mode == program.again else 2):
            try:
                what = compare(observed(fn, program, run), refs[run])
                kind = f"mismatch ({mode})" if what else None
            except Exception as error:
                what = f"{type(error).__name__}: {str(error)[:400]}"
                kind = signature(error)
            if what:
                failures.append((mode, run, what, kind))
                break  # the second run of a failing mode adds little
    return failures


def check_index(index):
    program, refs, error = program_for(index)
    if error is not None:
        text = "".join(traceback.format_exception_only(error)).strip()
        return program, [Failure(index, program, "reference", 0, text, "reference error")]
    return program, [Failure(index, program, *f) for f in check(program, refs)]


def indices_of(shard, total):
    """Program indices of `shard`: shard 0 (leak-checked, slower) gets a fiftieth."""
    leak_checked = max(1, total // 50)
    if shard == 0:
        return range(leak_checked)
    rest = range(leak_checked, total)
    return rest[shard - 1 :: SHARDS - 1]


def summary(failures, checked):
    kinds = {}
    for failure in failures:
        kinds.setdefault(failure.kind, []).append(failure)
    lines = [f"{len({f.index for f in failures})} of {checked} programs failed:"]
    for kind, group in sorted(kinds.items(), key=lambda item: -len(item[1])):
        lines.append(f"  {len(group):4d} x {kind}   (e.g. #{group[0].index})")
    lines += ["", *(str(f) for f in failures[:40])]
    return "\n".join(lines)


# Every shard runs without JAX's key-reuse checker (`reuses_keys_on_purpose`): it
# rejects plain JAX's own vmap of a cond with a batched predicate that draws from a
# key in one branch (KeyReuseError "In select_n, argument 1 is already consumed"),
# and every key effax draws is compared bit for bit with the reference's anyway.
@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize(
    "shard",
    [pytest.param(i, marks=[pytest.mark.uses_jit_cache] if i else []) for i in range(SHARDS)],
)
@pytest.mark.runs_long
def test_random_compositions_are_transparent(shard):
    """Every program of this shard, eager and under fx.jit, matches the reference."""
    failures = []
    indices = indices_of(shard, PROGRAMS)
    for index in indices:
        failures += check_index(index)[1]
    assert not failures, summary(failures, len(indices))


def test_generator_covers_every_wrapper():
    """The CI programs nest every wrapper, in both vmap key policies, to depth 4;
    they tap under every handler of T (and under a grad with `gradients`), create
    and set StateDict entries, and make run 2 in both modes."""
    seen, depths, leaves = set(), set(), set()

    def walk(ops, depth, mode, grads):
        for op in ops:
            if op[0] in WRAPPERS:
                seen.add(op[0] if op[0] != "vmap" else f"vmap-{op[1]}")
                depths.add(depth + 1)
            else:
                leaves.add(op[0] if op[0] != "tap" else f"tap-{mode}{'-grad' * grads}")
            inner = grads + (op[0] in ("grad", "value_and_grad"))
            for body in bodies_of(op):
                walk(body, depth + 1, mode, min(inner, 1))

    agains = set()
    for index in range(PROGRAMS):
        program = generate(index)[0]
        agains.add(program.again)
        walk(program.ops, 0, program.tap_mode, 0)
    assert seen == {*WRAPPERS, "vmap-split", "vmap-shared"} - {"vmap"}
    assert max(depths) == MAX_DEPTH
    assert {f"tap-{mode}" for mode in TAP_MODES} | {"tap-gradients-grad"} <= leaves
    assert {"dget", "dset"} <= leaves
    assert agains == {"eager", "jit"}


# --- shrinking, by hand (outside CI) -------------------------------------------------


def smaller(ops):
    """Candidate programs one step simpler than `ops`."""
    for i, op in enumerate(ops):
        if len(ops) > 1:
            yield ops[:i] + ops[i + 1 :]
        for body in bodies_of(op):  # the wrapper replaced by one of its bodies
            yield ops[:i] + body + ops[i + 1 :]
        if op[0] in ("scan", "fori", "map", "vmap") and op[-2] > 1:
            yield (*ops[:i], (*op[:-2], op[-2] - 1, op[-1]), *ops[i + 1 :])
        bodies = bodies_of(op)
        for j, body in enumerate(bodies):
            for simpler in smaller(body):
                yield (
                    (
                        *ops[:i],
                        with_bodies(op, [*bodies[:j], simpler, *bodies[j + 1 :]]),
                        *ops[i + 1 :],
                    )
                )


def shrink(program, kind):
    """Greedily the smallest program that still fails with `kind`."""
    current = program
    progress = True
    while progress:
        progress = False
        for ops in smaller(current.ops):
            candidate = dataclasses.replace(current, ops=ops)
            try:
                refs = [expected(candidate, run) for run in range(RUNS)]
            except Exception:
                continue
            if any(f[3] == kind for f in check(candidate, refs)):
                current, progress = candidate, True
                print("  ->", candidate, flush=True)
                break
    return current


if __name__ == "__main__":
    jax.config.update("jax_numpy_rank_promotion", "raise")
    jax.config.update("jax_debug_key_reuse", True)
    index = int(sys.argv[1])
    program, failures = check_index(index)
    print(program)
    for failure in failures:
        print(failure)
    if failures and "--shrink" in sys.argv:
        print("shrunk:", shrink(program, failures[0].kind))
