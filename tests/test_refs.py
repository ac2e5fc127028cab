"""A `jax.Ref` held by an `Ask` or a `State` (alone or inside a pytree): writes land
in the ref eagerly and under every effax wrapper whose JAX counterpart lets a body
close over a ref (jit, scan, fori_loop, while_loop, cond, checkpoint), reads work
under `effax.vmap`, and what JAX refuses (a write under vmap, a ref under
shard_map, a write of a differentiated value under grad) raises effax's named
error saying why. Every answer is compared with the Python program."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import effax as fx

source = fx.Ask[Any]("source")
cell = fx.State[Any]("cell")
count = fx.State[Any]("count")

XS = jnp.arange(12.0).reshape(4, 3)


def _ref():
    return jax.new_ref(jnp.zeros(3))


def _read(how):
    """The ref, through the effect `how` names."""
    if how == "ask":
        return source.ask()
    if how == "state":
        return cell.get()
    return cell.get()["ref"]


def _installed(how, ref):
    """The handlers holding `ref` the way `how` names."""
    if how == "ask":
        return fx.handlers(source.provide(ref))
    if how == "state":
        return fx.handlers(cell.init(ref))
    return fx.handlers(cell.init({"ref": ref, "n": jnp.int32(0)}))


def _step(how, x):
    """Add `x` into the ref, count the step in the pytree state; returns the sum."""
    ref = _read(how)
    ref[...] = ref[...] + x
    if how == "tree":
        tree = cell.get()
        cell.set({"ref": tree["ref"], "n": tree["n"] + 1})
    return jnp.sum(ref[...])


def _python(xs):
    """The Python program: the ref's final contents and the step results."""
    total, outs = np.zeros(3, np.float32), []
    for x in np.asarray(xs):
        total = total + x
        outs.append(total.sum())
    return total, np.asarray(outs, np.float32)


def _scan(how):
    return fx.scan(lambda c, x: (c + 1, _step(how, x)), 0, XS)[1]


def _fori(how):
    return fx.fori_loop(0, 4, lambda i, acc: acc.at[i].set(_step(how, XS[i])), jnp.zeros(4))


def _while(how):
    def body(state):
        i, acc = state
        return i + 1, acc.at[i].set(_step(how, XS[i]))

    return fx.while_loop(lambda s: s[0] < 4, body, (0, jnp.zeros(4)))[1]


def _cond(how):
    outs = []
    for i in range(4):
        outs.append(fx.cond(i % 2 == 0, lambda x: _step(how, x), lambda x: _step(how, x), XS[i]))
    return jnp.stack(outs)


def _eager(how):
    return jnp.stack([_step(how, x) for x in XS])


RUNS = {"eager": _eager, "scan": _scan, "fori_loop": _fori, "while_loop": _while, "cond": _cond}
HOWS = ["ask", "state", "tree"]

# A pytree holding a ref whose other leaves change cannot leave a compiled call
# (JAX returns no ref from a jitted function): refused, naming the state.
TREE_OUT = (
    r"State\('cell'\) holds a jax\.Ref in a pytree whose other values changed "
    r"inside a compiled call"
)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize("jit", [False, True], ids=["direct", "in_jit"])
def test_writes_land_in_the_ref(how, run, jit):
    ref = _ref()
    fn = RUNS[run]
    if how == "tree" and jit:
        with _installed(how, ref), pytest.raises(fx.EffectTypeError, match=TREE_OUT):
            fx.jit(fn, static_argnums=0)(how)
        return
    with _installed(how, ref):
        outs = (fx.jit(fn, static_argnums=0) if jit else fn)(how)
        if how == "tree":
            assert cell.get()["ref"] is ref
            assert int(cell.get()["n"]) == 4
        elif how == "state":
            assert cell.get() is ref
    total, expected = _python(XS)
    np.testing.assert_allclose(np.asarray(ref[...]), total)
    np.testing.assert_allclose(np.asarray(outs), expected)


def test_tree_under_compiled_calls_is_refused():
    for wrapper in (fx.jit, fx.checkpoint):
        ref = _ref()
        with _installed("tree", ref), pytest.raises(fx.EffectTypeError, match=TREE_OUT):
            wrapper(lambda x: _step("tree", x))(XS[0])
        # a tree only read (its ref written through) never leaves: no obstacle
        with _installed("tree", ref):
            wrapper(_write_only)(XS[0])
            assert int(cell.get()["n"]) == 0
        np.testing.assert_allclose(np.asarray(ref[...]), np.asarray(XS[0]))


def _write_only(x):
    r = cell.get()["ref"]
    r[...] = r[...] + x
    return jnp.sum(r[...])


@pytest.mark.parametrize("how", ["ask", "state"])
def test_jit_called_again_writes_again(how):
    ref = _ref()
    f = fx.jit(lambda x: _step(how, x))
    with _installed(how, ref):
        outs = [f(x) for x in XS]
    total, expected = _python(XS)
    np.testing.assert_allclose(np.asarray(ref[...]), total)
    np.testing.assert_allclose(np.asarray(outs), expected)


def test_another_ref_is_another_input():
    """A compiled call reads the ref installed now, not the one it was traced with."""
    f = fx.jit(lambda x: _step("ask", x))
    first, second = _ref(), _ref()
    with source.provide(first):
        f(XS[0])
    with source.provide(second):
        f(XS[1])
    np.testing.assert_allclose(np.asarray(first[...]), np.asarray(XS[0]))
    np.testing.assert_allclose(np.asarray(second[...]), np.asarray(XS[1]))


@pytest.mark.parametrize("how", ["ask", "state"])
def test_checkpoint_writes_land(how):
    ref = _ref()
    with _installed(how, ref):
        outs = jnp.stack([fx.checkpoint(lambda x: _step(how, x))(x) for x in XS])
    total, expected = _python(XS)
    np.testing.assert_allclose(np.asarray(ref[...]), total)
    np.testing.assert_allclose(np.asarray(outs), expected)


@pytest.mark.parametrize("how", ["ask", "state"])
def test_grad_reads_and_writes_what_is_not_differentiated(how):
    ref = _ref()

    def loss(w):
        r = _read(how)
        r[...] = r[...] + 1.0
        return jnp.sum(w * r[...])

    with _installed(how, ref):
        g = fx.grad(loss)(jnp.ones(3))
    np.testing.assert_allclose(np.asarray(g), np.ones(3))
    np.testing.assert_allclose(np.asarray(ref[...]), np.ones(3))


@pytest.mark.parametrize("how", ["ask", "state"])
def test_grad_refuses_writing_a_differentiated_value(how):
    ref = _ref()

    def loss(w):
        _read(how)[...] = w
        return jnp.sum(w)

    with (
        _installed(how, ref),
        pytest.raises(
            fx.EffectUsageError,
            match=(
                r"differentiated value .* jax\.Ref held by "
                r"(Ask\('source'\)|State\('cell'\)).*stop_gradient"
            ),
        ),
    ):
        fx.grad(loss)(jnp.ones(3))


@pytest.mark.parametrize("how", HOWS)
def test_vmap_reads_the_ref(how):
    ref = jax.new_ref(jnp.arange(3.0))
    with _installed(how, ref):
        outs = fx.vmap(lambda x: x * _read(how)[...])(XS)
    np.testing.assert_allclose(np.asarray(outs), np.asarray(XS) * np.arange(3.0))


@pytest.mark.parametrize("how", HOWS)
def test_vmap_refuses_writing_the_ref(how):
    ref = _ref()
    with (
        _installed(how, ref),
        pytest.raises(
            fx.EffectUsageError,
            match=r"jax\.Ref held by (Ask\('source'\)|State\('cell'\)) .*effax\.vmap.*read",
        ),
    ):
        fx.vmap(lambda x: _step(how, x))(XS)
    np.testing.assert_allclose(np.asarray(ref[...]), np.zeros(3))


@pytest.mark.parametrize("how", HOWS)
def test_shard_map_refuses_the_ref(how):
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    ref = _ref()
    f = fx.shard_map(lambda x: x + _read(how)[...], mesh=mesh, in_specs=P(), out_specs=P())
    with (
        _installed(how, ref),
        pytest.raises(
            fx.EffectTypeError,
            match=r"holds a jax\.Ref, which cannot cross effax\.shard_map.*ref\[\.\.\.\]",
        ),
    ):
        f(jnp.ones(3))


def test_shard_map_without_the_effect_is_no_obstacle():
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    with source.provide(_ref()), count.init(jnp.float32(0)):
        out = fx.shard_map(lambda x: x * 2, mesh=mesh, in_specs=P(), out_specs=P())(jnp.ones(3))
    np.testing.assert_allclose(np.asarray(out), 2 * np.ones(3))


@pytest.mark.parametrize("wrapper", ["jit", "scan", "jit_scan"])
def test_state_set_to_another_ref_is_refused_inside_a_region(wrapper):
    ref, other = _ref(), _ref()

    def body(c, x):
        cell.set(other)
        return c, x

    run = {
        "jit": fx.jit(lambda: body(0, 0)),
        "scan": lambda: fx.scan(body, 0, XS),
        "jit_scan": fx.jit(lambda: fx.scan(body, 0, XS)),
    }[wrapper]
    with cell.init(ref):
        with pytest.raises(
            fx.EffectTypeError, match=r"State\('cell'\) was set to another jax\.Ref inside"
        ):
            run()
        assert cell.get() is ref


def test_state_set_to_another_ref_eagerly_is_a_plain_write():
    ref, other = _ref(), _ref()
    with cell.init(ref):
        cell.set(other)
        assert cell.get() is other
