"""`StateDict`: named state created on first use (Haiku's get_state / set_state),
eagerly and under every wrapper, against the same program in plain Python; entries
created inside a compiled call grow its outputs (one more compile, then warm)."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent

import effax as fx

F32 = jnp.float32
stats = fx.StateDict[jax.Array]("stats")


def norm(x, name):
    """A batch-norm-like layer: a moving mean and a step count per name."""
    mean = stats.get(f"{name}/mean", init=lambda: jnp.zeros(x.shape[-1:], x.dtype))
    count = stats.get(f"{name}/count", init=jnp.int32(0))
    stats.set(f"{name}/mean", 0.9 * mean + 0.1 * x)
    stats.set(f"{name}/count", count + 1)
    return x - mean


def model(x):
    h = norm(x, "a") * 2.0
    return jnp.sum(norm(jnp.tanh(h), "b"))


def python_model(x, d):
    """`model` with the dict threaded by hand."""

    def layer(x, name):
        mean = d.get(f"{name}/mean", jnp.zeros(x.shape[-1:], x.dtype))
        count = d.get(f"{name}/count", jnp.int32(0))
        d[f"{name}/mean"], d[f"{name}/count"] = 0.9 * mean + 0.1 * x, count + 1
        return x - mean

    return jnp.sum(layer(jnp.tanh(layer(x, "a") * 2.0), "b"))


XS = [F32([0.5, -1.0]) * (i + 1) for i in range(3)]

WRAPPERS = {
    "eager": lambda g: g,
    "jit": fx.jit,
    "checkpoint": fx.checkpoint,
    "jit(checkpoint)": lambda g: fx.jit(fx.checkpoint(g)),
    "handle": lambda g: fx.handle(g),
    "nested jit": lambda g: fx.jit(lambda x: fx.jit(g)(x)),
}


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_entries_created_on_first_use_match_the_python_program(wrapper):
    g = WRAPPERS[wrapper](model)
    expected, d = [], {}
    for x in XS:
        expected.append(python_model(x, d))
    with stats.init() as cell:
        outs = [g(x) for x in XS]
    assert_transparent(outs, expected)
    assert_transparent(cell.value, d)
    assert sorted(cell.value) == ["a/count", "a/mean", "b/count", "b/mean"]


def test_a_compiled_call_compiles_once_for_the_grown_dict_then_runs_warm():
    traces = []

    @fx.jit
    def step(x):
        traces.append(sorted(stats.handler().value))
        return model(x)

    with stats.init() as cell:
        for x in [*XS, *XS]:
            step(x)
    # the first call creates the entries (traced with none), the second compiles
    # for the grown dict, and the four after it run warm
    assert traces == [[], ["a/count", "a/mean", "b/count", "b/mean"]]
    assert int(cell.value["a/count"]) == 6
    # a cell that already holds them reuses the second program
    with stats.init(dict(cell.value)):
        step(XS[0])
    assert len(traces) == 2


def test_the_init_function_is_called_only_when_the_entry_is_created():
    calls = []

    def init():
        calls.append(1)
        return F32(1)

    f = fx.jit(lambda: stats.get("w", init=init) * 2)
    with stats.init():
        assert [float(f()) for _ in range(3)] == [2.0, 2.0, 2.0]
    assert len(calls) == 1  # traced once with the entry missing
    with stats.init({"w": F32(5)}):
        assert float(stats.get("w", init=init)) == 5.0
    assert len(calls) == 1


def test_an_existing_entry_is_a_carry_of_scan_and_fori_loop():
    def python(xs, d):
        return [python_model(x, d) for x in xs]

    xs = jnp.stack(XS)
    d = {}
    python_model(XS[0], d)
    expected = python(XS, d)
    for loop in ("scan", "fori_loop"):
        with stats.init() as cell:
            model(XS[0])  # creates the entries (the loop's carry cannot grow)
            if loop == "scan":
                _, outs = fx.scan(lambda c, x: (c, model(x)), 0, xs)
            else:
                outs = fx.fori_loop(0, 3, lambda i, acc: acc.at[i].set(model(xs[i])), jnp.zeros(3))
        assert_transparent(list(outs), expected)
        assert_transparent(cell.value, d)


LOOPS = {
    "scan": lambda: fx.scan(lambda c, x: (c, model(x)), 0, jnp.stack(XS)),
    "fori_loop": lambda: fx.fori_loop(0, 2, lambda i, c: c + model(XS[0]), F32(0)),
    "while_loop": lambda: fx.while_loop(lambda c: c < 1, lambda c: c + 1 + model(XS[0]), F32(0)),
    "cond": lambda: fx.cond(True, lambda: model(XS[0]), lambda: F32(0)),
    "jit(scan)": lambda: fx.jit(lambda: fx.scan(lambda c, x: (c, model(x)), 0, jnp.stack(XS)))(),
}


@pytest.mark.parametrize("loop", list(LOOPS))
def test_an_entry_created_in_a_loop_body_or_branch_is_a_named_error(loop):
    with stats.init({"a/mean": F32([1, 2])}) as cell:
        with pytest.raises(fx.StateTypeError, match=r"created the entries .*'a/count'.* loop"):
            LOOPS[loop]()
        assert list(cell.value) == ["a/mean"]  # unchanged
        assert_bitwise_equal(cell.value["a/mean"], F32([1, 2]))


def test_effax_vmap_batched_gives_a_created_entry_one_row_per_element():
    xs = jnp.stack(XS)
    with stats.init() as cell:
        outs = fx.vmap(model, state="batched")(xs)
    rows = []
    for x in XS:
        d = {}
        rows.append((python_model(x, d), d))
    assert_transparent(list(outs), [r[0] for r in rows])
    for name in cell.value:
        assert_transparent(cell.value[name], jnp.stack([r[1][name] for r in rows]))
    # the batched entries then enter the next batched call along their axis
    with cell:
        fx.vmap(model, state="batched")(xs)
    assert cell.value["a/count"].tolist() == [2, 2, 2]


def test_effax_vmap_shared_takes_an_entry_that_is_the_same_for_every_element():
    def count(x):
        n = stats.get("n", init=jnp.int32(0))  # independent of the batch
        stats.set("n", n + 1)
        return x * 2

    with stats.init() as cell:
        fx.vmap(count)(jnp.ones(3))
    assert_bitwise_equal(cell.value, {"n": jnp.int32(1)})
    # an entry created from a batched value cannot be shared: named, nothing kept
    with stats.init() as cell:
        with pytest.raises(fx.EffectLeakError, match="differs across the batch"):
            fx.vmap(lambda x: stats.get("x", init=x))(jnp.ones(3))
    assert cell.value == {}


def test_gradients_flow_through_entries_and_created_entries_come_out():
    def loss(w):
        scale = stats.get("scale", init=F32(3))
        stats.set("seen", w)  # created from the differentiated input
        return jnp.sum(w * scale) ** 2

    w = F32([1.0, 2.0])
    expected = jax.grad(lambda w: jnp.sum(w * 3) ** 2)(w)
    for wrap in (lambda g: g, fx.jit, fx.checkpoint):
        with stats.init() as cell:
            assert_bitwise_equal(fx.grad(wrap(loss))(w), expected)
        assert_bitwise_equal(cell.value, {"scale": F32(3), "seen": w})
    with stats.init() as cell:
        value, grad = fx.jit(fx.value_and_grad(loss))(w)
    assert_bitwise_equal((value, grad), (jnp.sum(w * 3) ** 2, expected))
    assert sorted(cell.value) == ["scale", "seen"]


def test_snapshot_and_restore_resume_into_a_fresh_empty_cell():
    step = fx.jit(model)
    with stats.init() as cell:
        step(XS[0])
        saved = fx.snapshot(cell)
        for x in XS[1:]:
            step(x)
    fresh = stats.init()
    fx.restore(saved, fresh)
    with fresh:
        for x in XS[1:]:
            step(x)
    assert_bitwise_equal(fresh.value, cell.value)
    # an entry of another dtype than the cell's is refused, and nothing is written
    other = stats.init({"a/count": F32(0), "z": F32(1)})
    with pytest.raises(fx.StateTypeError, match="does not fit"):
        fx.restore(saved, other)
    assert_bitwise_equal(other.value, {"a/count": F32(0), "z": F32(1)})
    # restoring replaces the entries by the snapshot's
    other = stats.init({"z": F32(1)})
    fx.restore(saved, other)
    assert sorted(other.value) == sorted(saved["stats"])


def test_missing_entries_and_bad_names_are_named_errors():
    with stats.init({"a": F32(1)}):
        with pytest.raises(fx.EffectUsageError, match=r"no entry 'b' yet .*\['a'\].*init="):
            stats.get("b")
        with pytest.raises(fx.EffectUsageError, match="no entry 'b'"):
            fx.jit(lambda: stats.get("b"))()
        with pytest.raises(fx.EffectTypeError, match="named by str, not by a int"):
            stats.get(3, init=F32(0))  # type: ignore[arg-type]
        with pytest.raises(fx.EffectTypeError, match="named by str"):
            stats.set(("a",), F32(0))  # type: ignore[arg-type]
    with pytest.raises(fx.EffectTypeError, match="takes a dict of named states, not a list"):
        stats.init([("a", F32(1))])  # type: ignore[arg-type]
    with pytest.raises(fx.EffectTypeError, match="named by str"):
        stats.init({1: F32(1)})  # type: ignore[dict-item]
    with pytest.raises(fx.UnhandledEffectError, match=r"stats\.init\(\)"):
        stats.get("a", init=F32(0))


def test_an_entry_may_hold_none_or_a_pytree():
    def f(x):
        opt = stats.get("opt", init=None)  # no init: an entry holding None must exist
        tree = stats.get("tree", init=lambda: {"m": jnp.zeros(2), "v": (F32(0), F32(1))})
        stats.set("tree", jax.tree.map(lambda t: t + x, tree))
        return x if opt is None else x + opt

    for wrap in (lambda g: g, fx.jit):
        with stats.init({"opt": None}) as cell:
            wrap(f)(F32(1))
            out = wrap(f)(F32(1))
        assert_bitwise_equal(out, F32(1))
        assert cell.value["opt"] is None
        assert_bitwise_equal(cell.value["tree"], {"m": jnp.full(2, 2, F32), "v": (F32(2), F32(3))})


def test_a_failed_call_keeps_no_entry_it_created():
    def f(x):
        stats.set("made", x)
        stats.set("old", stats.get("old") + 1)
        raise RuntimeError("boom")

    for wrap in (fx.handle, fx.jit):
        with stats.init({"old": F32(0)}) as cell:
            with pytest.raises(RuntimeError, match="boom"):
                wrap(f)(F32(1))
        assert_bitwise_equal(cell.value, {"old": F32(0)})


def test_raw_jax_transformations_refuse_the_handler_outside_them():
    with stats.init({"a": F32(1)}) as cell:
        with pytest.raises(fx.EffectLeakError):
            jax.jit(lambda: stats.get("a"))()
        with pytest.raises(fx.EffectLeakError):
            jax.grad(lambda x: (stats.set("b", x), x)[1])(F32(1))
        # grad and vmap re-run Python: an entry created from a constant is fine
        assert_bitwise_equal(jax.grad(lambda x: x * stats.get("c", init=F32(2)))(F32(1)), F32(2))
    assert sorted(cell.value) == ["a", "c"]


def test_an_interceptor_answers_get_and_set():
    doubled = fx.intercept(stats, get=lambda outer, name, init=None: outer.get(name, init) * 2)
    with stats.init() as cell, doubled:
        a = stats.get("a", init=F32(1.5))
        b = fx.jit(lambda: stats.get("a") + stats.get("b", init=F32(1)))()
    assert (float(a), float(b)) == (3.0, 5.0)
    assert_bitwise_equal(cell.value, {"a": F32(1.5), "b": F32(1)})


def test_threads_keep_their_own_cells():
    step = fx.jit(model)
    results = {}

    def run(i):
        with stats.init() as cell:
            for x in XS[: i + 1]:
                step(x)
        results[i] = cell.value

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        d = {}
        for x in XS[: i + 1]:
            python_model(x, d)
        assert_transparent(results[i], d)


def test_donated_state_grows_and_keeps_its_entries():
    step = fx.jit(model, donate_state=True)
    with stats.init() as cell:
        for x in XS:
            step(x)
    d = {}
    for x in XS:
        python_model(x, d)
    assert_transparent(cell.value, d)
    assert all(not v.is_deleted() for v in cell.value.values())
    assert np.isfinite(np.asarray(cell.value["b/mean"])).all()


def test_effax_shard_map_shares_a_created_entry_and_refuses_one_per_device():
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))

    def step(x):
        n = stats.get("n", init=jnp.int32(0))
        stats.set("n", n + 1)
        total = stats.get("total", init=lambda: jnp.zeros(2))
        # the same on every device
        stats.set("total", total + jnp.broadcast_to(jax.lax.psum(x.sum(0), "d"), total.shape))
        return jax.lax.psum(x.sum(), "d")

    def sharded(state):
        spec = PartitionSpec("d")
        return fx.shard_map(step, mesh=mesh, in_specs=spec, out_specs=PartitionSpec(), state=state)

    xs = jnp.arange(16.0).reshape(8, 2)
    with stats.init() as cell:
        sharded("shared")(xs)
        sharded("shared")(xs)
    assert_bitwise_equal(cell.value, {"n": jnp.int32(2), "total": 2 * xs.sum(0)})
    with stats.init() as cell:
        with pytest.raises(fx.EffectUsageError, match=r"gained entries inside effax.shard_map"):
            sharded("batched")(xs)
    assert cell.value == {}
    # existing per-device entries are carried along their leading axis
    with stats.init({"n": jnp.zeros(4, jnp.int32), "total": jnp.zeros((4, 1, 2))}) as cell:
        sharded("batched")(xs)
    assert cell.value["n"].tolist() == [1, 1, 1, 1]
    assert_bitwise_equal(cell.value["total"], jnp.broadcast_to(xs.sum(0), (4, 1, 2)))
