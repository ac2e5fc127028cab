"""Taps: named sites on intermediate values, recorded, replaced and differentiated
eagerly and under every wrapper, compared with the same program written in Python
(loops unrolled, ``if`` for cond) or by hand in plain JAX."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent
from jax import lax
from jax.sharding import PartitionSpec as P

import effax as fx

F32 = jnp.float32
acts = fx.Tap[jax.Array]("acts")
other = fx.Tap[jax.Array]("other")


def body(x):
    """A body tapping "h" twice and "z" once per call."""
    h = acts.tap("h", jnp.sin(x) * 2)
    h = acts.tap("h", h + 1)
    acts.tap("z", h * 3)
    return h * x


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:8]), ("d",))


def _untapped_grad(x):
    return jax.grad(fx.handle(body, acts.ignore()))(x)


# Each wrapper of `body`, and the Python program it must record alike.
def _loop(x):
    for _ in range(3):
        x = body(x)
    return x


WRAPPERS = {
    "eager": (lambda f: f, lambda x: body(x)),
    "jit": (fx.jit, lambda x: body(x)),
    "jit of jit": (lambda f: fx.jit(lambda x: fx.jit(f)(x) * 2), lambda x: body(x) * 2),
    "scan": (
        lambda f: lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=3)[0],
        _loop,
    ),
    "jit of scan": (
        lambda f: fx.jit(lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=3)[0]),
        _loop,
    ),
    "fori_loop": (lambda f: lambda x: fx.fori_loop(0, 3, lambda i, c: f(c), x), _loop),
    "map": (
        lambda f: lambda x: jnp.sum(fx.map(f, x + jnp.arange(3.0))),
        lambda x: sum(body(x + i) for i in range(3)),
    ),
    "cond": (
        lambda f: lambda x: fx.cond(x > 0, f, lambda c: c * 2, x),
        lambda x: body(x) if x > 0 else x * 2,
    ),
    "switch": (
        lambda f: lambda x: fx.switch(1, [lambda c: c, f, f], x),
        lambda x: body(x),
    ),
    "grad": (fx.grad, lambda x: (body(x), _untapped_grad(x))[1]),
    "value_and_grad": (lambda f: lambda x: fx.value_and_grad(f)(x)[0], lambda x: body(x)),
    "checkpoint": (fx.checkpoint, lambda x: body(x)),
    "scan of checkpoint": (
        lambda f: lambda x: fx.scan(lambda c, _: (fx.checkpoint(f)(c), None), x, None, length=3)[0],
        _loop,
    ),
}
XS = [F32(0.5), F32(-0.75)]


def recorded(fn, x, *patterns):
    with fx.handlers(acts.record(*patterns)) as hs:
        out = fn(x)
    return out, hs[acts]


@pytest.mark.parametrize("name", list(WRAPPERS))
@pytest.mark.parametrize("x", XS, ids=["pos", "neg"])
def test_record_agrees_with_the_python_program(name, x):
    wrap, python = WRAPPERS[name]
    out, got = recorded(wrap(body), x)
    want_out, want = recorded(python, x)
    assert set(got) == set(want)
    assert_transparent(got, want)
    assert_transparent(out, want_out)


def test_record_stacks_taps_in_program_order_and_patterns_select_sites():
    _, got = recorded(lambda x: fx.scan(lambda c, _: (body(c), None), x, None, length=3)[0], XS[0])
    assert got["h"].shape == (6,) and got["z"].shape == (3,)
    _, only = recorded(WRAPPERS["scan"][0](body), XS[0], "z*")
    assert list(only) == ["z"]
    _, nested = recorded(
        lambda x: fx.scan(
            lambda c, _: (fx.scan(lambda d, _: (body(d), None), c, None, length=2)[0], None),
            x,
            None,
            length=2,
        )[0],
        XS[0],
    )

    def python(x):
        for _ in range(4):
            x = body(x)
        return x

    assert_transparent(nested, recorded(python, XS[0])[1])


def test_record_under_vmap_and_shard_map_carries_the_batch_axis():
    xs = jnp.arange(3.0, dtype=F32)
    _out, got = recorded(fx.vmap(body), xs)
    per = [recorded(body, x)[1] for x in xs]
    want = {site: jnp.stack([p[site] for p in per], axis=-1) for site in per[0]}
    assert got["h"].shape == (2, 3) and got["z"].shape == (3,)
    assert_transparent(got, want)
    f = fx.shard_map(lambda x: body(x)[None], mesh=_mesh(), in_specs=P(), out_specs=P("d"))
    _, sharded = recorded(f, XS[0])
    one = recorded(body, XS[0])[1]
    assert sharded["z"].shape == (8,)
    assert_transparent(sharded, {s: jnp.stack([v] * 8, axis=-1) for s, v in one.items()})


def test_record_under_cond_keeps_only_the_taken_branch_as_python_if_does():
    def f(x):
        return fx.cond(x > 0, lambda: acts.tap("a", x + 1), lambda: acts.tap("b", -x) * 2)

    def python(x):
        return acts.tap("a", x + 1) if x > 0 else acts.tap("b", -x) * 2

    for wrap in (lambda f: f, fx.jit):
        for x in XS:
            assert_transparent(recorded(wrap(f), x)[1], recorded(python, x)[1])
    # in a loop, per step: the steps that took the branch
    xs = jnp.array([1.0, -2.0, 3.0, -4.0, 5.0], F32)
    looped = lambda x0: fx.scan(lambda c, x: (c + f(x), None), x0, xs)[0]
    got = recorded(looped, F32(0))[1]
    want = recorded(lambda x0: sum(python(x) for x in xs), F32(0))[1]
    assert got["a"].shape == (3,) and got["b"].shape == (2,)
    assert_transparent(got, want)


def test_record_inside_while_loop_is_a_named_error():
    with acts.record(), pytest.raises(fx.EffectUsageError, match=r"Tap.*acts.*while_loop"):
        fx.while_loop(lambda c: c < 3, lambda c: acts.tap("a", c + 1), F32(0))
    # a site not recorded is fine
    with acts.record("other"):
        assert float(fx.while_loop(lambda c: c < 3, lambda c: acts.tap("a", c + 1), F32(0))) == 3


def test_ignore_compiles_to_the_program_without_taps():
    def untapped(x):  # the same expressions, without the taps
        h = jnp.sin(x) * 2
        h = h + 1
        _ = h * 3
        return h * x

    with acts.ignore():
        traced = fx.jit(body).trace(F32(0.5))
        y = fx.jit(body)(F32(0.5))
    assert str(traced.jaxpr) == str(jax.jit(untapped).trace(F32(0.5)).jaxpr)
    assert_bitwise_equal(y, jax.jit(untapped)(F32(0.5)))


# --- replace ---------------------------------------------------------------------


def test_replace_with_a_mapping_is_a_traced_input():
    traces = []

    def f(x):
        traces.append(1)
        return body(x)

    g = fx.jit(f)
    for v in (10.0, 20.0):
        with acts.replace({"z": F32(v), "h": F32(v)}):
            got = g(F32(0.5))
            eager = f(F32(0.5))
        assert float(got) == float(eager) == v * 0.5
    assert len(traces) == 1 + 2  # one trace, two eager calls


def test_replace_gives_each_tap_its_row_and_refuses_too_few_rows():
    def f(x):
        return fx.scan(lambda c, _: (body(c), None), x, None, length=3)[0]

    _, rec = recorded(f, XS[0])
    rows = rec["h"] * 0.5
    with acts.replace({"h": rows}) as r:
        got = fx.jit(f)(XS[0])
    assert r.value == {"h": 6}

    def python(x):
        k = 0
        for _ in range(3):
            acts.tap("h", jnp.sin(x) * 2)
            h = rows[k + 1]
            acts.tap("z", h * 3)
            x, k = h * x, k + 2
        return x

    with acts.ignore():
        assert_transparent(got, python(XS[0]))
    with (
        acts.replace({"h": rows[:4]}),
        pytest.raises(fx.EffectUsageError, match=r"'h'.*6 times.*4 rows"),
    ):
        fx.jit(f)(XS[0])
    with (
        acts.replace({"h": rows[:4]}),
        pytest.raises(fx.EffectUsageError, match=r"'h'.*5 times.*4 rows"),
    ):
        _loop(XS[0])


def test_replace_with_a_function_is_static():
    traces = []

    def f(x):
        traces.append(1)
        return body(x)

    double = lambda site, v: v * 2 if site == "z" else v
    with acts.replace(double):
        a, b = fx.jit(f)(F32(0.5)), fx.jit(f)(F32(0.5))
        want = f(F32(0.5))
    assert len(traces) == 2 and float(a) == float(b) == float(want)


def test_activation_patching_equals_a_model_taking_the_patch_as_an_argument():
    w = jax.random.normal(jax.random.key(0), (3, 4, 4), F32)

    def model(x):
        def layer(h, wl):
            return acts.tap("resid", jnp.tanh(h @ wl)), None

        return fx.scan(layer, x, w)[0].sum()

    def by_hand(x, layer_index, patch):
        def layer(h, lw):
            i, wl = lw
            # the first two components of the residual, at one layer
            h = jnp.where((i == layer_index) & (jnp.arange(4) < 2), patch, jnp.tanh(h @ wl))
            return h, None

        return lax.scan(layer, x, (jnp.arange(3), w))[0].sum()

    a, b = jnp.ones(4, F32), -jnp.ones(4, F32) * 0.3
    traces = []
    patched = fx.jit(lambda x: (traces.append(1), model(x))[1])
    with acts.record() as clean:
        fx.jit(model)(a)
    results = []
    for layer in range(3):
        where = {"resid": (jnp.arange(3) == layer)[:, None] & (jnp.arange(4) < 2)[None, :]}
        # (each handler counts the taps it replaced: one per run here)
        with acts.replace({"resid": clean.value["resid"]}, where=where):
            got = patched(b)
        with acts.replace({"resid": clean.value["resid"]}, where=where):
            eager = model(b)
        want = by_hand(b, layer, clean.value["resid"][layer])
        assert_bitwise_equal(got, want)
        assert_transparent(eager, want)
        results.append(float(got))
    assert len(traces) == 1  # a new patch, or a new mask, is a new input
    assert len(set(results)) == 3 and float(by_hand(b, -1, jnp.zeros(4, F32))) not in results
    with pytest.raises(fx.EffectUsageError, match=r"not replaced"):
        acts.replace({"resid": a}, where={"other": True})
    with pytest.raises(fx.EffectTypeError, match=r"boolean mask"):
        acts.replace({"resid": a}, where={"resid": jnp.ones(4)})


def test_replace_refuses_values_of_the_wrong_kind():
    vector = lambda x: acts.tap("v", x * jnp.ones(3, F32))
    with (
        acts.replace({"v": jnp.zeros(2, F32)}),
        pytest.raises(fx.EffectTypeError, match=r"'v'.*shape"),
    ):
        vector(F32(1))
    with (
        acts.replace({"z": jnp.int32(1)}),
        pytest.raises(fx.EffectTypeError, match=r"'z'.*dtype int32"),
    ):
        body(F32(1))
    with (
        acts.replace(lambda s, v: v.astype(jnp.float16)),
        pytest.raises(fx.EffectTypeError, match=r"returned"),
    ):
        fx.jit(body)(F32(1))
    with pytest.raises(fx.EffectTypeError, match=r"mapping"):
        acts.replace([("z", 1.0)])
    with pytest.raises(fx.EffectTypeError, match=r"takes an array"):
        acts.replace({"z": {"a": 1.0}})
    with pytest.raises(fx.EffectTypeError, match=r"fnmatch"):
        acts.record(3)


# --- gradients ----------------------------------------------------------------------

XSTEPS = jnp.array([0.5, -1.5, 2.0], F32)


def loss(w, x):
    h = acts.tap("h", jnp.tanh(w * x))
    c, _ = fx.scan(lambda c, xi: (acts.tap("step", jnp.sin(c * xi) + h), None), h, XSTEPS)
    return jnp.sum(c**2)


def loss_by_hand(w, x, eps_h, eps_step):
    h = jnp.tanh(w * x) + eps_h
    c, _ = lax.scan(lambda c, xe: (jnp.sin(c * xe[0]) + h + xe[1], None), h, (XSTEPS, eps_step))
    return jnp.sum(c**2)


W, X = jnp.array([0.3, -0.8], F32), F32(1.7)


def _want():
    zeros = (jnp.zeros(2, F32), jnp.zeros((3, 2), F32))
    gw = jax.grad(loss_by_hand)(W, X, *zeros)
    d_h, d_step = jax.grad(loss_by_hand, argnums=(2, 3))(W, X, *zeros)
    return gw, {"h": d_h, "step": d_step}


GRADIENT_WRAPPERS = {
    "grad": lambda: fx.grad(loss),
    "jit of grad": lambda: fx.jit(fx.grad(loss)),
    "grad of checkpoint": lambda: fx.grad(fx.checkpoint(loss)),
    "grad has_aux": lambda: (
        lambda w, x: fx.grad(lambda w, x: (loss(w, x), 1.0), has_aux=True)(w, x)[0]
    ),
    "value_and_grad": lambda: lambda w, x: fx.value_and_grad(loss)(w, x)[1],
    "grad in cond": lambda: lambda w, x: fx.cond(x > 0, fx.grad(loss), lambda w, x: w, w, x),
}


@pytest.mark.parametrize("name", list(GRADIENT_WRAPPERS))
def test_gradients_equal_the_hand_written_perturbation(name):
    with acts.gradients() as g:
        gw = GRADIENT_WRAPPERS[name]()(W, X)
    want_gw, want = _want()
    assert_bitwise_equal(gw, want_gw)
    assert_bitwise_equal(g.value, want)


def test_gradients_per_example_under_vmap_and_per_step_in_scan():
    ws = jnp.stack([W, -W, 2 * W])
    with acts.gradients("step") as g:
        fx.vmap(fx.grad(loss), in_axes=(0, None))(ws, X)
    zeros = (jnp.zeros(2, F32), jnp.zeros((3, 2), F32))
    per = [jax.grad(loss_by_hand, argnums=3)(w, X, *zeros) for w in ws]
    assert_transparent(g.value["step"], jnp.stack(per, axis=1))
    with acts.gradients("h") as g:
        fx.scan(lambda c, w: (c, fx.grad(loss)(w, X)), 0.0, ws)
    assert_transparent(
        g.value["h"], jnp.stack([jax.grad(loss_by_hand, argnums=2)(w, X, *zeros) for w in ws])
    )


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_gradients_of_a_site_tapped_only_in_a_loop_of_no_steps_record_nothing(wrap):
    # (found by the composition fuzzer, issue 39: the abstract run records no tap
    # of "h", so the differentiated run had no perturbation for it: ValueError)
    def f(x):
        def body(site):
            return lambda c, _: (c + acts.tap(site, c), None)

        c, _ = fx.scan(body("z"), x, None, length=0)  # "z" is tapped here only
        y, _ = fx.scan(body("h"), x, None, length=2)
        return c * 2.0 + jnp.sum(acts.tap("g", y))

    run = fx.value_and_grad(f) if wrap == "eager" else fx.jit(fx.value_and_grad(f))
    with acts.gradients() as g:
        value, grad = run(F32(0.7))
    # by hand: c = x; y = 4x (two steps of c + c); f = 2x + 4x
    assert_bitwise_equal((value, grad), (F32(0.7) * 2.0 + 4 * F32(0.7), F32(6.0)))
    assert set(g.value) == {"h", "g"}  # no "z": no step tapped it, as in a Python loop
    assert g.value["h"].shape == (2,)
    assert_bitwise_equal(g.value["g"], F32(1.0))


def test_gradients_of_a_cond_site_follow_the_branch_taken():
    def f(w, p):
        h = fx.cond(p, lambda: acts.tap("a", w * 3), lambda: w)
        return jnp.sum(jnp.sin(acts.tap("b", h)))

    for p in (True, False):
        with acts.gradients() as g:
            fx.jit(fx.grad(f))(W, p)
        assert set(g.value) == ({"a", "b"} if p else {"b"})
        want_b = jnp.cos(W * 3) if p else jnp.cos(W)
        assert_transparent(g.value["b"], want_b)
        if p:
            assert_transparent(g.value["a"], want_b)


def test_gradients_refuse_what_has_none():
    with acts.gradients(), pytest.raises(fx.EffectTypeError, match=r"'n'.*int32.*no gradient"):
        fx.grad(lambda w: w * acts.tap("n", jnp.int32(2)))(F32(1))
    with acts.gradients(), pytest.raises(fx.EffectUsageError, match=r"effax.vmap\(effax.grad"):
        fx.grad(lambda w: jnp.sum(fx.vmap(lambda v: acts.tap("v", v * w))(jnp.ones(3))))(F32(1))
    with acts.gradients() as g:  # outside effax.grad, taps pass through, record nothing
        assert float(body(F32(0.5))) == float(fx.jit(body)(F32(0.5)))
    assert g.value == {}


# --- adversarial ------------------------------------------------------------------


def test_unhandled_taps_and_wrong_sites_are_named_errors():
    with pytest.raises(fx.UnhandledEffectError, match=r"Tap\('acts'\).*acts.ignore\(\)"):
        body(F32(1))
    with acts.ignore(), pytest.raises(fx.EffectTypeError, match=r"site's name as a str"):
        acts.tap(3, F32(1))
    with acts.record(), pytest.raises(fx.EffectLeakError):
        jax.vmap(fx.jit(body))(jnp.ones(2))


def test_a_failed_call_leaves_the_recording_as_it_was():
    def bad(x):
        body(x)
        raise ValueError("boom")

    with acts.record() as r:
        body(F32(1))
        before = dict(r.value)
        for wrap in (fx.jit, WRAPPERS["scan"][0]):
            with pytest.raises(ValueError, match=r"boom"):
                wrap(bad)(F32(1))
    assert_bitwise_equal(r.value, before)


def test_none_values_and_two_tap_effects_and_threads():
    with acts.record() as r, other.record() as o:
        with pytest.raises(fx.EffectTypeError, match=r"'none'.*NoneType.*record\(\) records"):
            acts.tap("none", None)
        other.tap("x", F32(2))
    assert r.value == {} and float(o.value["x"]) == 2
    with acts.ignore():  # taps off: any value passes
        assert acts.tap("none", None) is None

    results = {}

    def worker(i):
        with acts.record() as rec:
            fx.jit(body)(F32(i))
        results[i] = rec.value

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert_transparent(results[i], recorded(body, F32(i))[1])


def test_an_interceptor_of_a_tap_reinterprets_it():
    scale = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, v * 2))
    with acts.record() as r, scale:
        fx.jit(lambda x: acts.tap("a", x))(F32(3))
    assert float(r.value["a"]) == 6


def test_an_interceptor_over_a_recorder_in_a_cond_and_over_gradients():
    shift = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, v + 1))

    def f(x):
        return fx.cond(x > 0, lambda: acts.tap("a", x), lambda: x)

    for x in XS:
        with acts.record() as r, shift:
            got = fx.jit(f)(x)
        with acts.record() as want, shift:
            expected = acts.tap("a", x) if x > 0 else x
        assert_transparent((got, r.value), (expected, want.value))
    with acts.gradients() as g, shift:
        fx.grad(lambda w: jnp.sum(jnp.sin(acts.tap("h", w * 3))))(W)
    assert_transparent(g.value["h"], jnp.cos(W * 3 + 1))


def test_replace_under_while_loop_vmap_shard_map_and_after_a_cond():
    rows = jnp.array([10.0, 20.0, 30.0, 60.0], F32)

    def python_while(x):
        while x < 50:
            x = acts.tap("a", x + 1) + 1
        return x

    compiled_while = lambda x: fx.while_loop(
        lambda c: c < 50, lambda c: acts.tap("a", c + 1) + 1, x
    )
    for fn in (compiled_while, fx.jit(compiled_while)):
        with acts.replace({"a": rows}) as got:
            out = fn(F32(0))
        with acts.replace({"a": rows}) as want:
            expected = python_while(F32(0))
        assert float(out) == float(expected) and got.value == want.value == {"a": 4}
    # one row short: Python raises at the fifth tap; compiled, the fifth tap is NaN
    # (the loop stops) and the call raises once it returns
    with (
        acts.replace({"a": rows[:3]}),
        pytest.raises(fx.EffectUsageError, match=r"4 times.*3 rows"),
    ):
        fx.jit(compiled_while)(F32(0))

    # per element, one replacement for the whole batch
    with acts.replace({"a": F32(7)}):
        batched = fx.vmap(lambda x: acts.tap("a", x) * x)(jnp.arange(3.0, dtype=F32))
        sharded = fx.shard_map(
            lambda x: (acts.tap("a", x) * 2)[None], mesh=_mesh(), in_specs=P(), out_specs=P("d")
        )(F32(1))
    assert_bitwise_equal(batched, 7 * jnp.arange(3.0, dtype=F32))
    assert_bitwise_equal(sharded, jnp.full(8, 14.0, F32))

    # a cond tapping in one branch only: the taps after it take the right rows
    def f(x):
        y = fx.cond(x > 0, lambda: acts.tap("a", x), lambda: x)
        return acts.tap("a", y) + acts.tap("a", y)

    def python(x):
        y = acts.tap("a", x) if x > 0 else x
        return acts.tap("a", y) + acts.tap("a", y)

    for x in XS:
        with acts.replace({"a": rows}) as got:
            out = fx.jit(f)(x)
        with acts.replace({"a": rows}) as want:
            expected = python(x)
        assert float(out) == float(expected) and got.value == want.value


def test_gradients_under_shard_map_and_inside_while_loop():
    f = fx.shard_map(
        lambda w: fx.grad(lambda w: jnp.sum(jnp.sin(acts.tap("h", w * 3))))(w)[None],
        mesh=_mesh(),
        in_specs=P(),
        out_specs=P("d"),
    )
    with acts.gradients() as g:
        f(W)
    assert_transparent(g.value["h"], jnp.stack([jnp.cos(W * 3)] * 8))
    grad_step = fx.grad(lambda w: jnp.sum(acts.tap("h", w) ** 2))
    with acts.gradients(), pytest.raises(fx.EffectUsageError, match=r"Tap\('acts'\).*while_loop"):
        fx.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, grad_step(c[1])), (0, W))


def test_gradients_under_a_raw_jax_grad_is_a_named_error():
    f = lambda w: jnp.sum(jnp.sin(acts.tap("h", w * 3)))
    with (
        acts.gradients(),
        pytest.raises(fx.EffectUsageError, match=r"raw jax.grad.*effax.grad"),
    ):
        jax.grad(f)(W)
    with acts.gradients() as g:  # the same under effax.grad
        fx.grad(f)(W)
    assert_transparent(g.value["h"], jnp.cos(W * 3))
    with acts.gradients("other"):  # a site it does not record passes
        jax.grad(f)(W)


def test_replace_under_grad_and_checkpoint_equals_the_hand_written_patch():
    rows = jnp.array([[0.25, -0.5], [1.0, 2.0], [-1.0, 0.5]], F32)

    def by_hand(w, x):
        h = jnp.tanh(w * x)
        c, _ = lax.scan(lambda c, r: (r, None), h, rows)  # every "step" replaced
        return jnp.sum(c**2) + jnp.sum(h)

    def tapped(w, x):
        return loss(w, x) + jnp.sum(jnp.tanh(w * x))

    for wrap in (fx.grad, lambda f: fx.grad(fx.checkpoint(f)), lambda f: fx.jit(fx.grad(f))):
        with acts.replace({"step": rows}) as r:
            got = wrap(tapped)(W, X)
        assert r.value == {"step": 3}
        assert_transparent(got, jax.grad(by_hand)(W, X))


def test_a_cond_taken_by_some_elements_in_a_loop_is_a_named_error_not_element_0s_answer():
    """A batched cond in a vmap in a scan: the per-element masks stay per element
    through the loop's stacking (it kept element 0's, and recorded nothing here)."""
    ys = jnp.array([0.0, 2.0, 4.0], F32)

    def step(c, x):
        return c, fx.vmap(lambda y: fx.cond(y > x, lambda: acts.tap("a", y), lambda: y))(ys)

    with acts.record() as r:
        fx.scan(step, F32(0), jnp.array([1.0, 3.0], F32))
    with pytest.raises(fx.EffectUsageError, match=r"'a'.*some elements of an effax.vmap"):
        _ = r.value
    with acts.record() as r:  # every element takes it: recorded, per element
        fx.scan(step, F32(0), jnp.array([-1.0, -2.0], F32))
    assert_bitwise_equal(r.value["a"], jnp.stack([ys, ys]))
