"""`StateDict` against what a careless or clever user would try: every compiled,
looped or transformed program is compared with the same program run eagerly (or
with a dict threaded by hand through plain JAX), and every refusal is a named
effax error that leaves the handlers as they were. The last test generates random
compositions of wrappers around a body that reads, writes and creates entries."""

import asyncio
import io
import random
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent

import effax as fx

F32, I32 = jnp.float32, jnp.int32
sd = fx.StateDict[jax.Array]("adv_sd")
sd2 = fx.StateDict[jax.Array]("adv_sd2")
st = fx.State[jax.Array]("adv_st")
ask = fx.Ask[jax.Array]("adv_ask")
X = F32([1.0, -2.0])
EAGER = lambda g: g


def counter_body(x):
    """Reads, writes and creates two entries."""
    a = sd.get("a", init=lambda: jnp.zeros_like(x))
    sd.set("a", 0.5 * a + x)
    n = sd.get("n", init=I32(0))
    sd.set("n", n + 1)
    return jnp.sum(a * x)


def python_counter(x, d):
    a = d.get("a", jnp.zeros_like(x))
    d["a"], d["n"] = 0.5 * a + x, d.get("n", I32(0)) + 1
    return jnp.sum(a * x)


def unchanged(cell, before):
    assert sorted(cell.value) == sorted(before)
    assert_bitwise_equal(cell.value, before)


# --- several effects and cells -------------------------------------------------------


@pytest.mark.uses_jit_cache
def test_two_state_dicts_and_a_state_in_one_program_compile_twice():
    traces = []

    def step(x):
        traces.append(1)
        a = sd.get("w", init=lambda: x)
        b = sd2.get("w", init=lambda: 2 * x)  # the same name in another dict
        s = st.get()
        sd.set("w", a + b)
        sd2.set("w", b * s)
        st.set(s + 1)
        return a - b

    def run(wrap):
        with fx.handlers(sd.init(), sd2.init(), st.init(F32(1))) as hs:
            outs = [wrap(step)(X * i) for i in range(1, 5)]
        return outs, hs[sd], hs[sd2], hs[st]

    expected = run(EAGER)
    traces.clear()
    assert_transparent(run(fx.jit), expected)
    assert len(traces) == 2


def test_nested_cells_of_one_effect_inner_shadows_outer_under_jit():
    def program(wrap):
        f = wrap(counter_body)
        with sd.init({"a": F32([5.0, 5.0])}) as outer:
            r = [f(X)]
            with sd.init() as inner:
                r += [f(X), f(2 * X)]
                mid = dict(outer.value)
            r.append(f(X))
        return r, mid, outer.value, inner.value

    expected = program(EAGER)
    got = program(fx.jit)
    assert_transparent(got, expected)
    # while the inner cell was installed the outer one did not change
    assert_bitwise_equal(got[1]["a"], 0.5 * F32([5.0, 5.0]) + X)


@pytest.mark.uses_jit_cache
def test_the_same_cell_installed_twice_and_after_growth_runs_warm():
    traces = []

    def body(x):
        traces.append(sorted(sd.handler().value))
        return counter_body(x)

    def program(wrap):
        f = wrap(body)
        c, fresh = sd.init(), sd.init()
        with c:
            f(X)
            with c:  # the same cell, nested
                f(X)
        with c:  # installed again after the compiled call grew it
            f(X)
        with fresh:  # a fresh cell: the first program again, then the second
            f(X)
            f(X)
        return c.value, fresh.value

    expected = program(EAGER)
    traces.clear()
    assert_transparent(program(fx.jit), expected)
    assert traces == [[], ["a", "n"]]


def test_an_entry_created_in_a_jit_inside_a_handled_jit_comes_out():
    def program(wrap_outer, wrap_inner):
        inner = wrap_inner(counter_body)
        outer = wrap_outer(lambda x: inner(x) + inner(2 * x))
        with sd.init() as c:
            r = [outer(X), outer(X)]
        return r, c.value

    expected = program(EAGER, EAGER)
    for wo, wi in [(fx.jit, fx.jit), (fx.jit, fx.checkpoint), (fx.checkpoint, fx.jit)]:
        assert_transparent(program(wo, wi), expected)
    d = {}
    ref = [python_counter(X, d) + python_counter(2 * X, d) for _ in range(2)]
    assert_transparent(expected, (ref, d))


# --- vmap and grad compositions -------------------------------------------------------

XS = jnp.stack([X, 2 * X, 3 * X])


@pytest.mark.parametrize("order", ["vmap(jit)", "jit(vmap)"])
def test_vmap_batched_and_jit_give_created_entries_one_row_per_element(order):
    def wrap(f):
        v = lambda g: fx.vmap(g, state="batched")
        return v(fx.jit(f)) if order == "vmap(jit)" else fx.jit(v(f))

    with sd.init() as cell:
        outs = [wrap(counter_body)(XS), wrap(counter_body)(XS)]
    rows = [{} for _ in XS]
    ref = [jnp.stack([python_counter(x, d) for x, d in zip(XS, rows, strict=True)]) for _ in "ab"]
    assert_transparent(outs, ref)
    assert_transparent(cell.value, {k: jnp.stack([d[k] for d in rows]) for k in rows[0]})


@pytest.mark.parametrize("order", ["vmap(jit)", "jit(vmap)"])
def test_vmap_shared_and_jit_take_a_batch_independent_created_entry(order):
    def body(x):
        n = sd.get("n", init=I32(0))
        sd.set("n", n + 1)
        w = sd.get("w", init=lambda: jnp.ones(2))
        return x * w + n

    def leaky(x):
        return sd.get("leak", init=lambda: x)

    wrap = (lambda f: fx.vmap(fx.jit(f))) if order == "vmap(jit)" else lambda f: fx.jit(fx.vmap(f))
    with sd.init() as cell:
        outs = [wrap(body)(XS), wrap(body)(XS)]
        before = dict(cell.value)
        with pytest.raises(fx.EffectLeakError, match="differs across the batch"):
            wrap(leaky)(XS)
        unchanged(cell, before)
    assert_transparent(outs, [XS, XS + 1])
    assert_bitwise_equal(cell.value, {"n": I32(2), "w": jnp.ones(2)})


@pytest.mark.parametrize("order", ["grad(jit)", "jit(grad)", "grad(checkpoint)", "vmap(grad)"])
def test_grad_compositions_store_primal_values_in_created_entries(order):
    def loss(w):
        s = sd.get("s", init=lambda: jnp.ones_like(w))
        sd.set("s", s * w)
        sd.set("last", w)
        return jnp.sum(s * w**2)

    def ref_loss(w, d):
        s = d.get("s", jnp.ones_like(w))
        return jnp.sum(s * w**2), {"s": s * w, "last": w}

    wraps = {
        "grad(jit)": lambda: fx.grad(fx.jit(loss)),
        "jit(grad)": lambda: fx.jit(fx.grad(loss)),
        "grad(checkpoint)": lambda: fx.grad(fx.checkpoint(loss)),
        "vmap(grad)": lambda: fx.vmap(fx.grad(loss), state="batched"),
    }
    xs = XS[:2] if order == "vmap(grad)" else X
    with sd.init() as cell:
        outs = [wraps[order]()(xs) for _ in range(2)]
    ref_grad = jax.grad(ref_loss, has_aux=True)
    if order == "vmap(grad)":
        ref_grad = jax.vmap(ref_grad, in_axes=(0, 0))
    d, ref = {}, []
    for _ in range(2):
        g, d = ref_grad(xs, d)
        ref.append(g)
    assert_transparent(outs, ref)
    assert_transparent(cell.value, d)


def test_checkpoint_inside_scan_carries_existing_entries_and_refuses_new_ones():
    def step(c, x):
        return c + 1, fx.checkpoint(counter_body)(x)

    with sd.init() as cell:
        counter_body(X)  # creates the entries first
        _, outs = fx.jit(lambda xs: fx.scan(step, 0, xs))(XS)
    d = {}
    python_counter(X, d)
    assert_transparent(outs, jnp.stack([python_counter(x, d) for x in XS]))
    assert_transparent(cell.value, d)
    with sd.init({"a": X}) as cell:  # "n" is missing: created inside the loop body
        with pytest.raises(fx.StateTypeError, match=r"created the entries \['n'\]"):
            fx.scan(step, 0, XS)
        unchanged(cell, {"a": X})


# --- what entries hold ----------------------------------------------------------------


def test_entries_of_every_kind_match_the_eager_run():
    def body(x):
        tree = sd.get("tree", init=lambda: {"m": jnp.zeros(2), "v": (F32(0), [I32(1)])})
        sd.set("tree", jax.tree.map(lambda t: t + 1, tree))
        flag = sd.get("flag", init=jnp.bool_(True))
        sd.set("flag", jnp.logical_not(flag))
        key = sd.get("key", init=lambda: jax.random.key(0))
        key, sub = jax.random.split(key)
        sd.set("key", key)
        sd.set("empty", sd.get("empty", init=None))  # an existing None entry
        return jnp.where(flag, x, -x) + jax.random.normal(sub, x.shape)

    def program(wrap):
        with sd.init({"empty": None}) as cell:
            outs = [wrap(body)(X) for _ in range(3)]
        return outs, cell.value

    expected = program(EAGER)
    got = program(fx.jit)
    assert_transparent(got, expected)  # keys, bools and ints bit for bit
    assert_bitwise_equal(got[1]["key"], expected[1]["key"])
    assert got[1]["empty"] is None


def test_python_number_entries_keep_their_value_and_promotion():
    def body():
        n = sd.get("n", init=0)
        sd.set("n", n + 1)
        return n * jnp.ones(1, jnp.int8)  # a Python int does not promote int8

    for wrap in (EAGER, fx.jit):
        with sd.init() as cell:
            outs = [wrap(body)() for _ in range(3)]
        assert [o.dtype for o in outs] == [jnp.int8] * 3
        assert [int(o[0]) for o in outs] == [0, 1, 2]
        assert int(cell.value["n"]) == 3


def test_an_entry_made_strong_inside_a_compiled_call_stays_strong():
    def step():
        sd.set("f", sd.get("f") * F32(2))

    results = []
    for wrap in (EAGER, fx.jit):
        with sd.init({"f": 1.5}) as cell:
            wrap(step)()
        results.append((cell.value["f"] * jnp.ones(1, jnp.bfloat16)).dtype)
    assert results[1] == results[0] == jnp.float32


@pytest.mark.parametrize("value", [None, {}, ()], ids=["None", "empty dict", "empty tuple"])
def test_an_entry_created_with_no_leaves_inside_a_compiled_call_is_kept(value):
    for wrap in (EAGER, fx.jit):
        with sd.init({"a": F32(1)}) as cell:
            wrap(lambda: sd.set("opt", value))()
            assert wrap(lambda: sd.get("opt") is None or sd.get("opt") == value)()
        assert sorted(cell.value) == ["a", "opt"]
        assert cell.value["opt"] == value


def test_set_that_changes_an_entry_type_across_a_compiled_call_is_refused():
    cases = [
        lambda: sd.set("x", I32(1)),  # dtype
        lambda: sd.set("x", jnp.zeros(3)),  # shape
        lambda: sd.set("x", None),  # structure
        lambda: sd.set("x", (F32(0), F32(1))),
    ]
    for case in cases:
        with sd.init({"x": F32(1), "y": X}) as cell:
            with pytest.raises(fx.StateTypeError, match=r"changed its type"):
                fx.jit(lambda case=case: (case(), sd.set("new", F32(0)))[1])()
            unchanged(cell, {"x": F32(1), "y": X})
    with sd.init() as cell:  # a created entry that cannot leave: a named error
        with pytest.raises(fx.EffectTypeError, match="holding a str"):
            fx.jit(lambda: sd.set("s", "hello"))()
        assert cell.value == {}


# --- init ----------------------------------------------------------------------------


def test_a_missing_entry_without_init_and_an_init_that_raises_change_nothing():
    def bad():
        raise ValueError("no init")

    for wrap in (EAGER, fx.handle, fx.jit, fx.checkpoint):
        with sd.init({"a": F32(0)}) as cell:
            with pytest.raises(
                fx.EffectUsageError, match=r"no entry 'zz' yet \(it has \['a', 'b'\]\)"
            ):
                wrap(lambda: (sd.set("b", F32(1)), sd.get("zz", init=None)))()
            if wrap is not EAGER:  # an eager call outside a handled one is not undone
                unchanged(cell, {"a": F32(0)})
            with pytest.raises(ValueError, match="no init"):
                wrap(lambda: (sd.set("a", F32(5)), sd.get("b2", init=bad)))()
            if wrap is not EAGER:
                unchanged(cell, {"a": F32(0)})


def test_an_init_that_performs_effects_runs_once_under_jit_as_eagerly():
    calls = []

    def init():
        calls.append(1)
        return fx.random.normal((2,)) * ask.ask()

    def program(wrap):
        calls.clear()
        with fx.handlers(sd.init(), fx.rng.seed(0), ask.provide(F32(3))) as hs:
            f = wrap(lambda: sd.get("w", init=init) + fx.random.normal((2,)))
            outs = [f() for _ in range(3)]
        return outs, hs[sd], hs[fx.rng].counter

    expected = program(EAGER)
    assert len(calls) == 1
    got = program(fx.jit)
    assert_transparent(got, expected)
    assert len(calls) == 1  # the second trace finds the entry


def test_odd_names_are_entries_like_any_other():
    names = ["", "a/b", "a.b", "ünïcødé ✓", "0", " ", "a/b/"]

    def body():
        for i, name in enumerate(names):
            sd.set(name, sd.get(name, init=F32(i)) + 1)

    for wrap in (EAGER, fx.jit):
        with sd.init() as cell:
            wrap(body)()
            wrap(body)()
        assert_bitwise_equal(cell.value, {name: F32(i + 2) for i, name in enumerate(names)})


def test_an_eager_handled_call_that_raises_keeps_no_entry_it_created():
    inner = fx.jit(counter_body)

    def f(x):
        sd.set("made", x)
        inner(x)  # a compiled call that grows the dict, inside the failing call
        raise KeyError("boom")

    for wrap in (fx.handle, lambda g: fx.handle(g, transform=jax.jit), fx.jit):
        with sd.init({"z": F32(1)}) as cell:
            with pytest.raises(KeyError, match="boom"):
                wrap(f)(X)
            unchanged(cell, {"z": F32(1)})
    cell = sd.init({"z": F32(1)})
    with pytest.raises(KeyError, match="boom"):
        fx.handle(f, cell)(X)
    unchanged(cell, {"z": F32(1)})


# --- threads and tasks ------------------------------------------------------------------


def python_counts(n, scale):
    d = {}
    for _ in range(n):
        python_counter(X * scale, d)
    return d


def test_asyncio_tasks_and_threads_keep_separate_cells_with_one_compiled_function():
    step = fx.jit(counter_body)

    async def task(i):
        with sd.init() as cell:
            for _ in range(i + 1):
                step(X * (i + 1))
                await asyncio.sleep(0)
        return cell.value

    async def main():
        return await asyncio.gather(*(task(i) for i in range(3)))

    for i, value in enumerate(asyncio.run(main())):
        assert_transparent(value, python_counts(i + 1, i + 1))
    results = {}
    barrier = threading.Barrier(3)

    def run(i):
        with sd.init() as cell:
            barrier.wait()
            for _ in range(i + 1):
                step(X * (i + 1))
        results[i] = cell.value

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        assert_transparent(results[i], python_counts(i + 1, i + 1))


# --- raw JAX transformations -------------------------------------------------------------


def test_raw_jax_transformations_leak_errors_or_the_eager_answer():
    refused = {
        "jit get": lambda: jax.jit(lambda: sd.get("a"))(),
        "jit create": lambda: jax.jit(lambda: sd.get("q", init=F32(1)))(),
        "jit around fx.jit": lambda: jax.jit(fx.jit(counter_body))(X),
        "vmap set": lambda: jax.vmap(lambda y: sd.set("a", y))(XS),
        "vmap create from the batch": lambda: jax.vmap(lambda y: sd.get("v", init=y))(XS),
        "grad create from the input": lambda: jax.grad(lambda y: sd.get("g", init=y).sum())(X),
        "scan get": lambda: jax.lax.scan(lambda c, _: (c + sd.get("a"), None), X, None, length=2),
        "scan create": lambda: jax.lax.scan(
            lambda c, _: (c + sd.get("s", init=F32(0)), None), X, None, length=2
        ),
        "cond create": lambda: jax.lax.cond(True, lambda: sd.get("k", init=F32(0)), lambda: F32(1)),
        "checkpoint": lambda: jax.checkpoint(lambda y: sd.get("a") * y)(X),
        "eval_shape": lambda: jax.eval_shape(fx.jit(counter_body), X),
        "make_jaxpr": lambda: jax.make_jaxpr(fx.jit(counter_body))(X),
    }
    with sd.init({"a": X}) as cell:
        for call in refused.values():
            with pytest.raises(fx.EffectLeakError):
                call()
            unchanged(cell, {"a": X})
        # vmap and grad re-run Python: reading, and creating from a constant, are eager
        assert_bitwise_equal(jax.vmap(lambda y: sd.get("a") * y)(XS), XS * X[None])
        got = jax.grad(lambda y: jnp.sum(y * sd.get("c", init=F32(2))))(X)
        assert_bitwise_equal(got, jnp.full(2, 2, F32))
        # a handler installed inside the raw jit is ordinary tracing
        inside = jax.jit(lambda y: fx.handle(counter_body, sd.init())(y))(X)
    assert_bitwise_equal(inside, python_counter(X, {}))
    assert_bitwise_equal(cell.value, {"a": X, "c": F32(2)})


@pytest.mark.leaks_on_purpose
def test_a_cell_escaping_its_jit_is_refused_by_name():
    escaped = []

    @fx.jit
    def f(y):
        with sd.init() as cell:
            sd.set("a", y)
        escaped.append(cell)
        return y

    f(X)
    with pytest.raises(fx.EffectLeakError):
        with escaped[0]:
            sd.get("a")
    with pytest.raises(fx.EffectLeakError):
        fx.snapshot(escaped[0])


# --- interception --------------------------------------------------------------------------


def test_interceptors_of_get_and_set_under_jit_and_checkpoint():
    clamp = fx.intercept(sd, set=lambda outer, name, v: outer.set(name, jnp.clip(v, -1, 1)))
    double = fx.intercept(sd, get=lambda outer, name, init=None: outer.get(name, init) * 2)

    def count_sets(outer, name, v):  # an interceptor that creates entries of its own
        outer.set(name, v)
        outer.set(name + "#sets", outer.get(name + "#sets", I32(0)) + 1)

    counting = fx.intercept(sd, set=count_sets)
    prefixed = fx.intercept(
        sd,
        get=lambda outer, name, init=None: outer.get("p/" + name, init),
        set=lambda outer, name, v: outer.set("p/" + name, v),
    )

    def program(wrap, *interceptors):
        with sd.init() as cell, fx.handlers(*interceptors):
            outs = [wrap(counter_body)(X) for _ in range(3)]
        return outs, cell.value

    for interceptors in [(clamp, double), (double, clamp), (counting,), (prefixed, counting)]:
        expected = program(EAGER, *interceptors)
        for wrap in (fx.jit, fx.checkpoint, lambda g: fx.jit(fx.jit(g))):
            assert_transparent(program(wrap, *interceptors), expected)
    # the interceptors saw what plain Python would: spot-check two of them
    assert sorted(program(EAGER, prefixed, counting)[1]) == ["p/a", "p/a#sets", "p/n", "p/n#sets"]
    d = {}
    for _ in range(3):
        python_counter(X, d)
    assert_bitwise_equal(program(fx.jit, counting)[1]["n#sets"], I32(3))


# --- snapshot and restore --------------------------------------------------------------------


def test_snapshot_after_growth_survives_npz_and_restore_checks_before_writing():
    step = fx.jit(counter_body)
    with sd.init() as cell:
        step(X)
        saved = fx.snapshot(cell)
        step(X)
        before_restore = dict(cell.value)
    buffer = io.BytesIO()
    np.savez(buffer, **{f"e/{k}": v for k, v in saved["adv_sd"].items()})
    buffer.seek(0)
    loaded = {"adv_sd": {k[2:]: v for k, v in np.load(buffer).items()}}
    fresh = sd.init()
    fx.restore(loaded, fresh)
    extra = sd.init({"zz": F32(3), "a": F32([9.0, 9.0])})  # extra and matching entries
    fx.restore(loaded, extra)
    for resumed in (fresh, extra):
        assert sorted(resumed.value) == ["a", "n"]
        with resumed:
            step(X)
        assert_bitwise_equal(resumed.value, before_restore)
    # restoring an earlier snapshot shrinks a grown cell; the next call grows it again
    small = {"adv_sd": {"a": np.asarray(X)}}
    with cell:
        fx.restore(small, cell)
        assert sorted(cell.value) == ["a"]
        step(X)
    d = {"a": X}
    python_counter(X, d)
    assert_transparent(cell.value, d)
    for bad in ({"a": F32([1.0, 2.0, 3.0]), "zz": F32(0)}, {"n": F32(0)}, {"a": (X, X)}):
        target = sd.init(bad)
        with pytest.raises(fx.StateTypeError, match="does not fit"):
            fx.restore(loaded, target)
        unchanged(target, bad)


@pytest.mark.uses_jit_cache
def test_donated_state_grows_and_snapshots_stay_whole():
    traces = []

    def body(x):
        traces.append(1)
        return counter_body(x)

    step = fx.jit(body, donate_state=True)
    with sd.init({"z": F32(7)}) as cell:
        step(X)
        saved = fx.snapshot(cell)
        step(X)
        step(X)
    d = {"z": F32(7)}
    for _ in range(3):
        python_counter(X, d)
    assert_transparent(cell.value, d)
    assert not any(v.is_deleted() for v in cell.value.values())
    assert len(traces) == 2
    fresh = sd.init()
    fx.restore(saved, fresh)
    with fresh:
        step(X)
        step(X)
    assert_transparent(fresh.value, d)


# --- AOT stages and compile counts -------------------------------------------------------------


@pytest.mark.uses_jit_cache
def test_trace_and_lower_of_a_growing_call_write_nothing_and_are_reused():
    traces = []

    def body(x):
        traces.append(sorted(sd.handler().value))
        return counter_body(x)

    f = fx.jit(body)
    with sd.init({"z": F32(0)}) as cell:
        traced = f.trace(X)
        lowered = f.lower(X)
        assert isinstance(traced, jax.stages.Traced) and isinstance(lowered, jax.stages.Lowered)
        unchanged(cell, {"z": F32(0)})  # nothing ran
        outputs = [(o.shape, o.dtype) for o in jax.tree.leaves(traced.out_info)]
        assert ((2,), F32) in outputs and ((), I32) in outputs  # the created entries
        assert len(traces) == 1
        outs = [f(X) for _ in range(3)]
        grown = [(o.shape, o.dtype) for o in jax.tree.leaves(f.trace(X).out_info)]
    assert traces == [["z"], ["a", "n", "z"]]
    assert len(grown) == len(outputs)
    d = {"z": F32(0)}
    assert_transparent(outs, [python_counter(X, d) for _ in range(3)])
    assert_transparent(cell.value, d)


@pytest.mark.uses_jit_cache
def test_a_training_loop_that_creates_entries_on_step_one_traces_twice():
    traces = []

    def train_step(w, x):
        traces.append(1)
        mean = sd.get("bn/mean", init=lambda: jnp.zeros_like(x))
        steps = sd.get("steps", init=I32(0))
        sd.set("bn/mean", 0.9 * mean + 0.1 * x)
        sd.set("steps", steps + 1)
        g = jax.grad(lambda w: jnp.sum((w * (x - mean)) ** 2))(w)
        return w - 0.1 * g

    def run(wrap):
        w = F32([0.5, 0.5])
        with sd.init() as cell:
            for i in range(5):
                w = wrap(train_step)(w, X * (i + 1))
        return w, cell.value

    expected = run(EAGER)
    traces.clear()
    assert_transparent(run(fx.jit), expected)
    assert len(traces) == 2
    assert int(expected[1]["steps"]) == 5


@pytest.mark.uses_jit_cache
def test_names_chosen_by_a_static_argument_compile_once_per_dict():
    traces = []

    def body(x, name):
        traces.append(name)
        v = sd.get(name, init=lambda: jnp.zeros_like(x))
        sd.set(name, v + x)
        return v

    def run(wrap):
        with sd.init() as cell:
            outs = [wrap(body)(X, name) for name in "uvuvu"]
        return outs, cell.value

    expected = run(lambda g: g)
    traces.clear()
    assert_transparent(run(lambda g: fx.jit(g, static_argnums=1)), expected)
    assert traces == ["u", "v", "u", "v"]  # ({}, u) ({u}, v) ({u, v}, u) ({u, v}, v)


# --- control flow ------------------------------------------------------------------------------


def test_cond_and_loops_read_existing_entries_without_calling_init():
    def init():
        raise AssertionError("init called for an existing entry")

    def setter():
        sd.set("a", sd.get("a", init=init) * 2)
        return jnp.sum(sd.get("a"))

    def reader():
        return jnp.sum(sd.get("a", init=init)) + 1

    def program(cond, loop):
        with sd.init({"a": X}) as cell:
            outs = [cond(p, setter, reader) for p in (True, False, True)]
            outs.append(loop(lambda c: c + sd.get("a", init=init) + setter()))
        return outs, cell.value

    def py_cond(p, a, b):
        return a() if p else b()

    expected = program(py_cond, lambda body: body(body(X)))
    jit_cond = fx.jit(lambda p, a, b: fx.cond(p, a, b), static_argnums=(1, 2))
    looped = {
        "fori_loop": lambda body: fx.fori_loop(0, 2, lambda i, c: body(c), X),
        "scan": lambda body: fx.scan(lambda c, _: (body(c), None), X, None, length=2)[0],
        "while_loop": lambda body: fx.while_loop(
            lambda c: c[1] < 2, lambda c: (body(c[0]), c[1] + 1), (X, 0)
        )[0],
    }
    for loop in looped.values():
        assert_transparent(program(jit_cond, fx.jit(loop, static_argnums=0)), expected)
    with sd.init({"a": X}):  # a switch reads too
        assert_bitwise_equal(fx.switch(1, [lambda: F32(0), reader]), jnp.sum(X) + 1)


def test_creating_in_any_loop_or_branch_is_refused_and_changes_nothing():
    def grow():
        sd.set("a", sd.get("a") + 1)
        return jnp.sum(sd.get("new", init=F32(1)))

    regions = {
        "map": lambda: fx.map(lambda x: grow() + x, XS[:, 0]),
        "switch": lambda: fx.switch(1, [lambda: F32(0), grow]),
        "cond false branch": lambda: fx.cond(False, lambda: F32(0), grow),
        "jit in scan": lambda: fx.scan(lambda c, _: (c + fx.jit(grow)(), None), F32(0), None, 2),
        "vmap in fori": lambda: fx.fori_loop(
            0, 2, lambda i, c: c + fx.vmap(lambda x: grow() + x)(XS[:, 0]), jnp.zeros(3)
        ),
        "grad in while": lambda: fx.while_loop(
            lambda c: c < 1, lambda c: c + 1 + fx.grad(lambda y: grow() * y)(F32(1)), F32(0)
        ),
    }
    for region in regions.values():
        for wrap in (EAGER, fx.jit):
            with sd.init({"a": F32(0)}) as cell:
                with pytest.raises(fx.StateTypeError, match=r"created the entries \['new'\]"):
                    wrap(region)()
                unchanged(cell, {"a": F32(0)})


# --- random compositions --------------------------------------------------------------------------


class RefDict:
    """The reference: the dict threaded by hand through plain JAX."""

    def __init__(self, entries):
        self.d = dict(entries)

    def get(self, name, init=None):
        if name not in self.d:
            self.d[name] = init() if callable(init) else init
        return self.d[name]

    def set(self, name, value):
        self.d[name] = value


B = 2


def make_body(ops, xfree):
    """A body over the dict-like `S`; `xfree`: what it writes does not depend on x."""

    def body(S, x):
        acc = x
        for kind, k in ops:
            if kind == "read":
                acc = acc * 0.5 + S.get("e0")
            elif kind == "count":
                S.set("e1", S.get("e1") + k)
            elif kind == "write":
                e0 = S.get("e0")
                S.set("e0", e0 * 0.75 + (0.25 if xfree else 0.25 * acc))
            else:  # create
                name = f"c{k}" if k % 2 else f"c/{k}"
                made = acc * k  # what the entry is created from (if it is missing)
                v = S.get(name, init=(lambda k=k: jnp.full(2, k, F32)) if xfree else made)
                S.set(name, v * 0.5 + (1.0 if xfree else 0.5 * acc))
                acc = acc + v
        return acc

    return body


def effax_wrap(kind, f, S):
    if kind == "jit":
        return fx.jit(f)
    if kind == "checkpoint":
        return fx.checkpoint(f)
    if kind == "grad":
        return fx.grad(lambda x: jnp.sum(f(x)))
    if kind in ("vmap batched", "vmap shared"):
        return fx.vmap(f, state=kind.split()[1])
    if kind == "scan":
        return lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=2)[0]
    assert kind == "cond"

    def cond(x):
        pred = jnp.sum(S.get("e1")) % 2 == 0
        return fx.cond(pred, f, lambda x: x + jnp.sum(S.get("e0")), x)

    return cond


def ref_wrap(kind, f, S):
    if kind in ("jit", "checkpoint"):
        return f

    def threaded(in_axes, out_axes, transform):
        def g(x):
            def inner(x, d):
                S.d = dict(d)
                out = f(x)
                return out, S.d

            out, S.d = transform(inner, in_axes, out_axes)(x, S.d)
            return out

        return g

    if kind == "grad":
        return threaded(
            None,
            None,
            lambda h, *_: jax.grad(lambda x, d: (jnp.sum(h(x, d)[0]), h(x, d)[1]), has_aux=True),
        )
    if kind in ("vmap batched", "vmap shared"):
        axes = 0 if kind == "vmap batched" else None
        return threaded((0, axes), (0, axes), lambda h, i, o: jax.vmap(h, in_axes=i, out_axes=o))
    if kind == "scan":
        return lambda x: f(f(x))
    assert kind == "cond"
    return lambda x: f(x) if bool(jnp.sum(S.get("e1")) % 2 == 0) else x + jnp.sum(S.get("e0"))


def random_program(seed):
    rng = random.Random(seed)
    kinds = ["jit", "checkpoint", "grad", "vmap batched", "vmap shared", "scan", "cond"]
    depth = rng.randint(1, 3)
    wrappers = []  # outermost first
    for _ in range(depth):
        kind = rng.choice(kinds)
        if kind.startswith("vmap") and any(w.startswith("vmap") for w in wrappers):
            kind = "jit"
        if kind == "cond" and any(w.startswith("vmap") for w in wrappers):
            kind = "checkpoint"  # a batched predicate would turn the cond into a select
        wrappers.append(kind)
    ops = [
        (rng.choice(["read", "count", "write", "create", "create"]), rng.randint(1, 3))
        for _ in range(rng.randint(2, 5))
    ]
    return wrappers, ops, "vmap shared" in wrappers


def build(wrappers, body, S, wrap):
    f = lambda x: body(S, x)
    for kind in reversed(wrappers):
        f = wrap(kind, f, S)
    return f


@pytest.mark.uses_jit_cache
@pytest.mark.parametrize("seed", range(50))
def test_random_compositions_match_the_hand_threaded_program(seed):
    wrappers, ops, xfree = random_program(seed)
    body = make_body(ops, xfree)
    batched = "vmap batched" in wrappers
    x = XS[:B] if any(w.startswith("vmap") for w in wrappers) else X
    entries = {
        "e0": jnp.zeros((B, 2)) if batched else jnp.zeros(2),
        "e1": I32([0] * B if batched else 0),
    }
    looped = any(w in ("scan", "cond") for w in wrappers)
    creates = any(kind == "create" for kind, _ in ops)
    # entries are created before a loop or cond: by the same program without them
    warmup = [w for w in wrappers if w not in ("scan", "cond")]

    ref = RefDict(entries)
    if looped:
        build(warmup, body, ref, ref_wrap)(x)
    ref_outs = [build(wrappers, body, ref, ref_wrap)(x) for _ in range(2)]

    program = build(wrappers, body, sd, effax_wrap)
    with sd.init(entries) as cell:
        if looped and creates:
            with pytest.raises(fx.StateTypeError, match="created the entries"):
                program(x)
            unchanged(cell, entries)
        if looped:
            build(warmup, body, sd, effax_wrap)(x)
        outs = [program(x) for _ in range(2)]
    assert_transparent(outs, ref_outs, rtol=1e-5)
    assert_transparent(cell.value, ref.d, rtol=1e-5)
