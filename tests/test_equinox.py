"""`effax.handle(fn, transform=eqx.filter_jit)`: Equinox modules whose submodules
perform effects, compiled by Equinox while effax plumbs the effects.

Equinox splits a call's arguments into arrays (traced) and everything else
(static, part of the cache key); effax plumbs the handlers' values through the same
call as leading arguments. Each test compares the compiled calls with the eager
ones, bit for bit, and counts traces.
"""

import functools as ft

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx

training = fx.Ask[bool]("training", static=True)
scale = fx.Ask[jax.Array]("scale")
dropout_key = fx.RandomKey("dropout")
calls = fx.State[jax.Array]("calls")
norms = fx.Emit[jax.Array]("norms")


class Dropout(eqx.Module):
    rate: float = eqx.field(static=True)

    def __call__(self, x):
        if not training.ask():
            return x
        keep = jax.random.bernoulli(dropout_key.next_key(), 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0.0)


class Block(eqx.Module):
    linear: eqx.nn.Linear
    activation: eqx.nn.Lambda  # a function leaf: static under filter_jit
    dropout: Dropout

    def __call__(self, x):
        calls.modify(lambda n: n + 1)
        h = self.dropout(self.activation(self.linear(x))) * scale.ask()
        norms.emit(jnp.linalg.norm(h))
        return h


class Model(eqx.Module):
    blocks: tuple[Block, ...]

    def __init__(self, key, *, activation=jax.nn.tanh):
        keys = jax.random.split(key, 2)
        self.blocks = tuple(
            Block(eqx.nn.Linear(4, 4, key=k), eqx.nn.Lambda(activation), Dropout(0.5)) for k in keys
        )

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def handlers(train=True):
    return fx.handlers(
        training.provide(train),
        scale.provide(jnp.float32(2.0)),
        dropout_key.seed(3),
        calls.init(jnp.int32(0)),
        norms.collect(),
    )


def run(fn, model, xs, train=True):
    with handlers(train) as hs:
        outs = [fn(model, x) for x in xs]
    return outs, int(hs[calls]), hs[norms], hs[dropout_key].counter


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


XS = [jnp.arange(4.0) + i for i in range(3)]


@pytest.mark.parametrize("train", [True, False])
def test_submodules_performing_effects_compile_as_they_run_eagerly(train):
    traces = []

    def forward(model, x):
        traces.append(1)
        return model(x)

    model = Model(jax.random.key(0))
    eager = run(forward, model, XS, train)
    n_eager = len(traces)
    compiled = run(fx.handle(forward, transform=eqx.filter_jit), model, XS, train)
    assert len(traces) - n_eager == 1  # three calls, one trace: the key counter is not static
    assert_same(eager[0], compiled[0])
    assert eager[1] == compiled[1] == 6
    assert_same(eager[2], compiled[2])
    assert len(compiled[2]) == 6
    assert int(eager[3]) == int(compiled[3]) == (6 if train else 0)


def test_a_static_leaf_of_the_module_changes_the_program_and_the_effects_still_cross():
    traces = []

    def forward(model, x):
        traces.append(1)
        return model(x)

    step = fx.handle(forward, transform=eqx.filter_jit)
    tanh, relu = Model(jax.random.key(0)), Model(jax.random.key(0), activation=jax.nn.relu)
    with handlers() as hs:
        a = step(tanh, XS[0])
        b = step(relu, XS[0])
        step(relu, XS[1])
    assert len(traces) == 2  # one per activation (a static leaf), not per call
    with handlers():
        np.testing.assert_array_equal(a, tanh(XS[0]))
        np.testing.assert_array_equal(b, relu(XS[0]))
    assert int(hs[calls]) == 6 and hs[dropout_key].counter == 6


def test_training_step_with_effax_grad_of_the_partitioned_model_matches_eager():
    # The model emits a value that depends on the parameters: effax.value_and_grad
    # carries the emit out of the differentiation, on the partitioned model (the
    # Equinox idiom for a plain jax.grad).
    import optax

    optimizer = optax.sgd(0.1)

    def train_step(model, opt_state, x):
        params, static = eqx.partition(model, eqx.is_inexact_array)

        def loss_fn(p):
            return jnp.sum(eqx.combine(p, static)(x) ** 2)

        loss, grads = fx.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return eqx.apply_updates(model, updates), opt_state, loss

    def train(step):
        model = Model(jax.random.key(1))
        opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        losses = []
        with handlers() as hs:
            for x in XS:
                model, opt_state, loss = step(model, opt_state, x)
                losses.append(loss)
        return model, losses, int(hs[calls]), hs[norms]

    eager = train(train_step)
    compiled = train(fx.handle(train_step, transform=eqx.filter_jit))
    # XLA fuses the compiled update: float results agree to rounding, not bitwise
    arrays = [jax.tree.leaves(eqx.filter(m, eqx.is_array)) for m in (eager[0], compiled[0])]
    for a, b in zip(*arrays, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(eager[1], compiled[1], rtol=1e-4)
    assert eager[2] == compiled[2] == 6
    assert len(compiled[3]) == 6


def test_equinox_state_is_handled_by_equinox_and_effax_state_by_effax():
    # eqx.nn.BatchNorm keeps its running statistics in Equinox's own eqx.nn.State,
    # passed in and out explicitly; the effects next to it are plumbed by effax.
    model, bn_state = eqx.nn.make_with_state(eqx.nn.BatchNorm)(4, axis_name="batch", mode="batch")

    def forward(model, bn_state, x):
        calls.modify(lambda n: n + 1)
        y, bn_state = jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(
            x, bn_state
        )
        return y * scale.ask(), bn_state

    x = jnp.arange(12.0).reshape(3, 4)

    def run_twice(fn):
        state = bn_state
        with handlers() as hs:
            for _ in range(2):
                y, state = fn(model, state, x)
        return y, state, int(hs[calls])

    eager = run_twice(forward)
    compiled = run_twice(fx.handle(forward, transform=eqx.filter_jit))
    for a, b in zip(jax.tree.leaves(eager[:2]), jax.tree.leaves(compiled[:2]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)  # XLA's fused statistics: rounding
    moved = [
        not np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(bn_state), jax.tree.leaves(compiled[1]), strict=True)
    ]
    assert any(moved)  # Equinox updated its running statistics
    assert eager[2] == compiled[2] == 2


def test_filter_jit_options_pass_through_a_partial():
    model = Model(jax.random.key(0))
    step = fx.handle(lambda m, x: m(x), transform=ft.partial(eqx.filter_jit, donate="none"))
    assert_same(run(step, model, XS)[:3], run(lambda m, x: m(x), model, XS)[:3])


def test_python_numbers_in_handlers_are_traced_under_filter_jit():
    # eqx.filter_jit holds Python numbers static; effax passes a handler's Python
    # numbers as NumPy scalars, so a new value does not compile a new program, as
    # under jax.jit. The results are the eager ones.
    offset = fx.Ask[float]("offset")
    total = fx.State[float]("total")
    traces = []

    def f(x):
        traces.append(1)
        total.set(total.get() + offset.ask())
        return x * offset.ask()

    step = fx.handle(f, transform=eqx.filter_jit)
    results = []
    for value in (0.5, 0.25, 0.5):
        with offset.provide(value), total.init(1.0) as cell:
            results.append((step(jnp.ones(2)), cell.value))
    assert [float(r[0][0]) for r in results] == [0.5, 0.25, 0.5]
    assert [float(r[1]) for r in results] == [1.5, 1.25, 1.5]
    assert len(traces) == 1


@pytest.mark.reuses_keys_on_purpose
@pytest.mark.parametrize("counter", [0, 2**31 - 1, 2**31, 2**32 - 2])
def test_key_counters_cross_filter_jit_as_arrays(counter):
    """The counter of a key stream crosses eqx.filter_jit as an int32 array (a
    Python int would be static: one program per call), with the uint32's bits."""
    traces = []

    def draw():
        traces.append(1)
        return fx.rng.next_key()

    step = fx.handle(draw, transform=eqx.filter_jit)
    with fx.rng.seed(0) as stream:
        stream.counter = counter
        got = [step(), step()]
    want = [jax.random.fold_in(jax.random.key(0), counter + i) for i in range(2)]
    assert_same(jax.random.key_data(jnp.stack(got)), jax.random.key_data(jnp.stack(want)))
    assert int(stream.counter) == counter + 2
    assert len(traces) == 1


def test_an_exception_inside_leaves_the_handlers_as_they_were():
    model = Model(jax.random.key(0))

    def forward(model, x, fail=False):  # `fail`, a Python bool, is static
        y = model(x)
        if fail:
            raise ValueError("bad batch")
        return y

    step = fx.handle(forward, transform=eqx.filter_jit)
    with handlers() as hs:
        step(model, XS[0])
        before = (int(hs[calls]), len(hs[norms]), hs[dropout_key].counter)
        with pytest.raises(ValueError, match="bad batch"):
            step(model, XS[0], True)
        assert (int(hs[calls]), len(hs[norms]), hs[dropout_key].counter) == before
        step(model, XS[1])
        assert int(hs[calls]) == 4 and hs[dropout_key].counter == 4


def test_jax_vmap_over_a_module_drawing_keys_is_refused_and_effax_vmap_splits():
    block = Model(jax.random.key(0)).blocks[0]
    xs = jnp.stack(XS)
    with handlers():
        with pytest.raises(fx.EffectLeakError, match=r"effax\.vmap\(fn, keys='split'"):
            fx.handle(jax.vmap(block), transform=eqx.filter_jit)(xs)
        eager = fx.vmap(block, keys="split")(xs)
    with handlers():
        compiled = fx.handle(fx.vmap(block, keys="split"), transform=eqx.filter_jit)(xs)
    np.testing.assert_array_equal(eager, compiled)
    assert len({tuple(np.asarray(row != 0)) for row in compiled}) > 1  # masks differ per row


def test_eqx_filter_grad_refuses_to_keep_a_differentiated_emit_and_stop_gradient_keeps_it():
    # eqx.filter_value_and_grad is a raw jax.grad to effax: a handler outside it
    # cannot keep a value still being differentiated (it would leak the tracer).
    model = Model(jax.random.key(0))

    def loss_fn(m, x):
        return jnp.sum(m(x) ** 2)

    grad_step = fx.handle(
        lambda m, x: eqx.filter_value_and_grad(loss_fn)(m, x), transform=eqx.filter_jit
    )
    with handlers() as hs:
        with pytest.raises(fx.EffectLeakError, match=r"Emit\('norms'\).*stop_gradient"):
            grad_step(model, XS[0])
        assert hs[norms] == [] and int(hs[calls]) == 0

    class Quiet(eqx.Module):  # the same model, emitting what it has stopped differentiating
        model: Model

        def __call__(self, x):
            with norms.collect() as inner:
                y = self.model(x)
            for value in inner.values:
                norms.emit(jax.lax.stop_gradient(value))
            return y

    with handlers() as hs:
        loss, _ = grad_step(Quiet(model), XS[0])
    with handlers() as eager:
        expected = eqx.filter_value_and_grad(loss_fn)(Quiet(model), XS[0])
    np.testing.assert_array_equal(loss, expected[0])
    assert len(hs[norms]) == 2 and int(hs[calls]) == 2
    assert_same(hs[norms], eager[norms])
