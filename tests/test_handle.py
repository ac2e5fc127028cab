"""`effax.handle` / `effax.jit`: transparency, the counter, retracing, zero cost."""

import functools as ft

import attrs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_transparent

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

temperature = fx.Ask[jax.Array]("temperature")
mode = fx.Ask[str]("mode", static=True)
steps = fx.State[jax.Array]("steps")
dropout = fx.RandomKey("dropout")
aux = fx.Emit[jax.Array]("aux")


def model(x):
    """Asks, draws keys, updates state and emits."""
    t = temperature.ask()
    n = steps.modify(lambda n: n + 1)
    noise = jax.random.normal(dropout.next_key(), x.shape)
    y = x * t + noise + n
    aux.emit(jnp.sum(y**2))
    k2 = dropout.next_key()
    return y, k2


def run_twice(fn, xs):
    with fx.handlers(
        temperature.provide(jnp.float32(0.5)),
        steps.init(jnp.int32(0)),
        dropout.seed(jax.random.key(42)),
        aux.collect(),
    ) as hs:
        outs = [fn(x) for x in xs]
    return outs, hs[steps], hs[aux], hs[dropout]


XS = [jnp.arange(3.0), jnp.ones(3)]

TRANSFORMS = {
    "jit": lambda f: fx.handle(f, transform=jax.jit),
    "effax.jit": fx.jit,
    "checkpoint": lambda f: fx.handle(f, transform=jax.checkpoint),
    "eager-handle": lambda f: fx.handle(f),
    "nested": lambda f: fx.handle(fx.handle(f, transform=jax.jit), transform=jax.jit),
    "nested-eager-in-jit": lambda f: fx.handle(fx.handle(f), transform=jax.jit),
}


@pytest.mark.parametrize("wrap", TRANSFORMS.values(), ids=TRANSFORMS.keys())
def test_transparency(wrap):
    eager = run_twice(model, XS)
    assert_transparent(run_twice(wrap(model), XS), eager)
    assert eager[3].counter == 4


def test_nested_handles_compute_the_same_program():
    # Keys and integers bit for bit; floats to within XLA's fusion differences
    # between a nested and a flat compiled call.
    compiled = run_twice(fx.jit(model), XS)
    assert_transparent(run_twice(fx.jit(fx.jit(model)), XS), compiled)
    assert_transparent(run_twice(fx.jit(fx.handle(model)), XS), compiled)


def test_handle_inside_function_with_inner_handlers():
    def entry(x):
        with steps.init(jnp.int32(10)) as inner:
            y, _ = model(x)
        return y, inner.value

    eager = run_twice(entry, XS)
    assert_transparent(run_twice(fx.jit(entry), XS), eager)
    # the inner State handler shadowed the outer one, which stays untouched
    assert int(eager[1]) == 0


def test_counter_counts_while_compiled_once():
    count = fx.State[jax.Array]("count")
    traces = []

    def tick():
        traces.append(1)
        count.modify(lambda n: n + 1)
        return count.get()

    cell = count.init(jnp.int32(0))
    fast = fx.handle(tick, cell, transform=jax.jit)
    assert [int(fast()) for _ in range(3)] == [1, 2, 3]
    assert len(traces) == 1
    assert int(cell.value) == 3


def test_no_retrace_when_handled_values_change():
    traces = []

    def fn(x):
        traces.append(1)
        return model(x)

    fast = fx.jit(fn)
    for i in range(100):
        with fx.handlers(
            temperature.provide(jnp.float32(i)),
            steps.init(jnp.int32(i)),
            dropout.seed(i),
            aux.collect(),
        ):
            fast(jnp.ones(3))
    assert len(traces) == 1


def test_static_ask_retraces_once_per_value():
    traces = []

    def fn(x):
        traces.append(mode.ask())
        return x * 2 if mode.ask() == "double" else x * 3

    fast = fx.jit(fn)
    results = []
    for value in ["double", "triple", "double", "triple"] * 5:
        with mode.provide(value):
            results.append(float(fast(1.0)))
    assert results == [2.0, 3.0] * 10
    assert traces == ["double", "triple"]


def test_unrelated_handlers_are_not_plumbed_after_first_call():
    noise = [fx.Ask[jax.Array](f"unrelated{i}") for i in range(20)]
    traces = []

    def fn(x):
        traces.append(1)
        return x * temperature.ask()

    fast = fx.jit(fn)
    for i in range(5):
        with fx.handlers(
            *(e.provide(jnp.float32(i)) for e in noise), temperature.provide(jnp.float32(i))
        ):
            assert float(fast(2.0)) == 2.0 * i
    # one trace with everything plumbed in; the narrowed program replays its jaxpr
    assert len(traces) == 1


def test_newly_performed_effect_is_plumbed_on_retrace():
    def fn(x):
        if x.shape == (2,):
            return x * temperature.ask()
        return x + steps.get()

    fast = fx.jit(fn)
    with fx.handlers(temperature.provide(jnp.float32(3)), steps.init(jnp.float32(1))):
        np.testing.assert_array_equal(fast(jnp.ones(3)), 2 * np.ones(3))
        np.testing.assert_array_equal(fast(jnp.ones(2)), 3 * np.ones(2))
        np.testing.assert_array_equal(fast(jnp.ones(3)), 2 * np.ones(3))


def test_partial_jit_static_argnums_refer_to_fn():
    traces = []

    def fn(x, n, *, scale):
        traces.append((n, scale))
        return x * n * scale * temperature.ask()

    for transform in [
        ft.partial(jax.jit, static_argnums=1, static_argnames="scale"),
        ft.partial(jax.jit, static_argnames=("n", "scale")),
    ]:
        traces.clear()
        fast = fx.handle(fn, transform=transform)
        with temperature.provide(jnp.float32(1)):
            assert float(fast(1.0, 2, scale=3)) == 6.0
            assert float(fast(2.0, 2, scale=3)) == 12.0
            assert float(fast(1.0, 3, scale=3)) == 9.0
        assert traces == [(2, 3), (3, 3)]


def test_effax_jit_as_decorator_with_options():
    @fx.jit(static_argnums=0)
    def fn(n, x):
        return x * n + steps.get()

    with steps.init(jnp.float32(1)):
        assert float(fn(3, 2.0)) == 7.0


def test_donated_state_keeps_working():
    def fn(x):
        steps.set(steps.get() + x)
        return x

    with steps.init(jnp.zeros(3)) as cell:
        fast = fx.handle(fn, transform=ft.partial(jax.jit, donate_argnums=0))
        fast(jnp.ones(3))
        fast(jnp.ones(3))
    np.testing.assert_array_equal(cell.value, 2 * np.ones(3))


def test_jaxpr_has_no_more_equations_than_hand_plumbed():
    def lib(x):
        steps.set(steps.get() + 1)
        k0, k1 = dropout.next_key(), dropout.next_key()
        return x * temperature.ask() + jax.random.normal(k0) + jax.random.normal(k1)

    def hand_plumbed(x, t, state, key, counter):
        k0 = jax.random.fold_in(key, counter)
        k1 = jax.random.fold_in(key, counter + 1)
        return x * t + jax.random.normal(k0) + jax.random.normal(k1), state + 1

    def entry(x, t, state, key):
        with fx.handlers(temperature.provide(t), steps.init(state), dropout.seed(key)) as hs:
            y = fx.jit(lib)(x)
        return y, hs[steps]

    def inner_eqns(closed):
        (eqn,) = [e for e in closed.jaxpr.eqns if "jaxpr" in e.params]
        return eqn.params["jaxpr"].jaxpr.eqns

    args = (jnp.float32(1), jnp.float32(2), jnp.int32(0), jax.random.key(0))
    ours = inner_eqns(jax.make_jaxpr(entry)(*args))
    theirs = jax.make_jaxpr(jax.jit(hand_plumbed))(*args, 0).jaxpr.eqns[0]
    theirs = theirs.params["jaxpr"].jaxpr.eqns
    assert len(ours) <= len(theirs), (ours, theirs)


def test_training_loop_fits_line():
    weights = fx.State[dict[str, jax.Array]]("weights")
    momentum = fx.State[dict[str, jax.Array]]("momentum")
    batch = fx.Ask[tuple[jax.Array, jax.Array]]("batch")
    lr = fx.Ask[float]("lr", static=True)

    def loss_fn(p):
        x, y = batch.ask()
        return jnp.mean((p["w"] * x + p["b"] - y) ** 2)

    def update():
        grads = jax.grad(loss_fn)(weights.get())
        m = momentum.modify(lambda m: jax.tree.map(lambda m, g: 0.9 * m + g, m, grads))
        weights.modify(lambda p: jax.tree.map(lambda p, m: p - lr.ask() * m, p, m))

    p0 = {"w": jnp.float32(1.0), "b": jnp.float32(0.0)}
    w_cell = weights.init(p0)
    m_cell = momentum.init(jax.tree.map(jnp.zeros_like, p0))
    step = fx.handle(update, w_cell, m_cell, lr.provide(0.1), transform=jax.jit)
    data = (jnp.array([1.0, 2.0, 3.0]), jnp.array([3.0, 5.0, 7.0]))
    with batch.provide(data):
        for _ in range(100):
            step()
    np.testing.assert_allclose(w_cell.value["w"], 2.0, atol=0.05)
    np.testing.assert_allclose(w_cell.value["b"], 1.0, atol=0.1)


def test_key_stream_recipe_eager_jit_vmap_agree():
    def func_1():
        return jax.random.normal(dropout.next_key())

    def func_main(x):
        return x * (x + jax.random.normal(dropout.next_key()) + func_1()) * func_1()

    def pure(x, base_key):
        with dropout.seed(base_key):
            return func_main(x)

    base_keys = jax.random.split(jax.random.key(42), 4)
    xs = jnp.arange(1.0, 5.0)
    eager = jnp.stack([pure(x, k) for x, k in zip(xs, base_keys, strict=True)])
    jitted = jnp.stack([jax.jit(pure)(x, k) for x, k in zip(xs, base_keys, strict=True)])
    vmapped = jax.jit(jax.vmap(pure))(xs, base_keys)
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)
    np.testing.assert_allclose(vmapped, eager, rtol=1e-6)
    # and with the stream outside, through effax.jit: the same keys
    outside = []
    for x, k in zip(xs, base_keys, strict=True):
        with dropout.seed(k):
            outside.append(fx.jit(func_main)(x))
    np.testing.assert_allclose(jnp.stack(outside), eager, rtol=1e-6)


# --- a user-defined effect on the plumbing protocol -----------------------------------


class Counter(fx.Effect["Tally"]):
    """Counts events; the tally is an int32 array carried through traced regions."""

    def __init__(self, name):
        self.name = name

    def tick(self, by=1):
        tally = self.handler()
        tally.count = tally.count + by

    def tally(self):
        return Tally(self)


@attrs.define(eq=False)
class Tally(fx.Handler[Counter]):
    effect: Counter
    count: jax.Array = attrs.field(factory=lambda: jnp.int32(0))

    @property
    def value(self):
        return self.count

    def export(self):
        return fx.Export(carry=self.count)

    @classmethod
    def rebuild(cls, effect, static, const, carry):
        return cls(effect, carry)

    def outcome(self, *, carry_required):
        return fx.Outcome(carry=self.count)

    def absorb(self, outcome, *, steps):
        self.count = outcome.carry


events = Counter("events")


def test_user_defined_effect_crosses_handle():
    def work(x):
        events.tick()
        events.tick(jnp.int32(2))
        return x + 1

    for wrap in [lambda f: f, fx.jit, lambda f: fx.handle(f, transform=jax.checkpoint)]:
        with events.tally() as tally:
            wrap(work)(1.0)
            wrap(work)(1.0)
        assert int(tally.value) == 6


def test_jit_factory_form_applies_its_options_to_fn():
    # `jax.jit(static_argnums=...)` without a function (the seed tutorial's form):
    # its options refer to fn's parameters, as with functools.partial.
    traces = []

    def fn(n, x):
        traces.append(n)
        return x * n

    fast = fx.handle(fn, transform=jax.jit(static_argnums=0))
    assert [float(fast(n, 2.0)) for n in (2, 2, 3)] == [4.0, 4.0, 6.0]
    assert traces == [2, 3]
    plain = fx.handle(lambda n, x: x * n, transform=jax.jit())  # no options at all
    assert float(plain(jnp.float32(5), 2.0)) == 10.0
