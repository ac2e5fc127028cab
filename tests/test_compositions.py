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
`jax.random.key_data(K.next_key())`), and emit to an `Emit` (`E`). Every body also
receives the program input `x0` (never differentiated), from which trip counts,
some predicates and switch indices are computed.

Runs. Each program is built once (its wrapped functions made once, as user code
makes them) and called twice, on inputs 0.7 and -1.1 (other trip counts and
branches) with fresh handlers (other Ask values, seeds and initial states; the
static value changes between the runs in some programs), first unwrapped (eager)
then under one outer `fx.jit` (the same inner wrapped functions). Outputs, final
states, final key counters (`hs[K].counter`) and emitted values (`hs[E]`) are
compared with `reference`, an interpreter of the same program description that
never calls effax: Python loops, `if` and `while`; vmap as a Python loop over
the elements with the documented key policy (keys="split": the stream draws one
key `Kb = fold_in(base, counter)` — also when the body draws none, as effax and
tests/test_properties.py do — and element b uses a stream seeded with
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
nothing; `fx.map` bodies run at least once.

Size: `EFFAX_FUZZ_PROGRAMS` programs (default 500, 100 under ci-small; split over
`SHARDS` tests; the leak-checked shard gets a fiftieth), `EFFAX_FUZZ_SEED` (default 0) picks another
set, e.g. ``EFFAX_FUZZ_PROGRAMS=5000 EFFAX_FUZZ_SEED=1``. A failing test lists
every failing program (its seed and its nesting) and a count per distinct failure.
``python tests/test_compositions.py 123 --shrink`` re-checks program 123 and
shrinks it by hand-written rules.
"""

from __future__ import annotations

import dataclasses
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

SHARDS = 8
_DEFAULT_PROGRAMS = "100" if os.environ.get("HYPOTHESIS_PROFILE") == "ci-small" else "500"
PROGRAMS = int(os.environ.get("EFFAX_FUZZ_PROGRAMS", _DEFAULT_PROGRAMS))
BASE_SEED = int(os.environ.get("EFFAX_FUZZ_SEED", "0"))
MAX_DEPTH = 4
MAX_LEAVES = 6  # per program, so that a program compiles in about a second
RTOL = 1e-5
MARGIN = 1e-3
INPUTS = (0.7, -1.1)

A = fx.Ask[jax.Array]("a")
STATIC = fx.Ask[int]("static", static=True)
S1 = fx.State[jax.Array]("s1")
S2 = fx.State[jax.Array]("s2")
K = fx.RandomKey("k")
E = fx.Emit[jax.Array]("e")

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


# --- programs -----------------------------------------------------------------------
# An op is a tuple: a leaf ("ask",), ("static",), ("get",), ("set", c), ("modify", c),
# ("uniform",), ("bits_state",), ("bits_emit",), ("emit",), or a wrapper:
# ("jit", body), ("checkpoint", body), ("grad", body), ("value_and_grad", body),
# ("scan", n, body), ("fori", n, body), ("map", n, body),
# ("fori_traced", (n_pos, n_neg), body), ("while", (n_pos, n_neg), body),
# ("cond", source, body_true, body_false), ("switch", source, (body, ...)),
# ("vmap", keys, size, body), ("intercept", level, body); a body is a tuple of ops;
# source is "acc" or "x0".

WRAPPERS = ("jit", "checkpoint", "grad", "value_and_grad", "scan", "fori", "map",
            "fori_traced", "while", "cond", "switch", "vmap", "intercept")  # fmt: skip
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
        elif kind == "intercept":
            out += emit_signature(op[2])
    return out


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
            n = 1 if op[1] == "split" else draws(op[3])
        elif kind in ("jit", "checkpoint", "grad", "value_and_grad"):
            n = draws(op[1])
        elif kind == "intercept":
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
    def __init__(self, rng):
        self.rng = rng
        self.leaves = 0

    def body(self, ctx, depth, most=2):
        n = self.rng.randint(1, most)
        return tuple(self.op(ctx, depth) for _ in range(n))

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
        kind = rng.choice(choices)
        self.leaves += 1
        if kind in ("set", "modify"):
            return (kind, rng.choice(COEFFICIENTS))
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
            return (kind, self.body(dataclasses.replace(ctx, under_grad=True), d))
        if kind in ("scan", "fori"):
            return (kind, rng.randint(0, 3), self.body(ctx, d))
        if kind == "map":
            return (kind, rng.randint(1, 3), self.body(ctx, d))
        if kind in ("fori_traced", "while"):
            trips = (rng.randint(0, 3), rng.randint(0, 3))
            return (kind, trips, self.body(dataclasses.replace(ctx, no_emit=True), d))
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
            )
            return (kind, keys, rng.randint(1, 3), self.body(inner, d))
        # cond / switch
        source = rng.choice(["acc", "x0"])
        batched = ctx.batched_pred or (ctx.in_vmap and source == "acc")
        inner = dataclasses.replace(ctx, batched_pred=batched)
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

    def __str__(self):
        return f"{show(self.ops)}  statics={self.statics}"


def generate(index, base_seed=BASE_SEED):
    rng = random.Random(f"effax-compositions:{base_seed}:{index}")
    gen = Generator(rng)
    ops = gen.body(Context(), 0, most=3)
    statics = rng.choice([(1, 1), (1, 2), (2, 2)])
    return Program(ops, statics), rng


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
    levels: tuple[int, ...] = ()  # the interceptor levels installed, outermost first

    def copy(self, **changes):
        return dataclasses.replace(self, **{"emits": [], **changes})

    # The operations through the interceptors: the innermost sees an operation
    # first; what it forwards (a read's value, a key) comes back through the
    # outer ones first.
    def ask(self):
        value = self.a
        for n in self.levels:
            value = value * 2 + n
        return value

    def get(self):
        value = self.s1
        for n in self.levels:
            value = value + 0.25 * (n + 1)
        return value

    def set(self, value):
        for n in reversed(self.levels):
            value = value * 0.5 - n
        self.s1 = value

    def emit(self, value):
        for n in reversed(self.levels):
            value = value * 3 + n
        self.emits.append(value)

    def draw(self, *, raw=False):
        """The next key; `raw`: the stream's own (a vmap's split key, which the
        stream draws itself, not through its interceptors)."""
        key = jax.random.fold_in(self.base, self.counter)
        self.counter += 1
        for n in () if raw else self.levels:
            key = jax.random.fold_in(key, n + 3)
        return key


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


def reference_op(op, acc, x0, env):
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
    if kind == "intercept":
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

        def fun(a):
            inner = env.copy()
            out = reference(body, a, x0, inner)
            side["counter"] = inner.counter
            return out, (inner.s1, inner.s2, inner.emits)

        (value, (s1, s2, emits)), g = jax.value_and_grad(fun, has_aux=True)(acc)
        env.s1, env.s2, env.counter = s1, s2, side["counter"]
        env.emits.extend(emits)
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
        split = env.draw(raw=True) if keys == "split" else None
        elements = []
        ys = []
        for b in range(size):
            if split is not None:
                element = env.copy(base=jax.random.fold_in(split, b), counter=0)
            else:
                element = env.copy()
            ys.append(reference(body, xs[b], x0, element))
            elements.append(element)
        first = elements[0]
        for element in elements[1:]:
            same = bool(jnp.all(element.s1 == first.s1)) and bool(jnp.all(element.s2 == first.s2))
            if not same or (split is None and element.counter != first.counter):
                raise ReferenceError_("vmap elements ended with different shared state")
        env.s1, env.s2 = first.s1, first.s2
        if split is None:
            env.counter = first.counter
        stack_sites([e.emits for e in elements], env, "vmap")
        return jnp.mean(jnp.stack(ys))
    raise AssertionError(op)


# --- running and comparing ------------------------------------------------------------


# per run: the Ask's value, S1's and S2's initial values, the stream's seed
ASKED = (0.5, 0.75)
S1_INIT = (1.0, -0.5)
S2_INIT = ((0, 0), (7, 1 << 31))
SEEDS = (0, 1)


def handlers_of(run, statics):
    return (
        A.provide(F32(ASKED[run])),
        STATIC.provide(statics[run]),
        S1.init(F32(S1_INIT[run])),
        S2.init(jnp.array(S2_INIT[run], jnp.uint32)),
        K.seed(SEEDS[run]),
        E.collect(),
    )


def expected(program, run):
    s2 = jnp.array(S2_INIT[run], jnp.uint32)
    base = jax.random.key(SEEDS[run])
    env = Env(F32(ASKED[run]), program.statics[run], F32(S1_INIT[run]), s2, base, 0, [])
    x0 = F32(INPUTS[run])
    out = reference(program.ops, x0, x0, env)
    return {"out": out, "s1": env.s1, "s2": env.s2, "counter": env.counter, "emits": env.emits}


def observed(fn, program, run):
    with fx.handlers(*handlers_of(run, program.statics)) as hs:
        x0 = F32(INPUTS[run])
        out = fn(x0, x0)
    counter = hs[K].counter
    return {
        "out": out,
        "s1": hs[S1],
        "s2": hs[S2],
        "counter": int(np.asarray(counter).astype(np.uint32)),
        "emits": list(hs[E]),
    }


def compare(ours, theirs):
    """None if `ours` matches `theirs`, else what differs."""
    if ours["counter"] != theirs["counter"]:
        return f"key counter {ours['counter']} != {theirs['counter']}"
    if len(ours["emits"]) != len(theirs["emits"]):
        return f"{len(ours['emits'])} emits != {len(theirs['emits'])}"
    for name in ("out", "s1", "s2", "emits"):
        left, right = ours[name], theirs[name]
        if name != "emits":
            left, right = [left], [right]
        for i, (x, y) in enumerate(zip(left, right, strict=True)):
            x, y = np.asarray(x), np.asarray(y)
            where = name if name != "emits" else f"emit {i}"
            if x.shape != y.shape or x.dtype != y.dtype:
                return f"{where}: {x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}"
            if np.issubdtype(x.dtype, np.floating):
                if not np.allclose(x, y, rtol=RTOL, atol=RTOL, equal_nan=True):
                    return f"{where}: {x.tolist()} != {y.tolist()}"
            elif not np.array_equal(x, y):
                return f"{where}: {x.tolist()} != {y.tolist()} (exact)"
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
            f"#{self.index} [{self.mode}, input {INPUTS[self.run]}] {self.program}\n    {self.what}"
        )


def signature(error):
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    message = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", message)
    return f"{type(error).__name__}: {message[:120]}"


def finite(result):
    leaves = [result["out"], result["s1"], *result["emits"]]
    return all(
        bool(jnp.all(jnp.isfinite(x))) for x in leaves if jnp.issubdtype(x.dtype, jnp.floating)
    )


def program_for(index):
    """The index-th program, drawn again while the reference finds it ambiguous."""
    program, rng = generate(index)
    for _ in range(20):
        try:
            refs = [expected(program, run) for run in range(2)]
            if all(finite(r) for r in refs):
                return program, refs, None
        except Ambiguous:
            pass
        except Exception as error:  # the reference or the generator is wrong
            return program, None, error
        gen = Generator(rng)
        program = Program(gen.body(Context(), 0, most=3), program.statics)
    raise AssertionError(f"no unambiguous program for index {index}")


def check(program, refs):
    """The failures of `program` (empty if it is transparent)."""
    failures = []
    eager = build(program.ops)
    modes = {"eager": eager, "jit": fx.jit(eager)}
    for mode, fn in modes.items():
        for run in range(2):
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
def test_random_compositions_are_transparent(shard):
    """Every program of this shard, eager and under fx.jit, matches the reference."""
    failures = []
    indices = indices_of(shard, PROGRAMS)
    for index in indices:
        failures += check_index(index)[1]
    assert not failures, summary(failures, len(indices))


def test_generator_covers_every_wrapper():
    """The CI programs nest every wrapper, in both vmap key policies, to depth 4."""
    seen, depths = set(), set()

    def walk(ops, depth):
        for op in ops:
            if op[0] in WRAPPERS:
                seen.add(op[0] if op[0] != "vmap" else f"vmap-{op[1]}")
                depths.add(depth + 1)
            for body in bodies_of(op):
                walk(body, depth + 1)

    for index in range(PROGRAMS):
        walk(generate(index)[0].ops, 0)
    assert seen == {*WRAPPERS, "vmap-split", "vmap-shared"} - {"vmap"}
    assert max(depths) == MAX_DEPTH


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
            candidate = Program(ops, current.statics)
            try:
                refs = [expected(candidate, run) for run in range(2)]
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
