"""Flax NNX and effax together: `effax.handle(fn, transform=nnx.jit)`, and the
example `examples/flax_nnx_cnn.py` (the NNX MNIST tutorial's CNN three ways).

nnx.jit carries the module state (parameters, batch statistics, optimiser state)
in and out; effax carries the handlers' values around it. Each test runs the same
step eagerly and compiled and asserts they agree.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from helpers import (
    assert_bitwise_equal,
    assert_transparent,
    counting_compiles,
    load_example as load,
)

import effax as fx

training = fx.Ask[bool]("training", static=True)
noise = fx.RandomKey("noise")
count = fx.State[jax.Array]("count")
log = fx.Emit[jax.Array]("log")


class Net(nnx.Module):
    """Parameters and batch statistics for nnx.jit."""

    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(3, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.head = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x):
        y = self.head(self.bn(self.linear(x), use_running_average=not training.ask()))
        if training.ask():  # the static Ask selects the branch
            y = y + 0.1 * jax.random.normal(noise.next_key(), y.shape)
        return y


def make(seed=0):
    model = Net(nnx.Rngs(seed))
    # SGD: Adam would amplify rounding in near-zero gradients past a few ulps
    return model, nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)


def step(model, optimizer, x):
    """A training step performing all four effects around nnx's own transforms."""
    step.traces += 1
    loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
    optimizer.update(model, grads)
    count.modify(lambda n: n + 1)
    log.emit(loss)
    return loss, jax.random.uniform(noise.next_key(), (2,))


step.traces = 0


def module_state(model, optimizer):
    return {
        "mean": model.bn.mean[...],
        "var": model.bn.var[...],
        "kernel": model.linear.kernel[...],
        "step": optimizer.step[...],
    }


def run(fn, n=3):
    """`n` calls of `fn` under fresh handlers and a fresh model: everything it
    changed (outputs, handler values, module state)."""
    model, optimizer = make()
    x = jnp.arange(15.0).reshape(5, 3) / 10
    handlers = (training.provide(True), noise.seed(7), count.init(jnp.int32(0)), log.collect())
    with fx.handlers(*handlers) as hs:
        outs = [fn(model, optimizer, x) for _ in range(n)]
    return outs, hs[count], hs[noise].counter, hs[log], module_state(model, optimizer)


# Eager Flax runs op by op, one XLA program per op: under jax.checking_leaks, which
# bypasses the compile cache on jax 0.10, each would compile anew on every call.
@pytest.mark.uses_jit_cache
def test_a_compiled_step_changes_what_the_eager_step_changes():
    eager = run(fx.handle(step))
    step.traces = 0
    compiled = run(fx.handle(step, transform=nnx.jit))
    assert step.traces == 1  # three calls, one trace
    (e_outs, e_count, e_drawn, e_log, e_state) = eager
    (c_outs, c_count, c_drawn, c_log, c_state) = compiled
    # effax's effects: the state and the key draws bit for bit, emits collected
    assert int(c_count) == int(e_count) == 3
    assert c_drawn == e_drawn == 6  # two keys a step
    assert_bitwise_equal([o[1] for o in c_outs], [o[1] for o in e_outs])
    assert len(c_log) == len(e_log) == 3
    assert_transparent(c_log, [o[0] for o in c_outs])
    assert_transparent(c_log, e_log)
    # nnx's module state: updated by nnx.jit as eagerly
    assert int(c_state["step"]) == int(e_state["step"]) == 3
    assert_transparent(c_state, e_state, rtol=1e-5)
    assert not np.allclose(c_state["mean"], 0.0)  # the running statistics moved


def test_a_static_ask_selects_the_branch_and_a_new_value_retraces():
    @fx.uses(training, noise)  # the row of both branches: each value traces once
    def predict(model, x):
        predict.traces += 1
        return model(x)

    predict.traces = 0
    fast = fx.handle(predict, transform=nnx.jit)
    x = jnp.arange(15.0).reshape(5, 3)
    results = {}
    for how, call in (("eager", predict), ("compiled", fast)):
        model, _ = make()
        with noise.seed(0) as keys:
            with training.provide(False):  # running statistics, no noise, no update
                before = call(model, x)
                assert keys.counter == 0
                assert_bitwise_equal(model.bn.mean[...], jnp.zeros(4))
            with training.provide(True):  # batch statistics, noise, statistics updated
                during = [call(model, x), call(model, x)]
                assert keys.counter == 2
            with training.provide(False):
                after = call(model, x)
        results[how] = before, during, after, model.bn.mean[...]
    assert predict.traces == 4 + 2  # eagerly every call; compiled once per value
    assert_transparent(results["compiled"], results["eager"], rtol=1e-5)
    before, during, after, mean = results["compiled"]
    assert not np.allclose(before, during[0]) and not np.allclose(before, after)
    assert not np.allclose(mean, 0.0)


@pytest.mark.reuses_keys_on_purpose
def test_an_effax_stream_draws_the_keys_of_an_nnx_rngs_stream():
    # nnx.Rngs(0)'s dropout stream draws fold_in(key(0), count), as dropout.seed(0)
    # does: nnx.Dropout fed effax's keys drops what it drops with nnx's.
    folded = [jax.random.fold_in(jax.random.key(0), i) for i in range(2)]
    rngs = nnx.Rngs(0)
    assert_bitwise_equal([rngs.dropout(), rngs.dropout()], folded)
    with noise.seed(0):
        assert_bitwise_equal([noise.next_key(), noise.next_key()], folded)

    layer = nnx.Dropout(0.5, deterministic=False)
    x = jnp.ones((4, 8))

    def with_nnx(rngs):
        return layer(x, rngs=rngs), layer(x, rngs=rngs)

    def with_effax():
        return layer(x, rngs=noise.next_key()), layer(x, rngs=noise.next_key())

    expected = with_nnx(nnx.Rngs(0))
    with noise.seed(0):
        eager = with_effax()
    assert_bitwise_equal(eager, expected)
    assert_bitwise_equal(nnx.jit(with_nnx)(nnx.Rngs(0)), expected)
    with noise.seed(0):
        compiled = fx.handle(with_effax, transform=nnx.jit)()
    assert_bitwise_equal(compiled, expected)


@pytest.mark.uses_jit_cache  # eager Flax: see above
def test_a_call_that_raises_changes_no_handler_and_no_module():
    def bad_step(model, optimizer, x):
        loss, grads = step(model, optimizer, x)
        if x.shape[0] == 2:
            raise ValueError("no batches of two")
        return loss, grads

    for transform in (None, nnx.jit):
        fast = fx.handle(bad_step, transform=transform)
        model, optimizer = make()
        before = module_state(model, optimizer)
        handlers = (training.provide(True), noise.seed(0), count.init(jnp.int32(0)), log.collect())
        with fx.handlers(*handlers) as hs:
            with pytest.raises(ValueError, match="no batches of two"):
                fast(model, optimizer, jnp.ones((2, 3)))
            assert int(hs[count]) == 0 and hs[noise].counter == 0 and hs[log] == []
            if transform is None:
                # eagerly, nnx's in-place updates happened before the raise: effax
                # restores its handlers, not the module
                assert int(optimizer.step[...]) == 1
            else:  # nnx.jit applies the module's updates only once the call returned
                assert_bitwise_equal(module_state(model, optimizer), before)
            fast(model, optimizer, jnp.ones((5, 3)))  # a good call still works
            assert int(hs[count]) == 1 and hs[noise].counter == 2 and len(hs[log]) == 1


def test_a_declared_row_traces_once_with_unused_handlers_around():
    @fx.uses(log)
    def evaluate(model, x):
        evaluate.traces += 1
        log.emit(jnp.mean(model.linear(x)))

    evaluate.traces = 0
    fast = fx.handle(evaluate, transform=nnx.jit)
    model, _ = make()
    with fx.handlers(noise.seed(0), count.init(jnp.int32(0)), log.collect()) as hs:
        fast(model, jnp.ones((2, 3)))
        fast(model, jnp.ones((2, 3)))
    assert evaluate.traces == 1 and len(hs[log]) == 2


@pytest.mark.uses_jit_cache  # counts XLA compilations
def test_unused_handlers_around_cost_at_most_one_more_trace_and_no_more_compiles():
    # effax's first call traces with every reachable handler plumbed in, then replays
    # that trace for the handlers the body used; nnx.jit's traced object has no jaxpr
    # to replay, so the body is traced once more (known limit; `@fx.uses` avoids it).
    # Later calls trace and compile nothing.
    def evaluate(model, x):
        evaluate.traces += 1
        log.emit(jnp.mean(model.linear(x)))

    evaluate.traces = 0
    fast = fx.handle(evaluate, transform=nnx.jit)
    model, _ = make()
    x = jnp.ones((2, 3))
    with fx.handlers(noise.seed(0), log.collect()) as hs:
        fast(model, x)
        first = evaluate.traces
        with counting_compiles() as compiles:
            fast(model, x)
            fast(model, x)
    assert len(hs[log]) == 3
    assert first <= 2 and evaluate.traces == first
    assert compiles == []


# --- the example ----------------------------------------------------------------------


@pytest.mark.uses_jit_cache  # eager Flax, and six compiled programs
def test_the_tutorial_cnn_three_ways_learns_alike(tmp_path, capsys):
    cnn = load("flax_nnx_cnn")
    result = cnn.main(quick=True, out=tmp_path)
    losses, accuracy = result["losses"], result["accuracy"]
    steps = len(losses["original"])
    # the hybrid draws the original's dropout keys: the same losses, bit for bit
    assert result["same_losses"] and losses["hybrid"] == losses["original"]
    assert result["keys_drawn"] == dict.fromkeys(losses, 2 * steps)  # two dropouts a step
    # what nnx.MultiMetric averaged is what the caller averages from the emits
    train = result["train_loss"]
    assert train["hybrid"] == pytest.approx(train["original"], rel=1e-6)
    for name, losses_of in losses.items():
        assert len(losses_of) == steps
        assert np.mean(losses_of[-10:]) < np.mean(losses_of[:10]) / 2, name
        assert accuracy[name] >= accuracy["original"] - 0.1, (name, accuracy)
        assert accuracy[name] > 0.6, (name, accuracy)  # chance is 0.1
    assert (tmp_path / "flax_nnx_cnn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "hybrid losses equal the original's, step for step: True" in out
