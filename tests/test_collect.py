"""Collected values made easy to use: `Collector.take()` (a collector reused across
steps) and `Collector.stacked()` (one pytree), for values emitted eagerly and
under the wrappers."""

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_bitwise_equal

import effax as fx

F32 = jnp.float32
metrics = fx.Emit[dict]("metrics")
loss = fx.Emit[jax.Array]("loss")


def step(x):
    loss.emit(x * 2)
    metrics.emit({"loss": x * 2})
    metrics.emit({"norm": jnp.abs(x)})
    return x + 1


@pytest.mark.parametrize(
    "wrap", [lambda f: f, fx.jit, lambda f: fx.jit(fx.checkpoint(f))], ids=["eager", "jit", "remat"]
)
def test_take_gives_each_steps_values_and_stacked_merges_dicts(wrap):
    f = wrap(step)
    with loss.collect() as losses, metrics.collect() as collected:
        x = F32(0.5)
        for i in range(3):
            x = f(x)
            assert [float(v) for v in losses.take()] == [2 * (0.5 + i)]
            merged = collected.stacked()
            collected.clear()
            assert_bitwise_equal(
                merged,
                {
                    "loss": jnp.stack([2 * (0.5 + F32(i))]),
                    "norm": jnp.stack([jnp.abs(0.5 + F32(i))]),
                },
            )
        assert losses.take() == [] and losses.values == []


def test_stacked_over_calls_and_loops():
    with loss.collect() as losses, metrics.discard():
        for _ in range(2):
            fx.jit(lambda: fx.scan(lambda c, _: (step(c), None), F32(0), None, length=3))()
    stacked = losses.stacked()  # two calls, each a scan of three steps
    assert stacked.shape == (2, 3)
    assert_bitwise_equal(stacked, jnp.stack([jnp.array([0.0, 2.0, 4.0], F32)] * 2))
    with loss.collect() as losses, metrics.discard():
        fx.vmap(step)(jnp.arange(3.0, dtype=F32))
        fx.vmap(step)(jnp.arange(3.0, dtype=F32))
    assert losses.stacked().shape == (2, 3)


def test_stacked_refuses_what_does_not_stack():
    with loss.collect() as losses, pytest.raises(fx.EffectUsageError, match="no values"):
        losses.stacked()
    with loss.collect() as losses:
        loss.emit(F32(1))
        loss.emit((F32(1), F32(2)))
    with pytest.raises(fx.EffectUsageError, match=r"Emit\('loss'\).*different structures"):
        losses.stacked()
