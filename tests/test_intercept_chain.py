"""Interceptor chains cross traced boundaries as static wrappers (issue 40, item 2).

What crosses a region or a compiled call is the handler a chain of interceptors
reaches; the interceptors are recorded in the plan as static wrappers (class,
operations, the subclass's own parameters) and re-wrapped around the rebuilt
handler inside. So a forwarding handler a user writes (an `fx.Interceptor`
subclass with its own ``__init__`` and parameters), stacked with `fx.intercept`
ones, works under every wrapper with nothing of the plumbing protocol defined on
it. Each program is run with its interceptors and written out by hand (the
interception folded in) under the same wrapper; both must agree bit for bit, and
where the wrapper has a plain Python equivalent, with the eager run too.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent
from jax.sharding import PartitionSpec as P

import effax as fx
from effax import _intercept, _region

F32 = jnp.float32

temp = fx.Ask[jax.Array]("chain.temp")
total = fx.State[jax.Array]("chain.total")
keys = fx.RandomKey("chain.keys")
log = fx.Emit[jax.Array]("chain.log")
acts = fx.Tap[jax.Array]("chain.acts")
stats = fx.StateDict[jax.Array]("chain.stats")


class Offset(fx.Interceptor):
    """A forwarding handler of one's own: its own ``__init__`` (not Interceptor's
    signature) and a parameter; it adds `by` to what it reads or emits."""

    def __init__(self, effect, by):
        super().__init__(effect, ())
        self.by = by

    def ask(self):
        return self.outer().ask() + self.by

    def get(self, *args):
        return self.outer().get(*args) + self.by

    def emit(self, value):
        self.outer().emit(value + self.by)


class Scaled(Offset):
    """The same with its parameters in ``__slots__`` (and one more)."""

    __slots__ = ("factor",)

    def __init__(self, effect, by, factor):
        super().__init__(effect, by)
        self.factor = factor

    def ask(self):
        return self.outer().ask() * self.factor + self.by


TRIPLE = fx.intercept(temp, ask=lambda outer: 3 * outer.ask())
NONNEG = fx.intercept(total, set=lambda outer, v: outer.set(jnp.maximum(v, 0)))
FOLDED = fx.intercept(keys, next_key=lambda outer: jax.random.fold_in(outer.next_key(), 7))
HALF = fx.intercept(log, emit=lambda outer, v: outer.emit(0.5 * v))


def chains():
    """Three chains on three effects; each stacks a user's forwarding handler and
    `fx.intercept` ones (the innermost sees an operation first)."""
    return (Offset(temp, 1.0), TRIPLE, Offset(total, 0.5), NONNEG, Scaled(keys, 0.0, 2.0), FOLDED)


def body(x):
    t = temp.ask()
    total.set(total.get() - t)
    return x * t + jax.random.uniform(keys.next_key())


def body_by_hand(x):
    t = 3 * (temp.ask() + 1.0)
    total.set(jnp.maximum(total.get() + 0.5 - t, 0))
    return x * t + jax.random.uniform(jax.random.fold_in(keys.next_key(), 7))


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:8]), ("d",))


def _while(run):
    return lambda x: fx.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, run(c[1])), (0, x))[1]


WRAPPERS = {
    "eager": lambda f: f,
    "jit": fx.jit,
    "jit of jit": lambda f: fx.jit(lambda x: fx.jit(f)(x) * 2),
    "scan": lambda f: lambda x: fx.scan(lambda c, _: (f(c), None), x, None, length=3)[0],
    "fori_loop": lambda f: lambda x: fx.fori_loop(0, 3, lambda i, c: f(c), x),
    "while_loop": _while,
    "cond": lambda f: lambda x: fx.cond(x > 0, f, lambda c: f(-c), x),
    "vmap split": lambda f: lambda x: jnp.sum(fx.vmap(f, keys="split")(x + jnp.arange(3.0))),
    "vmap shared": lambda f: lambda x: jnp.sum(fx.vmap(f, keys="shared")(x + jnp.arange(3.0))),
    "grad": fx.grad,
    "value_and_grad": lambda f: lambda x: sum(fx.value_and_grad(f)(x)),
    "checkpoint": fx.checkpoint,
    "shard_map": lambda f: (
        lambda x: fx.shard_map(lambda y: f(y)[None], mesh=_mesh(), in_specs=P(), out_specs=P("d"))(
            x
        )[0]
    ),
    "jit of scan of vmap": lambda f: fx.jit(
        lambda x: fx.scan(
            lambda c, _: (c + jnp.sum(fx.vmap(f, keys="split")(c + jnp.arange(2.0))), None),
            x,
            None,
            length=2,
        )[0]
    ),
}
# wrappers whose eager equivalent is the body itself
PLAIN = {"jit": lambda f: f, "checkpoint": lambda f: f, "jit of jit": WRAPPERS["jit of jit"]}
PLAIN["jit of jit"] = lambda f: lambda x: f(x) * 2


X = F32(0.25)


def outcome(run, interceptors=(), x=X):
    """Everything the program changes: outputs of two calls (the second warm),
    the state, the stream's counter and the next key it draws."""
    with fx.handlers(temp.provide(F32(1.5)), total.init(F32(10)), keys.seed(3)) as hs:
        with fx.handlers(*interceptors):
            y = run(x)
            y2 = run(x)
        key = keys.next_key()
    return (y, y2, hs[total], int(hs[keys].counter), key)


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_a_forwarding_handler_of_ones_own_stacked_with_intercepts_crosses_every_wrapper(wrapper):
    wrap = WRAPPERS[wrapper]
    ours = outcome(wrap(body), chains())
    assert_bitwise_equal(ours, outcome(wrap(body_by_hand)))
    if wrapper in PLAIN:
        assert_transparent(ours, outcome(PLAIN[wrapper](body), chains()))


def test_the_chains_are_not_vacuous():
    """Without its chains the program computes something else."""
    assert not np.allclose(outcome(fx.jit(body))[0], outcome(fx.jit(body), chains())[0])


def test_another_parameter_value_of_a_forwarding_handler_is_another_program():
    traces = []

    def f(x):
        traces.append(None)
        return x * temp.ask()

    compiled = fx.jit(f)
    got = []
    for factor in (2.0, 2.0, 4.0, 2.0):
        with temp.provide(F32(1.5)), Scaled(temp, 1.0, factor):
            got.append(float(compiled(F32(1))))
    assert got == [4.0, 4.0, 7.0, 4.0]
    assert len(traces) == 2


# --- what crosses: the handler the chain reaches; the interceptors as static wrappers


def test_a_plan_records_the_chain_as_static_wrappers_around_the_handler_it_reaches():
    cell = total.init(F32(0))
    mine = Offset(total, 0.5)
    with cell, mine, NONNEG:
        found = _intercept.chain_of(NONNEG)
        assert found.target is cell
        assert found.wrappers == (
            _intercept.Wrapper(fx.Interceptor, NONNEG.operations, ()),
            _intercept.Wrapper(Offset, (), (("by", 0.5),)),
        )
        hash(found.wrappers)  # static: part of a compiled call's cache key
        region = _region.Region(lambda: None, name="test")
    (slot,) = [s for s in region.plan.slots if s.effect is total]
    assert slot.cls is type(cell) and slot.wrappers == found.wrappers


def test_one_chain_resolution_per_compiled_call(monkeypatch):
    """'Which handler does this interceptor forward to' is answered once per
    chain and call, by one function (a first call traces, learns its row and
    binds its warm path; warm calls resolve nothing)."""
    calls = []
    original = _intercept.chain_of

    def counted(handler, *args, **kwargs):
        calls.append(handler)
        return original(handler, *args, **kwargs)

    monkeypatch.setattr(_intercept, "chain_of", counted)
    compiled = fx.jit(lambda x: x * temp.ask())
    with temp.provide(F32(2)), TRIPLE:
        assert float(compiled(F32(1))) == 6.0
        assert calls.count(TRIPLE) == 1, calls
        assert float(compiled(F32(2))) == 12.0
        assert calls.count(TRIPLE) == 1


# --- the families a chain may reach ---------------------------------------------------


@pytest.mark.parametrize("wrapper", ["eager", "jit", "scan", "cond", "vmap split", "checkpoint"])
def test_two_chains_on_two_effects_one_over_an_emit(wrapper):
    def f(x):
        log.emit(x * temp.ask())
        return x

    def by_hand(x):
        log.emit(0.5 * (x * 3 * (temp.ask() + 1.0) + 0.25))
        return x

    def run(g, interceptors):
        with log.collect() as c, temp.provide(F32(1.5)):
            with fx.handlers(*interceptors):
                WRAPPERS[wrapper](g)(F32(0.5))
        return c.values

    ours = run(f, (Offset(temp, 1.0), TRIPLE, HALF, Offset(log, 0.25)))
    assert_bitwise_equal(ours, run(by_hand, ()))
    if wrapper == "jit":
        assert_transparent(ours, run(f, (Offset(temp, 1.0), TRIPLE, HALF, Offset(log, 0.25))))


@pytest.mark.parametrize("wrapper", ["eager", "jit", "scan", "cond", "vmap shared", "grad"])
def test_a_chain_over_a_state_dict(wrapper):
    halve = fx.intercept(stats, set=lambda outer, name, v: outer.set(name, 0.5 * v))

    def f(x):
        stats.set("m", stats.get("m") + 2.0)
        return x

    def by_hand(x):
        stats.set("m", 0.5 * (stats.get("m") + 1.0 + 2.0))
        return x

    def run(g, interceptors):
        with stats.init({"m": F32(2)}) as cell, fx.handlers(*interceptors):
            WRAPPERS[wrapper](g)(F32(0.5))
            WRAPPERS[wrapper](g)(F32(0.5))
        return cell.value

    assert_bitwise_equal(run(f, (Offset(stats, 1.0), halve)), run(by_hand, ()))


def test_a_state_dict_entry_created_through_a_chain_in_a_compiled_call():
    f = fx.jit(lambda x: stats.set("n", stats.get("n", init=lambda: x) + 1) or x)
    with stats.init() as cell, Offset(stats, 1.0):
        f(F32(1))
        f(F32(1))
    assert_bitwise_equal(cell.value, {"n": F32(5)})


SHIFT = fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, 3 * v))


@pytest.mark.parametrize("wrapper", ["eager", "jit", "scan", "cond"])
def test_a_recorder_under_an_interceptor(wrapper):
    def f(x):
        return jnp.sin(acts.tap("a", x * 2))

    with acts.record() as ours, SHIFT:
        y = WRAPPERS[wrapper](f)(F32(0.5))
    with acts.record() as theirs:
        y_by_hand = WRAPPERS[wrapper](lambda x: jnp.sin(acts.tap("a", 3 * x * 2)))(F32(0.5))
    assert_bitwise_equal((y, ours.value), (y_by_hand, theirs.value))


@pytest.mark.parametrize("outer", ["none", "jit", "vmap"])
def test_a_gradient_recorder_under_an_interceptor_under_grad(outer):
    def loss(w):
        return jnp.sum(jnp.sin(acts.tap("h", w * 2)))

    def loss_by_hand(w):
        return jnp.sum(jnp.sin(acts.tap("h", 3 * w * 2)))

    def run(f):
        g = fx.grad(f)
        if outer == "jit":
            g = fx.jit(g)
        elif outer == "vmap":
            g = fx.vmap(g)
        return g(jnp.array([0.5, -1.0], F32))

    with acts.gradients() as ours, SHIFT:
        dw = run(loss)
    with acts.gradients() as theirs:
        dw_by_hand = run(loss_by_hand)
    assert_bitwise_equal((dw, ours.value), (dw_by_hand, theirs.value))
    assert set(ours.value) == {"h"}


@pytest.mark.parametrize("keys_policy", ["split", "shared"])
def test_a_key_stream_under_vmap_through_an_interceptor(keys_policy):
    def f(x):
        return x + jax.random.uniform(keys.next_key())

    def by_hand(x):
        return x + jax.random.uniform(jax.random.fold_in(keys.next_key(), 7))

    def run(g, interceptors):
        with keys.seed(5) as stream, fx.handlers(*interceptors):
            ys = fx.vmap(g, keys=keys_policy)(jnp.zeros(4))
        return ys, stream.counter, keys.seed(5).counter

    ours = run(f, (FOLDED,))
    assert_bitwise_equal(ours, run(by_hand, ()))
    ys = ours[0]
    assert (len(set(np.asarray(ys).tolist())) == 4) == (keys_policy == "split")


def test_an_interceptor_with_nothing_to_reach_crosses_and_answers():
    constant = fx.intercept(temp, ask=lambda outer: F32(5))
    with constant:
        assert float(fx.jit(lambda x: x * temp.ask())(F32(2))) == 10.0
        assert float(fx.scan(lambda c, _: (c * temp.ask(), None), F32(1), None, length=2)[0]) == 25
    with (
        TRIPLE,
        pytest.raises(
            fx.UnhandledEffectError, match=r"Ask\('chain.temp'\).*none is installed around it"
        ),
    ):
        fx.jit(lambda x: x * temp.ask())(F32(2))


# --- `rebuild` is required of a handler that crosses, not of a forwarding one -----------


def test_a_handler_class_without_rebuild_is_refused_when_created_an_interceptor_needs_none():
    class NoRebuild(fx.Handler):
        fields = fx.Fields(carry="total")

        def __init__(self, effect):
            self.effect = effect
            self.total = F32(0)

        @property
        def value(self):
            return self.total

    with pytest.raises(fx.EffectTypeError, match=r"NoRebuild cannot be created.*define `rebuild`"):
        NoRebuild(total)

    class Rebuilt(NoRebuild):  # a subclass that defines it can be
        @classmethod
        def rebuild(cls, effect, static, const, carry):
            return cls(effect)

    assert Rebuilt(total).value == 0
    assert not {"rebuild", "export", "outcome", "absorb"} & set(vars(Offset))
    with temp.provide(F32(2)), Offset(temp, 1.0):
        assert float(fx.jit(lambda: temp.ask())()) == 3.0


# --- what a body performs through an interceptor installed inside a batched region


@pytest.mark.parametrize("inner", ["map", "jit", "scan", "checkpoint"])
@pytest.mark.parametrize("state", ["shared", "batched"])
def test_emits_through_an_interceptor_inside_a_vmap_reach_the_collector(inner, state):
    # (found by the composition fuzzer, issue 39: an interceptor installed inside an
    # effax.vmap body, a region or compiled call inside it emitting: the vmap saw
    # the collector only looked up to plumb it further in, and dropped its values)
    regions = {
        "map": lambda f, x: fx.map(f, x[None]),
        "jit": lambda f, x: fx.jit(f)(x),
        "scan": lambda f, x: fx.scan(lambda c, y: (c, f(y)), 0.0, x[None])[1],
        "checkpoint": lambda f, x: fx.checkpoint(f)(x),
    }

    def body(x):
        with Offset(log, 1.0):
            regions[inner](lambda y: (log.emit(2 * y), y)[1], x)
        return x

    xs = jnp.array([0.5, 1.5, -2.0], F32)
    with log.collect() as got:
        fx.vmap(body, state=state)(xs)
    with log.collect() as by_hand:
        for x in xs:  # a Python loop over the batch, the interception folded in
            regions[inner](lambda y: (log.emit(2 * y + 1.0), y)[1], x)
    (value,) = got.value
    assert_bitwise_equal(
        jnp.reshape(value, (3, -1)), jnp.reshape(jnp.stack(by_hand.value), (3, -1))
    )


def test_keys_drawn_through_an_interceptor_in_a_while_loop_inside_a_split_vmap():
    # (fuzzer, issue 39: vmap(split)[intercept[while[uniform]]]: the stream was not
    # split, the counter stayed where it was)
    counted = fx.intercept(keys, next_key=lambda outer: outer.next_key())

    def body(x):
        with counted:
            _, k = fx.while_loop(
                lambda c: c[0] < 2,
                lambda c: (c[0] + 1, c[1] + jax.random.uniform(keys.next_key())),
                (0, x),
            )
        return k

    with keys.seed(3) as stream:
        out = fx.vmap(body)(jnp.zeros(2, F32))
    with keys.seed(3) as by_hand:
        key = keys.next_key()  # split: one key K, element b draws from fold_in(K, b)
    assert int(stream.counter) == int(by_hand.counter) == 1
    expected = []
    for b in range(2):
        with keys.seed(jax.random.fold_in(key, b)):
            expected.append(sum(jax.random.uniform(keys.next_key()) for _ in range(2)))
    np.testing.assert_allclose(out, jnp.stack(expected), rtol=1e-6)
