"""Adversarial taps: what careless or clever users, and compositions of three
wrappers, do to `Tap`'s handlers. Each test asserts the eager Python answer (the
program with loops unrolled and `if` for cond) or a named effax error.

Tests marked `# Regression:` failed when this review was written; the comment says
what was wrong (each is fixed)."""

import asyncio
import contextlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_transparent

import effax as fx

F32 = jnp.float32
acts = fx.Tap[jax.Array]("acts")
other = fx.Tap[jax.Array]("other")
count = fx.State[jax.Array]("count")
log = fx.Emit[jax.Array]("log")


def recorded(fn, *args, patterns=()):
    with acts.record(*patterns) as r:
        out = fn(*args)
    return out, r.value


# --- compositions of three wrappers -----------------------------------------------


def test_scan_inside_cond_inside_jit():
    def f(x):
        body = lambda c, _: (acts.tap("s", c * 2), None)
        return fx.cond(
            x > 0, lambda: fx.scan(body, x, None, length=3)[0], lambda: acts.tap("n", -x)
        )

    def python(x):
        if x > 0:
            for _ in range(3):
                x = acts.tap("s", x * 2)
            return x
        return acts.tap("n", -x)

    for x in (F32(1.0), F32(-1.0)):
        assert_transparent(recorded(fx.jit(f), x), recorded(python, x))


def test_cond_inside_scan_inside_vmap_and_jit():
    xs = jnp.array([1.0, -1.0, 2.0], F32)

    def f(x):
        def body(c, xi):
            return c + fx.cond(
                xi > 0, lambda: acts.tap("p", xi * c), lambda: acts.tap("q", xi)
            ), None

        return fx.scan(body, x, xs)[0]

    def python(x):
        for xi in xs:
            x = x + (acts.tap("p", xi * x) if xi > 0 else acts.tap("q", xi))
        return x

    batch = jnp.array([1.0, 2.0], F32)
    per = [recorded(python, b) for b in batch]
    want = {s: jnp.stack([p[1][s] for p in per], axis=-1) for s in per[0][1]}
    for wrap in (fx.vmap, lambda f: fx.jit(fx.vmap(f))):
        out, got = recorded(wrap(f), batch)
        assert_transparent(out, jnp.stack([p[0] for p in per]))
        assert_transparent(got, want)


def _three(i, x):
    return [
        lambda: acts.tap("a", x),
        lambda: acts.tap("b", acts.tap("b", x) + 1),
        lambda: acts.tap("c", x) + acts.tap("a", x * 2) + acts.tap("a", x * 3),
    ][i]


def test_switch_with_three_branches_tapping_different_sites_and_counts():
    f = lambda i, x: fx.switch(i, [_three(k, x) for k in range(3)])
    for i in range(3):
        want = recorded(lambda x, i=i: _three(i, x)(), F32(1.5))
        assert_transparent(recorded(f, i, F32(1.5)), want)
        assert_transparent(recorded(fx.jit(f), i, F32(1.5)), want)


def test_switch_inside_scan_record_replace_and_gradients():
    idx = jnp.array([0, 1, 2, 2, 1, 0, 2], jnp.int32)

    def step(c, i):
        return c + fx.switch(i, [_three(k, c) for k in range(3)]), None

    def python(c):
        for i in idx.tolist():
            c = c + _three(i, c)()
        return c

    compiled = fx.jit(lambda c: fx.scan(step, c, idx)[0])
    assert_transparent(recorded(compiled, F32(0.1)), recorded(python, F32(0.1)), rtol=1e-5)
    rows = {"a": jnp.arange(1.0, 9.0), "b": jnp.arange(10.0, 14.0), "c": jnp.arange(20.0, 23.0)}
    with acts.replace(rows) as got:
        out = compiled(F32(0.1))
    with acts.replace(rows) as want:
        expected = python(F32(0.1))
    assert_transparent((out, got.value), (expected, want.value))
    assert got.value == {"a": 8, "b": 4, "c": 3}
    short = {**rows, "a": rows["a"][:7]}  # one row short: both refuse
    for fn in (compiled, python):
        with acts.replace(short), pytest.raises(fx.EffectUsageError, match=r"8 times.*7 rows"):
            fn(F32(0.1))
    with acts.gradients() as got:
        fx.jit(fx.grad(lambda c: fx.scan(step, c, idx)[0]))(F32(0.1))
    with acts.gradients() as want:
        fx.grad(python)(F32(0.1))
    assert_transparent(got.value, want.value, rtol=1e-5)


def test_nested_scans_interleave_taps_in_program_order():
    def outer(c, _):
        c = acts.tap("a", c + 1)
        c = fx.scan(lambda d, _: (acts.tap("a", d * 2), None), c, None, length=2)[0]
        return acts.tap("a", c - 1), None

    def python(c):
        c = acts.tap("a", c)
        for _ in range(3):
            c = acts.tap("a", c + 1)
            for _ in range(2):
                c = acts.tap("a", c * 2)
            c = acts.tap("a", c - 1)
        return c

    compiled = lambda c: fx.scan(outer, acts.tap("a", c), None, length=3)[0]
    assert_transparent(recorded(fx.jit(compiled), F32(0.5)), recorded(python, F32(0.5)))
    rows = jnp.arange(13.0, dtype=F32)
    with acts.replace({"a": rows}) as got:
        out = fx.jit(compiled)(F32(0.5))
    with acts.replace({"a": rows}) as want:
        expected = python(F32(0.5))
    assert_transparent((out, got.value), (expected, want.value))
    with acts.gradients() as got:
        fx.jit(fx.grad(compiled))(F32(0.5))
    with acts.gradients() as want:
        fx.grad(python)(F32(0.5))
    assert_transparent(got.value, want.value)


def test_vmap_of_grad_of_scan_of_cond_under_jit():
    xs = jnp.array([1.0, -1.0, 2.0], F32)

    def step(c, x):
        taps = lambda: acts.tap("a", c * x) + acts.tap("a", c)
        return fx.cond(x > 0, taps, lambda: acts.tap("b", c - x)), None

    def python(c):
        for x in xs.tolist():
            c = (acts.tap("a", c * x) + acts.tap("a", c)) if x > 0 else acts.tap("b", c - x)
        return c

    batch = jnp.array([1.0, 2.0], F32)
    with acts.gradients() as got:
        grads = fx.jit(fx.vmap(fx.grad(lambda c: fx.scan(step, c, xs)[0])))(batch)
    per = []
    for c in batch:
        with acts.gradients() as want:
            per.append(fx.grad(python)(c))
        per.append(want.value)
    assert_transparent(grads, jnp.stack(per[0::2]))
    assert_transparent(got.value, {s: jnp.stack([p[s] for p in per[1::2]], -1) for s in "ab"})


def test_nested_grad_with_gradients():
    loss = lambda w: jnp.sin(acts.tap("h", w * 3))
    for wrap in (lambda f: f, fx.jit):
        with acts.gradients() as g:
            d2 = wrap(fx.grad(fx.grad(loss)))(F32(0.5))
        assert_transparent(d2, -9 * jnp.sin(F32(1.5)))
        # the outermost effax.grad owns the taps: d/dh of grad(loss) = 3 cos(h)
        assert_transparent(g.value["h"], -3 * jnp.sin(F32(1.5)))


def test_checkpoint_around_scan_with_replace_rows():
    f = lambda x: fx.scan(lambda c, _: (acts.tap("h", c + 1) * 2, None), x, None, length=3)[0]

    def python(x):
        for _ in range(3):
            x = acts.tap("h", x + 1) * 2
        return x

    rows = jnp.array([10.0, 20.0, 30.0], F32)
    for wrap in (fx.checkpoint, lambda f: fx.jit(fx.checkpoint(f))):
        with acts.replace({"h": rows}) as got:
            out = wrap(f)(F32(0))
        with acts.replace({"h": rows}) as want:
            expected = python(F32(0))
        assert_transparent((out, got.value), (expected, want.value))
    with acts.replace({"h": rows}) as got:  # the replaced values are constants
        assert float(fx.jit(fx.grad(fx.checkpoint(f)))(F32(0))) == 0.0
    assert got.value == {"h": 3}


# --- patterns, handlers reused, interleaved --------------------------------------


def test_record_with_patterns_that_match_nothing():
    f = lambda x: fx.scan(lambda c, _: (acts.tap("h", c + 1), None), x, None, length=3)[0]
    cases = [
        fx.jit(f),
        fx.vmap(f),
        lambda x: fx.cond(x > 0, lambda: acts.tap("a", x), lambda: x),
        lambda x: fx.while_loop(lambda c: c < 3, lambda c: acts.tap("a", c + 1), x),
    ]
    for fn in cases:
        assert (
            recorded(fn, F32(0) if fn is not cases[1] else jnp.zeros(2), patterns=("zz*",))[1] == {}
        )


def test_two_tap_effects_interleaved_in_a_compiled_loop():
    def g(x):
        a = acts.tap("x", x + 1)
        b = other.tap("x", a * 2)
        return other.tap("y", acts.tap("x", b + 1))

    def run(fn):
        with acts.record() as r, other.replace({"x": F32(100)}) as o:
            out = fn(F32(1))
        return out, r.value, o.value

    compiled = fx.jit(lambda x: fx.scan(lambda c, _: (g(c), None), x, None, length=2)[0])
    assert_transparent(run(compiled), run(lambda x: g(g(x))))


def test_a_recorder_reused_across_compiled_calls_then_cleared():
    f = fx.jit(lambda x: acts.tap("x", x * 2))
    with acts.record() as r:
        f(F32(1))
        f(F32(2))
        first = r.value
        r.clear()
        f(F32(3))
    assert_transparent(first, {"x": jnp.array([2.0, 4.0], F32)})
    assert_transparent(r.value, {"x": F32(6)})


def test_the_same_recorder_and_replacer_installed_twice():
    rec = acts.record()
    with rec:
        acts.tap("a", F32(1))
        with rec:
            acts.tap("a", F32(2))
            fx.jit(lambda: acts.tap("a", F32(3)))()
        fx.jit(lambda: acts.tap("a", F32(4)))()
    assert_transparent(rec.value, {"a": jnp.arange(1.0, 5.0, dtype=F32)})
    rep = acts.replace({"a": jnp.array([10.0, 20.0, 30.0, 40.0], F32)})
    out = []
    with rep:
        out.append(acts.tap("a", F32(0)))
        with rep:
            out.append(acts.tap("a", F32(0)))
            out.append(fx.jit(lambda: acts.tap("a", F32(0)))())
        out.append(fx.jit(lambda: acts.tap("a", F32(0)))())
    assert_transparent(jnp.stack(out), jnp.array([10.0, 20.0, 30.0, 40.0], F32))
    assert rep.value == {"a": 4}


def test_gradients_and_record_of_one_effect_nested():
    f = fx.grad(lambda x: jnp.sin(acts.tap("h", x)))
    with acts.record() as r, acts.gradients() as g:  # gradients() answers: r sees nothing
        f(F32(1))
    assert r.value == {} and set(g.value) == {"h"}
    with acts.gradients() as g, acts.record() as r:  # record() answers: no gradients
        f(F32(1))
    assert g.value == {} and float(r.value["h"]) == 1.0


# --- replacements that are Python numbers; weak types --------------------------


def test_replace_with_a_python_number_of_the_sites_kind():
    for number, site in ((2.5, F32(1)), (3, jnp.int32(1)), (True, jnp.bool_(False))):
        with acts.replace({"a": number}):
            eager = acts.tap("a", site)
            for wrap in (
                fx.jit,
                lambda f: lambda v: fx.scan(lambda c, _: (c, f(c)), v, None, length=1)[1][0],
            ):
                assert_transparent(wrap(lambda v: acts.tap("a", v))(site), eager)


# Regression: a Python-number replacement of another kind than the site's is cast to
# the site's dtype eagerly (3 -> 3.0 here; also lossily: 2.5 -> 2 on an int32 site,
# 2.5 -> True on a bool site), but refused under fx.jit / fx.scan / fx.cond with
# EffectTypeError ("its replacement is of shape () and dtype int32"). Diagnosis:
# `Replacer.tap` (effax/_tap.py) casts `out` only when it is still a Python scalar
# (`isinstance(out, (bool, int, float, complex))`); across a compiled boundary the
# number was exported as a const and comes back as a weakly typed int32/float32/
# bool tracer, which `_entries.check_alike` then compares by dtype and refuses.
# The cast (or the refusal) must not depend on whether the tap is traced: cast a
# weakly typed replacement too (jax.dtypes.is_weakly_typed), or refuse Python
# numbers of another kind eagerly as well.
def test_replace_with_a_python_int_on_a_float_site_is_transparent():
    with acts.replace({"a": 3}):
        eager = acts.tap("a", F32(1))
        compiled = fx.jit(lambda v: acts.tap("a", v))(F32(1))
    assert_transparent(compiled, eager)  # Array(3., float32)


# Regression: eagerly `acts.replace({"a": 2.5})` makes the tap return a strong float32
# (`jnp.asarray(2.5, float32)`), compiled a *weakly typed* float32 (the Python
# float crosses fx.jit as a weak-typed input and `Replacer.tap`'s cast is skipped
# for tracers, see above). Weak types promote differently: multiplied by a
# bfloat16 array, the eager program gives float32 and the compiled one bfloat16,
# so fx.jit changes *what* is computed (DESIGN §1.1). Diagnosis: same place,
# `Replacer.tap` should give the replacement the site's dtype with
# weak_type=False (e.g. `lax.convert_element_type(out, dtype)`), traced or not.
def test_a_python_float_replacement_does_not_change_dtype_promotion_when_compiled():
    prog = lambda x: acts.tap("a", x) * jnp.ones(2, jnp.bfloat16)
    with acts.replace({"a": 2.5}):
        eager = prog(F32(1))
        compiled = fx.jit(prog)(F32(1))
    assert eager.dtype == jnp.float32
    assert compiled.dtype == eager.dtype


def test_a_python_float_tap_records_the_same_number_eagerly_and_compiled():
    f = lambda x: acts.tap("a", 2.0) * x + acts.tap("b", x)
    (eager_out, eager), (out, got) = recorded(f, F32(1)), recorded(fx.jit(f), F32(1))
    # (eagerly the recording holds the Python float itself; compiled, a weakly
    # typed float32 array)
    assert float(eager["a"]) == float(got["a"]) == 2.0
    assert_transparent(out, eager_out)


# --- trace counts ----------------------------------------------------------------


@pytest.mark.uses_jit_cache
def test_trace_counts_across_handlers():
    traces = []

    def f(x):
        traces.append(1)
        return acts.tap("a", 2.0) * x + acts.tap("b", x)

    g = fx.jit(f)
    handlers = {
        "record": acts.record,
        "ignore": acts.ignore,
        "replace3": lambda: acts.replace({"b": F32(3)}),
        "replace4": lambda: acts.replace({"b": F32(4)}),
        "record_b": lambda: acts.record("b"),
    }
    seq = ["record", "record", "ignore", "ignore", "record", "ignore", "replace3", "replace4"]
    seq += ["record", "ignore", "replace3", "record_b", "record_b", "record"]
    new = []
    for name in seq:
        n = len(traces)
        with handlers[name]():
            g(F32(1))
        new.append(len(traces) - n)
    assert new == [1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0]
    # a weakly typed argument is another signature, as in jax.jit, once per handler
    n = len(traces)
    for name in ("record", "ignore", "record", "ignore"):
        with handlers[name]():
            g(1.0)
    assert len(traces) - n == 2


# --- dtypes, pytrees, None -------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [jnp.ones(2, jnp.bfloat16), jnp.array([1, -2], jnp.int8), jnp.array([True, False])],
    ids=["bfloat16", "int8", "bool"],
)
def test_record_and_replace_keep_narrow_dtypes(value):
    def looped(v):
        return fx.scan(lambda c, _: (acts.tap("d", c), None), v, None, length=2)[0]

    want = recorded(lambda v: acts.tap("d", acts.tap("d", v)), value)
    assert_transparent(recorded(fx.jit(looped), value), want)
    in_cond = lambda v: fx.cond(True, lambda: acts.tap("d", v), lambda: v)
    assert_transparent(recorded(fx.jit(in_cond), value), recorded(acts.tap, "d", value))
    with acts.replace({"d": jnp.zeros_like(value)}):
        assert_transparent(fx.jit(looped)(value), jnp.zeros_like(value))


def test_gradients_at_a_bfloat16_site():
    f = lambda x: fx.scan(
        lambda c, _: (acts.tap("h", c.astype(jnp.bfloat16)).astype(F32) * 3, None),
        x,
        None,
        length=2,
    )[0]
    with acts.gradients() as g:
        fx.jit(fx.grad(f))(F32(1))
    assert_transparent(g.value["h"], jnp.array([9, 3], jnp.bfloat16))


def test_a_pytree_tap_under_replace_is_a_named_error():
    tree = {"u": F32(1), "v": jnp.arange(2.0, dtype=F32)}
    with pytest.raises(fx.EffectTypeError, match=r"takes an array"):
        acts.replace({"t": tree})
    with acts.ignore():
        assert_transparent(fx.jit(lambda t: acts.tap("t", t))(tree), tree)


# Regression: a tap whose value is a pytree (a dict here; the existing suite records a
# None value eagerly) records eagerly, but under fx.jit (or fx.scan, fx.grad with
# gradients()) it crashes inside effax with a raw `TypeError: Cannot determine
# dtype of {...}`; tapped twice, even eagerly: `TypeError: reshape requires ndarray`.
# A None value under fx.jit: `AttributeError: 'NoneType' object has no attribute
# 'shape'`; a list of tracers: `TracerArrayConversionError`. Diagnosis:
# `Recorder.tap` (effax/_recorder.py) stores any value as one `Entry`, but
# `_entries.entries_outcome` (`jnp.result_type(e.value)`), `_entries.absorbed`
# (`first.value.shape`), `_entries.read`/`flat` (`jnp.reshape`) and
# `_entries.check_alike` (replace(fn)) assume a single array. Either refuse a
# non-array value at the tap with a named EffectTypeError (as `replace` already
# does for its replacements, `_tap._as_array`), or lay pytrees out leaf by leaf.
def test_a_pytree_tap_records_alike_eagerly_and_compiled_or_is_a_named_error():
    tree = {"u": F32(1), "v": jnp.arange(2.0, dtype=F32)}
    cases = [
        lambda: acts.tap("t", tree),
        lambda: fx.jit(lambda t: acts.tap("t", t))(tree),
        lambda: fx.jit(lambda: acts.tap("none", None))(),
        lambda: (acts.tap("t", tree), acts.tap("t", tree)),
    ]
    for case in cases:
        with contextlib.suppress(fx.EffectTypeError, fx.EffectUsageError):
            recorded(case)  # (a named error is an answer too)


# --- loops: fx.map, traced bounds, reverse, zero steps ----------------------------


def test_map_over_a_batch_records_and_replaces_per_element():
    xs = jnp.arange(4.0, dtype=F32)
    f = lambda x: acts.tap("m", x * 2) + 1
    want = recorded(lambda xs: jnp.stack([f(x) for x in xs]), xs)
    assert_transparent(recorded(lambda xs: fx.map(f, xs), xs), want)
    rows = jnp.array([9.0, 8.0, 7.0, 6.0], F32)
    with acts.replace({"m": rows}) as rep:
        out = fx.jit(lambda xs: fx.map(f, xs))(xs)
    assert_transparent(out, rows + 1)
    assert rep.value == {"m": 4}


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    loop = fx.jit(lambda n: fx.fori_loop(0, n, lambda i, c: acts.tap("f", c + 1), F32(0)))
    with acts.record(), pytest.raises(fx.EffectUsageError, match=r"Tap\('acts'\).*while_loop"):
        loop(3)
    assert float(recorded(loop, 3, patterns=("zz",))[0]) == 3
    with acts.replace({"f": jnp.array([5.0, 6.0, 7.0], F32)}) as rep:
        assert float(loop(3)) == 7
    assert rep.value == {"f": 3}


def _reverse_step(c, x):
    h = acts.tap("h", c + x)
    return h * 2, acts.tap("y", h)


def _reversed_python_loop(c, xs):
    ys = [None] * len(xs)
    for i in reversed(range(len(xs))):
        c, ys[i] = _reverse_step(c, xs[i])
    return c, jnp.stack(ys)


XS3 = jnp.array([1.0, 2.0, 3.0], F32)


def test_reverse_scan_replace_and_gradients_follow_the_order_taps_are_made():
    rows = jnp.array([100.0, 200.0, 300.0], F32)
    with acts.replace({"h": rows}):
        got = fx.scan(_reverse_step, F32(0), XS3, reverse=True)
    with acts.replace({"h": rows}):
        want = _reversed_python_loop(F32(0), XS3)
    assert_transparent(got, want)
    with acts.gradients() as got:
        fx.grad(lambda xs: fx.scan(_reverse_step, F32(0), xs, reverse=True)[0])(XS3)
    with acts.gradients() as want:
        fx.grad(lambda xs: _reversed_python_loop(F32(0), xs)[0])(XS3)
    assert_transparent(got.value, want.value)


# Regression: under `fx.scan(..., reverse=True)` a recording is stacked in the order of
# `xs` ({'h': [17, 8, 3]}), while the reversed Python loop records in the order the
# taps were made ([3, 8, 17]), which is the rule docs/howto/taps.md states ("in the
# order the taps were made, whatever made them"). `replace` and `gradients()` count
# taps in the order they are made (the test above passes), so the layout is also
# inconsistent between handlers: replaying a recording of a reverse scan
# (`replace({"h": rec.value["h"]})`) gives 6.0 where the original run gave 34.0.
# Cond inside a reverse scan records {'a': [4, 4, 2, 1]} for Python's [2, 1, 4, 4].
# Diagnosis: `_control._scan` passes the per-step values that `lax.scan(...,
# reverse=True)` stacks in xs order straight to `Region.absorb`; `Recorder.absorb`
# / `_entries.absorbed` take the leading axis as the steps in program order. The
# scan must flip recorded entries (values and masks) along the steps axis when
# `reverse=True` (Emit's values stay indexed like xs, as fx.scan documents, so it
# needs a flag to the taps' absorb rather than a flip for every handler).
def test_reverse_scan_records_in_the_order_taps_are_made():
    got = recorded(lambda c: fx.scan(_reverse_step, c, XS3, reverse=True), F32(0))
    want = recorded(lambda c: _reversed_python_loop(c, XS3), F32(0))
    assert_transparent(got, want)


# Regression: same cause as above: a recording of a reverse scan does not replay
# (the replay of {'h': [17, 8, 3]} gives a final carry of 6.0, not 34.0).
def test_a_recording_of_a_reverse_scan_replays():
    run = lambda: fx.scan(_reverse_step, F32(0), XS3, reverse=True)
    with acts.record("h") as rec:
        original = run()
    with acts.replace({"h": rec.value["h"]}):
        replayed = run()
    assert_transparent(replayed, original)


# Regression: `fx.scan` of zero steps under a recorder raises a raw
# `ValueError: zip() argument 2 is shorter than argument 1` (eagerly and under
# fx.jit), where the Python loop of zero steps records nothing. Diagnosis:
# `Region.absorb` (effax/_region.py) replaces the values of a zero-step loop with
# None but keeps the static layout; `Recorder.absorb` (effax/_recorder.py) appends
# `(static, None, False)` anyway, and reading it (`Recorder.entries` ->
# `_entries.absorbed` -> `_entries.unpack`) zips the non-empty layout with no
# values (`strict=True`). `Recorder.absorb` should skip an outcome whose values
# are None (or `Region.absorb` should drop the statics of a zero-step loop).
def test_a_scan_of_zero_steps_records_nothing():
    def f(c):
        acts.tap("a", F32(-1))
        c = fx.scan(lambda c, _: (acts.tap("a", c), None), c, None, length=0)[0]
        acts.tap("a", F32(-2))
        return c

    def python(c):
        acts.tap("a", F32(-1))
        acts.tap("a", F32(-2))
        return c

    assert_transparent(recorded(f, F32(0)), recorded(python, F32(0)))
    assert_transparent(recorded(fx.jit(f), F32(0)), recorded(python, F32(0)))


def test_a_scan_of_zero_steps_consumes_no_replacement_rows():
    with acts.replace({"a": jnp.array([1.0, 2.0], F32)}) as rep:
        fx.jit(lambda: fx.scan(lambda c, _: (acts.tap("a", c), None), F32(0), None, length=0))()
    assert rep.value == {"a": 0}


# --- branches tapping one site differently ------------------------------------------


def test_cond_branches_tapping_one_site_with_different_shapes_is_a_named_error():
    # (a Python `if` records the shape of the branch taken; compiled, both
    # branches' taps are carried out, and one site's taps must have one shape)
    f = lambda p: fx.cond(
        p, lambda: acts.tap("a", jnp.zeros(2)).sum(), lambda: acts.tap("a", jnp.ones(3)).sum()
    )
    with acts.record(), pytest.raises(fx.EffectUsageError, match=r"shape \(2,\) and \(3,\)"):
        fx.jit(f)(True)


# Regression: an fx.cond whose branches tap one site with values of different dtypes
# (float32 in one, int32 in the other) raises JAX's raw `TypeError: cond branches
# must have equal output types`, naming effax's internal `run_branch`, also when
# called eagerly (a Python `if` records the taken branch's int32 value). Diagnosis:
# `_entries.aligned` (effax/_entries.py) builds one layout per site over the
# branches and overwrites the site's dtype with the last branch's without
# comparing (it checks shapes, `shape_error`, but not dtypes); each branch then
# sends out its own rows in its own dtype, so the aligned outcomes still differ
# and the second `lax.cond` attempt in `_control._branches` fails outside its
# `except TypeError`. Check dtypes there too (a named EffectUsageError, as for
# shapes), or cast the rows to the layout's dtype.
def test_cond_branches_tapping_one_site_with_different_dtypes_is_a_named_error():
    f = lambda p: fx.cond(
        p,
        lambda: acts.tap("a", jnp.zeros(2, F32)).sum(),
        lambda: acts.tap("a", jnp.ones(2, jnp.int32)).sum().astype(F32),
    )
    with acts.record() as r:
        try:
            f(False)
        except fx.EffectUsageError:
            return
    assert_transparent(r.value, {"a": jnp.ones(2, jnp.int32)})


# --- failures leave handlers as they were -------------------------------------------


def test_an_exception_inside_tapped_wrappers_leaves_the_recorder_unchanged():
    def bad(x):
        acts.tap("h", x)
        acts.tap("k", x)
        raise ValueError("boom")

    wrappers = [
        fx.jit,
        lambda f: lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=2),
        lambda f: lambda x: fx.cond(x > 0, f, lambda c: c, x),
        lambda f: lambda x: fx.vmap(f)(jnp.stack([x, x])),
        fx.grad,
        fx.checkpoint,
    ]
    with acts.record() as r, acts.replace({"k": jnp.ones((3,), F32)}) as rep:
        fx.jit(lambda x: acts.tap("h", x) + acts.tap("k", x))(F32(1))
        before = (dict(r.value), dict(rep.value))
        for wrap in wrappers:
            with pytest.raises(ValueError, match="boom"):
                wrap(bad)(F32(2))
    assert_transparent((r.value, rep.value), before)


# Regression: a compiled call that taps past the last row of a replacement raises when
# it returns (as documented), but by then the other handlers around it have
# already absorbed the call's outcome: the State was incremented, the Emit
# collected its value and another Tap's recorder recorded, although DESIGN §2 says
# "A handled call that raises ... leaves every handler — state values, key
# counters, collected values — exactly as before the call" (only the Replacer's own
# counters stay put). Diagnosis: `Replacer.absorb` (effax/_tap.py) runs
# `_entries.check_counts` inside `_writeback.absorb_all`'s loop over the handlers,
# after `check_writes` has passed, so the handlers absorbed before it are already
# written (likewise `GradientRecorder.absorb`). The row check belongs in the
# checking phase (`check_writes`, or a `Handler` hook it calls) before any handler
# absorbs.
def test_a_compiled_call_past_the_last_row_leaves_every_handler_as_it_was():
    def f(x):
        count.set(count.get() + 1)
        log.emit(x)
        return acts.tap("h", other.tap("o", x)) + acts.tap("h", x)

    with fx.handlers(
        other.record(), count.init(jnp.int32(0)), log.collect(), acts.replace({"h": jnp.ones(1)})
    ) as hs:
        with pytest.raises(fx.EffectUsageError, match=r"tapped 2 times.*1 rows"):
            fx.jit(f)(F32(2))
        assert hs[acts] == {"h": 0}
        assert int(hs[count]) == 0
        assert hs[log] == []
        assert hs[other] == {}


# --- threads and asyncio --------------------------------------------------------


def test_one_recorder_shared_by_threads_and_recorders_per_thread():
    f = fx.jit(lambda x: acts.tap("h", x * 2) + 1)
    rec = acts.record()
    errors = []

    def worker(i):
        try:
            with rec:
                for _ in range(3):
                    f(F32(i))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(np.asarray(rec.value["h"]).tolist()) == sorted([2.0 * i for i in range(4)] * 3)

    # a thread does not inherit the handlers of the thread that started it
    seen = []
    with acts.record() as outer:
        t = threading.Thread(target=lambda: seen.append(_raises(f, F32(1))))
        t.start()
        t.join()
    assert seen == ["UnhandledEffectError"] and outer.value == {}


def _raises(f, *args):
    try:
        f(*args)
    except Exception as e:
        return type(e).__name__
    return None


def test_asyncio_tasks_record_alike():
    f = fx.jit(lambda x: acts.tap("h", x * 2))

    async def task(i):
        with acts.record() as r:
            f(F32(i))
            await asyncio.sleep(0.01)
            f(F32(i + 10))
        return r.value

    async def main():
        return await asyncio.gather(*(task(i) for i in range(3)))

    got = asyncio.run(main())
    for i, value in enumerate(got):
        assert_transparent(value, {"h": jnp.array([2.0 * i, 2.0 * (i + 10)], F32)})

    async def shared():
        with acts.record() as r:

            async def sub(i):
                await asyncio.sleep(0.01 * (3 - i))
                f(F32(i))

            await asyncio.gather(*(sub(i) for i in range(3)))
        return r.value

    # tasks copy the context: the recorder is the same object, taps in the order made
    assert_transparent(asyncio.run(shared()), {"h": jnp.array([4.0, 2.0, 0.0], F32)})


# --- raw JAX transformations around effax wrappers ------------------------------------


def _body(x):
    return jnp.sin(acts.tap("h", x * 2)) + 1


HANDLERS = {
    "ignore": acts.ignore,
    "record": acts.record,
    "replace": lambda: acts.replace({"h": F32(0.3)}),
    "replace_rows": lambda: acts.replace({"h": jnp.array([0.3, 0.4, 0.5], F32)}),
    "replace_fn": lambda: acts.replace(lambda s, v: v * 0),
    "gradients": acts.gradients,
}
X2 = jnp.array([0.5, 0.6], F32)
RAW = {
    "jax.jit(fx.jit)": lambda: jax.jit(fx.jit(_body))(F32(0.5)),
    "jax.jit": lambda: jax.jit(_body)(F32(0.5)),
    "lax.scan": lambda: jax.lax.scan(lambda c, _: (_body(c), None), F32(0.5), None, length=2),
    "jax.checkpoint": lambda: jax.checkpoint(_body)(F32(0.5)),
    "jax.eval_shape(fx.jit)": lambda: jax.eval_shape(fx.jit(_body), F32(0.5)),
    "jax.vmap": lambda: jax.vmap(_body)(X2),
    "jax.vmap(fx.jit)": lambda: jax.vmap(fx.jit(_body))(X2),
    "jax.grad": lambda: jax.grad(_body)(F32(0.5)),
    "jax.grad(fx.jit)": lambda: jax.grad(fx.jit(_body))(F32(0.5)),
    "jax.grad(fx.checkpoint)": lambda: jax.grad(fx.checkpoint(_body))(F32(0.5)),
    "jax.jvp(fx.jit)": lambda: jax.jvp(fx.jit(_body), (F32(0.5),), (F32(1.0),)),
}
STAGING = {"jax.jit(fx.jit)", "jax.jit", "lax.scan", "jax.checkpoint", "jax.eval_shape(fx.jit)"}


@pytest.mark.parametrize("raw", list(RAW))
@pytest.mark.parametrize("handler", list(HANDLERS))
def test_raw_jax_transformations_around_effax_wrappers(handler, raw):
    if raw in STAGING:  # a staged read of a handler outside: always a leak
        with HANDLERS[handler](), pytest.raises(fx.EffectLeakError, match=r"Use effax\."):
            RAW[raw]()
        return
    if handler == "record":  # storing a raw transformation's tracer: a leak
        with acts.record(), pytest.raises(fx.EffectLeakError, match=r"Writing a traced value"):
            RAW[raw]()
        return
    if handler == "gradients":
        # `gradients()` under a raw transformation sees no gradients; checked below
        return
    with HANDLERS[handler]() as h:
        out = RAW[raw]()
    with acts.ignore():
        untapped = jax.tree.map(jnp.zeros_like, RAW[raw]())
    assert jax.tree.structure(out) == jax.tree.structure(untapped)
    if handler.startswith("replace"):
        assert h.value == ({} if handler == "replace_fn" else {"h": 1})


# Regression: a gradients() handler refuses a tap traced by a raw `jax.grad` around it
# (EffectUsageError naming effax.grad, docs/howto/taps.md), but the same tap inside
# any effax wrapper under the raw jax.grad — `jax.grad(fx.jit(f))`,
# `jax.grad(fx.checkpoint(f))`, `jax.grad(fx.handle(f))`, or a raw jax.grad of a
# function calling fx.scan / fx.cond / fx.vmap — passes silently and records
# nothing (`{}`), the silent failure the check was added for (commit 0d8c22e).
# Diagnosis: `GradientRecorder._check_not_differentiated` (effax/_recorder.py)
# compares the tap's tracers with the trace the handler was installed at; inside an
# effax wrapper the handler is a copy rebuilt by `GradientRecorder.rebuild` in mode
# "collect" and installed at the wrapper's own inner trace, so the tap's values are
# never foreign to it and the JVP trace between the original handler and the
# wrapper is invisible. The check must be made when a collect-mode handler crosses
# into a region (e.g. in `export`/`batch_export`, or by the region when the call's
# inputs carry tracers of a differentiating trace that is not the handler's home),
# or the mode must travel in (a "refuse" mode the rebuilt copy enforces).
@pytest.mark.parametrize(
    "raw",
    [
        "jax.grad(fx.jit)",
        "jax.grad(fx.checkpoint)",
        "jax.grad(fx.scan)",
        "jax.grad(fx.cond)",
        "jax.grad(fx.vmap)",
    ],
)
def test_gradients_refuses_a_tap_under_a_raw_jax_grad_also_inside_effax_wrappers(raw):
    fns = {
        "jax.grad(fx.jit)": lambda: jax.grad(fx.jit(_body))(F32(0.5)),
        "jax.grad(fx.checkpoint)": lambda: jax.grad(fx.checkpoint(_body))(F32(0.5)),
        "jax.grad(fx.scan)": lambda: jax.grad(
            lambda x: fx.scan(lambda c, _: (_body(c), None), x, None, length=2)[0]
        )(F32(0.5)),
        "jax.grad(fx.cond)": lambda: jax.grad(lambda x: fx.cond(x > 0, _body, lambda c: c, x))(
            F32(0.5)
        ),
        "jax.grad(fx.vmap)": lambda: jax.grad(lambda x: jnp.sum(fx.vmap(_body)(x)))(X2),
    }
    with acts.gradients(), pytest.raises(fx.EffectUsageError, match=r"effax\.grad"):
        fns[raw]()


def test_gradients_under_raw_jax_grad_bare_and_under_raw_vmap_of_effax_grad():
    with acts.gradients(), pytest.raises(fx.EffectUsageError, match=r"effax\.grad"):
        jax.grad(_body)(F32(0.5))
    # (a raw jax.vmap of an effax.grad: the gradient would be a vmap tracer stored
    # outside it, a leak; fx.vmap(fx.grad(f)) is the way)
    with acts.gradients(), pytest.raises(fx.EffectLeakError):
        jax.vmap(fx.grad(_body))(X2)
