"""`effax.nnx`: every effect kind through every Flax NNX twin, eager and under
`nnx.jit`, against the program without the transform (issue 41, item 3).

Each case runs a module with parameters and BatchNorm statistics (module state NNX
carries) that performs one kind of effect in its `__call__`, through one
`effax.nnx` wrapper, and compares the output, the module state and what the
handlers saw with the reference program: the Python loop over the steps (scan,
fori_loop, while_loop), the Python `if` (cond, switch), the plain call (remat), and
effax's own wrapper of the functional program (`nnx.split` / `nnx.merge`) where the
reference needs a transformation (vmap's batch; the gradients), which the core suite
pins to the Python program.
"""

import functools as ft
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import effax as fx
import effax.nnx as fxn

scale = fx.Ask[jax.Array]("scale")
mode = fx.Ask[str]("mode", static=True)
noise = fx.RandomKey("noise")
total = fx.State[jax.Array]("total")
log = fx.Emit[jax.Array]("log")
acts = fx.Tap[jax.Array]("acts")

D, L = 3, 3
X = (jnp.arange(4 * D, dtype=jnp.float32).reshape(4, D) - 5) / 7


def perform(kind, x):
    """The block's effect of this kind, applied to its output."""
    if kind in ("ask", "intercept"):
        return x * scale.ask()
    if kind == "ask_static":
        return x * 2 if mode.ask() == "double" else x
    if kind == "key":
        return x + 0.1 * jax.random.normal(noise.next_key(), x.shape)
    if kind == "state":
        total.set(total.get() + jnp.mean(x))
        return x
    if kind == "emit":
        log.emit(jnp.mean(x, axis=0))
        return x
    if kind in ("record", "replace"):
        return acts.tap("h", x)
    raise AssertionError(kind)


def handlers(kind):
    """Fresh handlers for one run, and what to read from them afterwards."""
    if kind == "ask":
        return [scale.provide(jnp.float32(1.5))], lambda hs: None
    if kind == "intercept":
        return [
            scale.provide(jnp.float32(1.5)),
            fx.intercept(scale, ask=lambda outer: outer.ask() * 2),
        ], lambda hs: None
    if kind == "ask_static":
        return [mode.provide("double")], lambda hs: None
    if kind == "key":
        # (a count a while_loop cannot know at trace time comes out as a traced int32)
        return [noise.seed(3)], lambda hs: int(hs[noise].counter)
    if kind == "state":
        return [total.init(jnp.float32(0))], lambda hs: hs[total]
    if kind == "emit":
        # (a loop's emits stacked per step, a Python loop's one by one: the rows)
        return [log.collect()], lambda hs: jnp.concatenate([v.reshape(-1, D) for v in hs[log]])
    if kind == "record":
        return [acts.record()], lambda hs: {k: v.reshape(-1, *X.shape) for k, v in hs[acts].items()}
    if kind == "replace":
        return [acts.replace(lambda site, v: v * 0.5)], lambda hs: None
    raise AssertionError(kind)


KINDS = ["ask", "ask_static", "intercept", "key", "state", "emit", "record", "replace"]


class Block(nnx.Module):
    def __init__(self, *, kind, rngs):
        self.linear = nnx.Linear(D, D, rngs=rngs)
        self.bn = nnx.BatchNorm(D, rngs=rngs)
        self.kind = kind

    def __call__(self, x):
        return perform(self.kind, jnp.tanh(self.bn(self.linear(x))))


def block(kind):
    return Block(kind=kind, rngs=nnx.Rngs(0))


def stacked(kind):
    @nnx.split_rngs(splits=L)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(rngs):
        return Block(kind=kind, rngs=rngs)

    return create(nnx.Rngs(0))


def unrolled(blocks, x, apply):
    """The Python loop over stacked blocks: layer i's state updated in place."""
    graphdef, state = nnx.split(blocks)
    states = []
    for i in range(L):
        one = nnx.merge(graphdef, jax.tree.map(lambda a, i=i: a[i], state))
        x = apply(one, x)
        states.append(nnx.state(one))
    nnx.update(blocks, jax.tree.map(lambda *a: jnp.stack(a), *states))
    return x


def functional(module, fn):
    """`fn(module, *args)` as a function of the module's state (returned updated)."""
    graphdef, _ = nnx.split(module)

    def pure(state, *args):
        m = nnx.merge(graphdef, state)
        out = fn(m, *args)
        return out, nnx.state(m)

    return pure


# ---------------------------------------------------------------- the wrappers
# each: (make the module, the twin program, the reference program)


def scan_twin(blocks, x):
    return fxn.scan(lambda x, b: b(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, blocks)


def scan_ref(blocks, x):
    return unrolled(blocks, x, lambda b, x: b(x))


def fori_twin(b, x):
    return fxn.fori_loop(0, L, lambda i, c: (c[0], c[0](c[1])), (b, x))[1]


def fori_ref(b, x):
    for _ in range(L):
        x = b(x)
    return x


def while_twin(b, x):
    return fxn.while_loop(lambda c: c[0] < L, lambda c: (c[0] + 1, c[1], c[1](c[2])), (0, b, x))[2]


def cond_twin(b, x):
    return fxn.cond(jnp.sum(x) < 0, lambda b, x: b(x), lambda b, x: b(-x), b, x)


def cond_ref(b, x):
    return b(x) if jnp.sum(x) < 0 else b(-x)


def switch_twin(b, x):
    branches = [lambda b, x: b(x), lambda b, x: b(-x), lambda b, x: b(2 * x)]
    return fxn.switch(jnp.int32(2), branches, b, x)


def switch_ref(b, x):
    return b(2 * x)


def remat_twin(b, x):
    return fxn.remat(lambda b, x: b(x))(b, x)


def loss(b, x):
    return jnp.sum(b(x) ** 2)


def value_and_grad_twin(b, x):
    value, grads = fxn.value_and_grad(loss)(b, x)
    return value, nnx.state(grads, nnx.Param)


def value_and_grad_ref(b, x):
    graphdef, params, rest = nnx.split(b, nnx.Param, ...)

    def of_params(params, rest, x):
        m = nnx.merge(graphdef, params, rest, copy=True)
        return loss(m, x), nnx.state(m, nnx.BatchStat)

    (value, stats), grads = fx.value_and_grad(of_params, has_aux=True)(params, rest, x)
    nnx.update(b, stats)
    return value, grads


def grad_twin(b, x):
    return nnx.state(fxn.grad(loss)(b, x), nnx.Param)


def grad_ref(b, x):
    return value_and_grad_ref(b, x)[1]


def vmap_twin(blocks, x):
    return fxn.vmap(lambda b, x: b(x), in_axes=(0, None))(blocks, x)


def vmap_ref(blocks, x):
    out, state = fx.vmap(functional(blocks, lambda b, x: b(x)), in_axes=(0, None))(
        nnx.state(blocks), x
    )
    nnx.update(blocks, state)
    return out


WRAPPERS = {
    "scan": (stacked, scan_twin, scan_ref),
    "fori_loop": (block, fori_twin, fori_ref),
    "while_loop": (block, while_twin, fori_ref),
    "cond": (block, cond_twin, cond_ref),
    "switch": (block, switch_twin, switch_ref),
    "remat": (block, remat_twin, lambda b, x: b(x)),
    "value_and_grad": (block, value_and_grad_twin, value_and_grad_ref),
    "grad": (block, grad_twin, grad_ref),
    "vmap": (stacked, vmap_twin, vmap_ref),
}

# What the wrapper refuses, by name, eagerly and compiled alike (its effax namesake
# refuses the same): nothing to stack emitted values or taps along in a while_loop;
# a State written per batch element under the shared policy.
REFUSED = {
    ("while_loop", "emit"): fx.EffectUsageError,
    ("while_loop", "record"): fx.EffectUsageError,
    ("vmap", "state"): fx.EffectLeakError,
}


def run(kind, make, program, compiled):
    module = make(kind)
    installed, observe = handlers(kind)
    fn = fx.handle(program, transform=nnx.jit) if compiled else program
    with fx.handlers(*installed) as hs:
        outs = [fn(module, X), fn(module, X + 1)]  # twice: state carried across calls
    return outs, nnx.state(module), observe(hs)


def assert_close(a, b, *, bitwise=False):
    a_leaves, a_tree = jax.tree.flatten(a)
    b_leaves, b_tree = jax.tree.flatten(b)
    assert a_tree == b_tree
    for u, v in zip(a_leaves, b_leaves, strict=True):
        if jnp.issubdtype(jnp.result_type(u), jax.dtypes.prng_key):  # (an nnx.Rngs key)
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        u, v = np.asarray(u), np.asarray(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        if np.issubdtype(u.dtype, np.inexact) and not bitwise:
            # (op-by-op eager against one traced body: rounding, not semantics)
            np.testing.assert_allclose(u, v, rtol=2e-5, atol=2e-6)
        else:
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "nnx.jit"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_every_effect_through_every_twin_computes_the_reference(wrapper, kind, compiled):
    make, twin, ref = WRAPPERS[wrapper]
    if (wrapper, kind) in REFUSED:
        with pytest.raises(REFUSED[wrapper, kind], match=rf"effax\.nnx\.{wrapper}|batch"):
            run(kind, make, twin, compiled)
        return
    got = run(kind, make, twin, compiled)
    # (the gradients of BatchNorm cancel to a few ulps of the loss: the reference
    # of a compiled gradient is compiled too; the others are the eager Python program)
    want = run(kind, make, ref, compiled and wrapper in ("value_and_grad", "grad"))
    assert_close(got, want)


def test_import_effax_does_not_import_flax():
    code = "import sys, effax; print(sorted(m for m in sys.modules if m.split('.')[0] == 'flax'))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
    code = "import sys, effax.nnx; print('flax.nnx' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "True"


class Dropping(nnx.Module):
    """A block keeping NNX's own Dropout stream (split per layer by NNX)."""

    def __init__(self, rngs, effects):
        self.linear = nnx.Linear(D, D, rngs=rngs)
        self.bn = nnx.BatchNorm(D, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.effects = effects

    def __call__(self, x):
        y = self.dropout(jnp.tanh(self.bn(self.linear(x))))
        if self.effects:
            total.set(total.get() + jnp.mean(y))
        return y


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "nnx.jit"])
def test_nnx_own_dropout_streams_inside_the_twin_scan_draw_what_nnx_scan_draws(compiled):
    def model(effects):
        @nnx.split_rngs(splits=L)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def create(rngs):
            return Dropping(rngs, effects)

        return create(nnx.Rngs(0, dropout=5))

    def forward(scan):
        def call(blocks, x):
            return scan(lambda x, b: b(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, blocks)

        return fx.handle(call, transform=nnx.jit) if compiled else call

    pure = model(False)
    want = [forward(nnx.scan)(pure, X), forward(nnx.scan)(pure, X)]
    twin = model(True)
    with total.init(jnp.float32(0)) as cell:
        got = [forward(fxn.scan)(twin, X), forward(fxn.scan)(twin, X)]
    assert_close((got, nnx.state(twin)), (want, nnx.state(pure)), bitwise=True)
    assert bool(jnp.any(got[0] == 0)) and not np.array_equal(got[0], got[1])  # it dropped
    assert float(cell.value) != 0


def test_keys_in_the_twin_scan_are_those_of_the_python_loop_bitwise():
    def draw(x, _):
        return x + jax.random.uniform(noise.next_key(), x.shape), None

    with noise.seed(4) as stream:
        got = fxn.scan(draw, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(X, jnp.arange(L))[0]
        got_counter = stream.value.counter
    with noise.seed(4) as stream:
        want = X
        for i in range(L):
            want, _ = draw(want, i)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert got_counter == stream.value.counter == L


class Counting(nnx.Module):
    def __init__(self):
        self.linear = nnx.Linear(D, D, rngs=nnx.Rngs(0))

    def __call__(self, x):
        total.set(total.get() + 1)
        return self.linear(x)


class Noisy(nnx.Module):
    def __init__(self):
        self.linear = nnx.Linear(D, D, rngs=nnx.Rngs(0))

    def __call__(self, x):
        return self.linear(x) + jax.random.normal(noise.next_key(), x.shape)


RAW = {
    "scan": lambda m: nnx.scan(lambda c, _: (m(c), None), length=2)(X, None),
    "remat": lambda m: nnx.remat(lambda m, x: m(x))(m, X),
    "cond": lambda m: nnx.cond(True, lambda m, x: m(x), lambda m, x: x, m, X),
    "switch": lambda m: nnx.switch(1, [lambda m, x: x, lambda m, x: m(x)], m, X),
    "fori_loop": lambda m: nnx.fori_loop(0, 2, lambda i, c: (c[0], c[0](c[1])), (m, X)),
    "while_loop": lambda m: nnx.while_loop(
        lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1], c[1](c[2])), (0, m, X)
    ),
}


@pytest.mark.parametrize("name", list(RAW))
def test_an_effect_inside_a_raw_nnx_transform_names_it_and_its_twin(name):
    with total.init(jnp.float32(0)) as cell:
        with pytest.raises(
            fx.EffectLeakError, match=rf"Flax NNX's nnx\.{name}.*effax\.nnx\.{name}"
        ):
            RAW[name](Counting())
    assert float(cell.value) == 0


def test_a_key_drawn_inside_a_raw_nnx_vmap_names_it_and_its_twin():
    with noise.seed(0) as stream:
        with pytest.raises(fx.EffectLeakError, match=r"Flax NNX's nnx\.vmap.*effax\.nnx\.vmap"):
            nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(Noisy(), X)
        with pytest.raises(fx.EffectLeakError, match=r"inside jax\.vmap.*effax\.vmap\("):
            jax.vmap(Noisy())(X)
        assert stream.value.counter == 0


def test_an_effect_inside_a_raw_nnx_jit_names_effax_handle():
    with total.init(jnp.float32(0)):
        with pytest.raises(fx.EffectLeakError, match=r"nnx\.jit.*transform=nnx\.jit"):
            nnx.jit(lambda m, x: m(x))(Counting(), X)


@pytest.mark.parametrize("name", ["vmap", "scan", "grad", "value_and_grad"])
def test_handle_refuses_the_nnx_transforms_that_change_the_call(name):
    with pytest.raises(fx.EffectTypeError, match=rf"transform=nnx\.{name}\).*effax\.nnx\.{name}"):
        fx.handle(lambda m, x: m(x), transform=getattr(nnx, name))
    with pytest.raises(fx.EffectTypeError, match=rf"effax\.nnx\.{name}"):
        fx.handle(lambda m, x: m(x), transform=ft.partial(getattr(nnx, name), has_aux=False))


def test_handle_with_nnx_remat_carries_the_handlers_and_the_module():
    def run(fn):
        model = Counting()
        with total.init(jnp.float32(0)) as cell:
            ys = [fn(model, X), fn(model, X)]
        return ys, cell.value, nnx.state(model)

    want = run(lambda m, x: m(x))
    assert_close(run(fx.handle(lambda m, x: m(x), transform=nnx.remat)), want)
    assert float(want[1]) == 2


# Blocks with BatchNorm in training mode (each call updates its statistics): stacked
# for the loops and the batch, one for a cond or a gradient.
DROPPING = {
    "scan over the stacked module": (
        stacked,
        lambda blocks: fx.scan(lambda x, b: (b(x), None), X, blocks),
    ),
    "map": (stacked, lambda blocks: fx.map(lambda b: b(X), blocks)),
    "vmap": (stacked, lambda blocks: fx.vmap(lambda b: b(X))(blocks)),
    "cond": (block, lambda b: fx.cond(jnp.sum(X) < 0, lambda b: b(X), lambda b: X, b)),
    "grad": (block, lambda b: fx.grad(lambda b: jnp.sum(b(X)))(b)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "effax.jit"])
@pytest.mark.parametrize("name", list(DROPPING))
def test_an_effax_wrapper_refuses_to_drop_a_module_update_and_names_the_twin(name, compiled):
    make, call = DROPPING[name]
    blocks = make("ask")
    before = nnx.state(blocks)
    twin = {"scan over the stacked module": "scan", "map": "scan"}.get(name, name)
    with scale.provide(jnp.float32(1.0)):
        with pytest.raises(fx.EffectUsageError, match=rf"BatchStat.*effax\.nnx\.{twin} "):
            (fx.jit(call) if compiled else call)(blocks)
    assert_close(nnx.state(blocks), before, bitwise=True)


# effax.jit and effax.checkpoint pass a module in as arrays as jax.jit does; the twins
# that carry it are handle(..., transform=nnx.jit) and effax.nnx.remat
CALL_DROPPING = {
    "effax.jit": (fx.jit, r"transform=nnx\.jit\)"),
    "effax.checkpoint": (fx.checkpoint, r"effax\.nnx\.remat "),
    "jit(static_argnums)": (lambda f: fx.jit(f, static_argnums=1), r"transform=nnx\.jit\)"),
}


@pytest.mark.parametrize("outer", [None, fx.jit, fx.scan], ids=["alone", "in jit", "in scan"])
@pytest.mark.parametrize("name", list(CALL_DROPPING))
def test_a_compiled_call_refuses_to_drop_a_module_update_and_names_the_twin(name, outer):
    wrap, twin = CALL_DROPPING[name]
    block_ = block("state")  # (its State changes too: the refusal leaves it unchanged)
    before = nnx.state(block_)
    call = wrap(lambda b, n=1: b(X) * n)
    run_ = {
        None: lambda: call(block_),
        fx.jit: lambda: fx.jit(lambda: call(block_))(),
        fx.scan: lambda: fx.scan(lambda c, _: (c + call(block_), None), X, None, length=2),
    }[outer]
    where = name.split("(")[0]
    with total.init(jnp.float32(0)) as cell:
        with pytest.raises(fx.EffectUsageError, match=rf"BatchStat.*{where} .*{twin}"):
            run_()
        assert float(cell.value) == 0.0
    assert_close(nnx.state(block_), before, bitwise=True)


def test_a_compiled_call_that_returns_or_only_reads_its_module_runs():
    with scale.provide(jnp.float32(1.0)):
        block_ = block("ask")
        reference = block("ask")
        want = reference(X)
        got, updated = fx.jit(lambda b: (b(X), b))(block_)  # returned: nothing is lost
        assert_close((got, nnx.state(updated)), (want, nnx.state(reference)), bitwise=True)
        read = fx.checkpoint(lambda b: b.linear(X))(block_)  # read only
        assert_close(read, block_.linear(X), bitwise=True)


def test_under_disable_jit_an_effax_jit_changes_the_module_itself_as_jax_jit_does():
    with scale.provide(jnp.float32(1.0)), jax.disable_jit():
        block_, reference = block("ask"), block("ask")
        assert_close(fx.jit(lambda b: b(X))(block_), reference(X), bitwise=True)
    assert_close(nnx.state(block_), nnx.state(reference), bitwise=True)


def test_an_effax_scan_returning_the_module_carries_its_update():
    block_ = block("ask")
    with scale.provide(jnp.float32(1.0)):
        final, _ = fx.scan(lambda b, x: (b, b(x)), block_, jnp.stack([X, X]))
        reference = block("ask")
        reference(X), reference(X)
    assert_close(nnx.state(final), nnx.state(reference))
    assert not np.allclose(np.asarray(final.bn.mean[...]), 0)


def test_a_module_used_without_updates_crosses_an_effax_wrapper():
    blocks = stacked("ask")
    with scale.provide(jnp.float32(1.0)):
        ys, _ = fx.scan(lambda x, b: (b.linear(x), None), X, blocks)
    assert ys.shape == X.shape


# --- NNX's options through the twins: each against the twin's default form --------


def scan_layers(**options):
    return lambda blocks, x: fxn.scan(
        lambda x, b: b(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry, **options
    )(x, blocks)


STATE_AXES = nnx.StateAxes({nnx.BatchStat: 0, nnx.Param: 0})
SCAN_FORMS = {
    "graph=False (tree mode)": scan_layers(graph=False),
    "graph_updates=False": scan_layers(graph_updates=False),
    "StateAxes": lambda blocks, x: fxn.scan(
        lambda x, b: b(x), in_axes=(nnx.Carry, STATE_AXES), out_axes=nnx.Carry
    )(x, blocks),
    "unroll=2": scan_layers(unroll=2),
    "a decorator with a Carry tuple": lambda blocks, x: fxn.scan(
        in_axes=((nnx.Carry), 0), out_axes=(nnx.Carry, 0)
    )(lambda x, b: (b(x), jnp.sum(x)))(x, blocks)[0],
}


@pytest.mark.parametrize("form", list(SCAN_FORMS))
@pytest.mark.parametrize("kind", ["key", "state", "emit", "record"])
def test_nnx_scan_options_compute_what_the_default_form_does(form, kind):
    assert_close(
        run(kind, stacked, SCAN_FORMS[form], False), run(kind, stacked, scan_layers(), False)
    )


def test_a_scan_without_a_carry_gets_one_for_the_handlers():
    def no_carry(blocks, x):
        return fxn.scan(lambda b, x: b(x), in_axes=(0, None), out_axes=0)(blocks, x)

    def loop(blocks, x):
        graphdef, state = nnx.split(blocks)
        outs, states = [], []
        for i in range(L):
            one = nnx.merge(graphdef, jax.tree.map(lambda a, i=i: a[i], state))
            outs.append(one(x))
            states.append(nnx.state(one))
        nnx.update(blocks, jax.tree.map(lambda *a: jnp.stack(a), *states))
        return jnp.stack(outs)

    for kind in ("key", "state", "emit"):
        assert_close(run(kind, stacked, no_carry, False), run(kind, stacked, loop, False))


def test_a_reversed_scan_records_taps_in_program_order():
    def reversed_scan(blocks, x):
        return fxn.scan(
            lambda x, b: b(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry, reverse=True
        )(x, blocks)

    def loop(blocks, x):  # layers from last to first
        graphdef, state = nnx.split(blocks)
        states = {}
        for i in reversed(range(L)):
            one = nnx.merge(graphdef, jax.tree.map(lambda a, i=i: a[i], state))
            x = one(x)
            states[i] = nnx.state(one)
        nnx.update(blocks, jax.tree.map(lambda *a: jnp.stack(a), *[states[i] for i in range(L)]))
        return x

    for kind in ("record", "emit", "key"):
        got, want = run(kind, stacked, reversed_scan, False), run(kind, stacked, loop, False)
        if kind == "emit":  # (emits are stacked like the xs, last layer's row last)
            got = (got[0], got[1], got[2].reshape(2, L, D)[:, ::-1].reshape(-1, D))
        assert_close(got, want)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "nnx.jit"])
@pytest.mark.parametrize("keys", ["split", "shared"])
def test_vmap_key_policies_and_tree_mode_are_effax_vmaps(keys, compiled):
    def twin(graph=None):
        return lambda blocks, x: fxn.vmap(
            lambda b, x: b(x), in_axes=(0, None), keys=keys, graph=graph
        )(blocks, x)

    def reference(blocks, x):
        pure = functional(blocks, lambda b, x: b(x))
        out, state = fx.vmap(pure, in_axes=(0, None), keys=keys)(nnx.state(blocks), x)
        nnx.update(blocks, state)
        return out

    want = run("key", stacked, reference, False)
    assert_close(run("key", stacked, twin(), compiled), want)
    assert_close(run("key", stacked, twin(graph=False), compiled), want)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "nnx.jit"])
def test_vmap_with_batched_state_keeps_one_row_per_member(compiled):
    def batched_state(blocks, x):
        return fxn.vmap(lambda b, x: b(x), in_axes=(0, None), state="batched")(blocks, x)

    module = stacked("state")
    fn = fx.handle(batched_state, transform=nnx.jit) if compiled else batched_state
    with total.init(jnp.zeros(L)) as cell:
        y = fn(module, X)
    want = jnp.stack([jnp.mean(y[i]) for i in range(L)])
    np.testing.assert_allclose(np.asarray(cell.value), np.asarray(want), rtol=1e-6)


def test_value_and_grad_with_a_diffstate_gives_tap_gradients():
    def loss_fn(b, x):
        return jnp.sum(b(x) ** 2)

    model = block("record")
    with acts.gradients() as grads_of_taps:
        value, grads = fxn.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.Param))(model, X)
    reference = block("record")
    with acts.ignore():
        want_value = loss_fn(reference, X)
    y = jnp.tanh(
        Block(kind="record", rngs=nnx.Rngs(0)).bn(reference.linear(X))
    )  # (batch statistics)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-6)
    # d sum(h**2) / d h = 2 h, at the tapped h
    np.testing.assert_allclose(
        np.asarray(grads_of_taps.value["h"]), 2 * np.asarray(y), rtol=1e-4, atol=1e-6
    )
    assert set(nnx.state(grads, nnx.Param)) == {"bn", "linear"}


# --- what a careless or clever user tries ------------------------------------------


def noisy_step(c, _):
    try:  # an optional effect: asked where a handler may be missing
        s = scale.ask()
    except fx.UnhandledEffectError:
        s = 1.0
    return c * s + jax.random.normal(noise.next_key(), c.shape), None


def test_an_optional_effect_in_try_except_computes_the_python_loop():
    with noise.seed(2):
        got = fxn.scan(noisy_step, length=2)(X, None)[0]
    with noise.seed(2):
        want = X
        for _ in range(2):
            want, _ = noisy_step(want, None)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_raw_jax_transforms_around_a_twin():
    with noise.seed(0) as stream:
        with pytest.raises(fx.EffectLeakError, match=r"RandomKey\('noise'\).*inside jax\.vmap"):
            jax.vmap(lambda c: fxn.scan(noisy_step, length=2)(c, None)[0])(X)
        assert stream.value.counter == 0
        grads = jax.grad(lambda c: jnp.sum(fxn.scan(noisy_step, length=2)(c, None)[0]))(X)
    np.testing.assert_array_equal(np.asarray(grads), np.ones_like(X))  # d(c + noise)/dc


def test_wrong_arguments_and_none_are_named_or_carried():
    with pytest.raises(fx.EffectTypeError, match=r"effax\.nnx\.scan: f must be callable"):
        fxn.scan(None)
    with pytest.raises(fx.EffectUsageError, match=r"effax\.nnx\.vmap\(keys='nope'\)"):
        fxn.vmap(lambda a: a, keys="nope")
    assert fxn.scan(lambda c, _: (c, None), length=2)(None, None) == (None, None)


def test_two_threads_each_with_their_own_stream_draw_alike():
    import threading

    out = []

    def draw():
        with noise.seed(1):
            out.append(fxn.scan(noisy_step, length=2)(X, None)[0])

    threads = [threading.Thread(target=draw) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(np.asarray(out[0]), np.asarray(out[1]))


# --- eager calls: each twin's bodies traced once, as NNX's own and effax's are ----


def _twins(traces):
    """Each twin called eagerly on a module it updates (BatchNorm), with bodies that
    count their traces: name -> a function of the module running it once."""

    def counted(fn):
        def body(*args):
            traces.append(1)
            return fn(*args)

        return body

    layer = counted(lambda x, b: b(x))
    fori = counted(lambda i, c: (c[0], c[0](c[1])))
    loop_cond = counted(lambda c: c[0] < 2)
    loop_body = counted(lambda c: (c[0] + 1, c[1], c[1](c[2])))
    apply = counted(lambda b, x: b(x))
    skip = counted(lambda b, x: x * 1.0)
    return {
        "scan": lambda m: fxn.scan(layer, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(X, m),
        "fori_loop": lambda m: fxn.fori_loop(0, 2, fori, (m, X))[1],
        "while_loop": lambda m: fxn.while_loop(loop_cond, loop_body, (0, m, X))[2],
        "cond": lambda m: fxn.cond(total.get() > 0, apply, skip, m, X),
        "switch": lambda m: fxn.switch(1, [skip, apply, skip], m, X),
    }


TWIN_TRACES = {"while_loop": 2, "cond": 2, "switch": 3}  # bodies traced per call


@pytest.mark.parametrize("name", ["scan", "fori_loop", *TWIN_TRACES])
def test_an_eager_twin_called_again_traces_its_bodies_once(name):
    """Five eager calls with the same bodies trace each body once, and compute what
    five calls with new bodies (traced every call) compute: the outputs, the
    module's state after each call (BatchNorm statistics) and the State, bitwise."""

    def calls(fresh):
        traces = []
        module = (stacked if name == "scan" else block)("state")
        run_ = _twins(traces)
        got = []
        with total.init(jnp.float32(1.0)) as cell:
            for _ in range(5):
                run_ = _twins(traces) if fresh else run_
                out = run_[name](module)
                got.append((out, jax.tree.map(np.array, nnx.state(module)), cell.value))
        return got, len(traces)

    got, traced = calls(fresh=False)
    want, traced_fresh = calls(fresh=True)
    assert traced == TWIN_TRACES.get(name, 1)
    assert traced_fresh == 5 * TWIN_TRACES.get(name, 1)
    assert_close(got, want, bitwise=True)
    first, last = (jax.tree.leaves(got[i][1]) for i in (0, -1))
    assert not all(map(np.array_equal, first, last))  # the statistics moved


# --- random compositions: each twin against effax's own wrapper of the same name ----

WRAPPERS_BY_NAME = {
    # name: (effax's own, the effax.nnx twin), each a transformer of a function of one
    # array into another function of one array
    "scan": (
        lambda g: lambda c: fx.scan(lambda c, x: (g(c * x), None), c, jnp.array([1.0, 0.5]))[0],
        lambda g: lambda c: fxn.scan(lambda c, x: (g(c * x), None))(c, jnp.array([1.0, 0.5]))[0],
    ),
    "vmap": (
        lambda g: lambda c: jnp.sum(fx.vmap(g)(jnp.stack([c, c + 1])), axis=0),
        lambda g: lambda c: jnp.sum(fxn.vmap(g)(jnp.stack([c, c + 1])), axis=0),
    ),
    "cond": (
        lambda g: lambda c: fx.cond(jnp.sum(c) > 0, g, lambda v: -g(v), c),
        lambda g: lambda c: fxn.cond(jnp.sum(c) > 0, g, lambda v: -g(v), c),
    ),
    "remat": (lambda g: fx.checkpoint(g), lambda g: fxn.remat(g)),
    "fori_loop": (
        lambda g: lambda c: fx.fori_loop(0, 2, lambda i, v: g(v), c),
        lambda g: lambda c: fxn.fori_loop(0, 2, lambda i, v: g(v), c),
    ),
    "while_loop": (
        lambda g: (
            lambda c: fx.while_loop(lambda s: s[0] < 2, lambda s: (s[0] + 1, g(s[1])), (0, c))[1]
        ),
        lambda g: (
            lambda c: fxn.while_loop(lambda s: s[0] < 2, lambda s: (s[0] + 1, g(s[1])), (0, c))[1]
        ),
    ),
}


def composed(names, which):
    def base(c):
        if "while_loop" not in names:  # (a while_loop's emits are refused: no trip count)
            log.emit(jnp.sum(c))
        return jnp.tanh(c) * scale.ask() + jax.random.normal(noise.next_key(), c.shape)

    g = base
    for name in reversed(names):  # names[0] outermost
        g = WRAPPERS_BY_NAME[name][which](g)
    return g


def _programs(count, seed=41):
    rng = np.random.default_rng(seed)
    names = list(WRAPPERS_BY_NAME)
    return [tuple(rng.choice(names, size=rng.integers(1, 4))) for _ in range(count)]


@pytest.mark.parametrize("names", _programs(24), ids="/".join)
def test_random_compositions_of_twins_compute_what_effax_s_own_wrappers_compute(names):
    """A random nesting of `effax.nnx` twins around a body that asks, draws and emits
    (outside while loops) computes what the same nesting of effax's own wrappers computes (which the
    composition fuzzer checks against Python), eagerly and compiled (the twins under
    handle(transform=nnx.jit), effax's under effax.jit): outputs, emits, the stream's
    counter and its next key, bitwise."""

    def run(which, compiled):
        fn = composed(list(names), which)
        if compiled:
            fn = fx.handle(fn, transform=nnx.jit) if which else fx.jit(fn)
        with fx.handlers(scale.provide(jnp.float32(0.5)), noise.seed(4), log.collect()) as hs:
            out = fn(X[0])
            return out, hs[log], int(hs[noise].counter), noise.next_key()

    for compiled in (False, True):
        assert_close(run(1, compiled), run(0, compiled), bitwise=True)


def test_two_asyncio_tasks_each_with_their_own_stream_draw_alike():
    import asyncio

    async def draw(seed):
        with noise.seed(seed):
            await asyncio.sleep(0)  # (the other task runs here, under its own handlers)
            first = fxn.scan(noisy_step, length=2)(X, None)[0]
            await asyncio.sleep(0)
            return first, fxn.scan(noisy_step, length=2)(X, None)[0]

    async def both():
        return await asyncio.gather(draw(1), draw(1), draw(2))

    a, b, c = asyncio.run(both())
    with noise.seed(1):
        want = (
            fxn.scan(noisy_step, length=2)(X, None)[0],
            fxn.scan(noisy_step, length=2)(X, None)[0],
        )
    assert_close(a, want, bitwise=True)
    assert_close(b, want, bitwise=True)
    assert not np.array_equal(np.asarray(c[0]), np.asarray(want[0]))


@pytest.mark.parametrize("in_axes", ["zero", 1.5, True])
def test_twin_axes_of_the_wrong_kind_are_refused_by_name(in_axes):
    for twin in ("vmap", "scan"):
        with pytest.raises(fx.EffectTypeError, match=rf"effax\.nnx\.{twin}: in_axes must be"):
            getattr(fxn, twin)(noisy_step, in_axes=in_axes)


def test_twin_axes_that_do_not_fit_the_arguments_fail_as_in_nnx_before_any_draw():
    with noise.seed(0) as stream:
        with pytest.raises(ValueError, match="pytree structure error"):
            fxn.vmap(lambda x: x + jax.random.normal(noise.next_key()), in_axes=(0, 0, 0))(X)
        with pytest.raises(ValueError, match="pytree structure error"):
            fxn.scan(noisy_step, in_axes=(0, 0, 0))(X, None)
        assert stream.value.counter == 0
