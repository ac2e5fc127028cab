"""examples/haiku_resnet.py: a Haiku ResNet (BatchNorm, dropout) migrated to effax as
a shim around the unchanged Haiku model (A) and with effects in the layers (B).

Each comparison is a function of the example; these tests run it and check its
numbers: the migrations against the original Haiku program bit for bit where they
compute the same thing, statistically where (B) draws other dropout masks.
"""

import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest
from helpers import load_example

# Many programs compiled, and compilations counted: without jax.checking_leaks, which
# bypasses the compile cache on jax 0.10 (conftest.py)
pytestmark = pytest.mark.uses_jit_cache

ZERO = {"losses": 0.0, "params": 0.0, "bn_state": 0.0}


@pytest.fixture(scope="module")
def hr():
    return load_example("haiku_resnet")


def test_shim_and_effects_match_haiku_bit_for_bit_with_dropout_off(hr):
    assert hr.check_dropout_off(3) == {"shim": ZERO, "effects": ZERO}


def test_shim_matches_haiku_bit_for_bit_given_the_keys_it_draws(hr):
    assert hr.check_shim_dropout_on(3) == ZERO


def test_the_comparisons_see_a_difference(hr):
    # what the bitwise checks compare moves, and a different key shows
    data = hr.make_data(3, 32)
    params0, state0 = hr.haiku_init(data)
    haiku = hr.run_haiku(params0, state0, data, 1, hr.DROPOUT_RATE)
    start = {"losses": haiku["losses"], "params": params0, "bn_state": state0}
    moved = hr.compare(haiku, start)
    assert moved["params"] > 0 and moved["bn_state"] > 0
    assert int(haiku["bn_state"]["final_batchnorm/~/mean_ema"]["counter"]) == 3
    other_keys = hr.run_shim(params0, state0, data, 2, hr.DROPOUT_RATE)
    assert min(hr.compare(other_keys, haiku).values()) > 0
    effects = hr.run_effects(hr.unhaiku(params0), data, 1, hr.DROPOUT_RATE)
    assert hr.compare(effects, haiku)["losses"] > 0  # (B)'s masks are other ones
    # (B)'s own initialisation makes the parameters Haiku's init makes
    own = jax.eval_shape(hr.init_params, jax.random.key(0))
    assert jax.tree.map(lambda a: (a.shape, a.dtype), own) == jax.tree.map(
        lambda a: (a.shape, a.dtype), hr.unhaiku(params0)
    )


def test_effects_dropout_agrees_with_haiku_statistically(hr):
    s = hr.check_effects_statistics()
    n = s["seeds"]
    se = math.sqrt((s["haiku_sd"] ** 2 + s["effects_sd"] ** 2) / n)  # of the difference
    assert abs(s["effects"] - s["haiku"]) < 4 * se, s
    # a dropout that did nothing would be told apart: far from the loss without it
    assert s["effects"] - s["no_dropout"] > 4 * se and s["haiku"] - s["no_dropout"] > 4 * se, s
    sd_keep = math.sqrt(s["rate"] * (1 - s["rate"]) / s["n_units"])
    assert abs(s["keep_rate"] - (1 - s["rate"])) < 4 * sd_keep, s
    assert s["kept_error"] < 1e-6, s  # kept units are scaled by 1 / (1 - rate)


def test_effects_step_under_effax_scan(hr):
    result = hr.check_effects_scan(3)
    # bit for bit the hand-plumbed Haiku program in jax.lax.scan
    assert result["vs_haiku_scan"] == ZERO
    # against the Python loop: within a few float32 ulps, as plain JAX's lax.scan is
    # of its loop (XLA compiles a loop body apart); other dropout keys would move
    # the losses by far more
    assert max(result["vs_loop"].values()) < 1e-5
    assert result["haiku_scan_vs_loop"]["params"] < 1e-6


def test_effects_step_compiles_twice_then_runs_warm(hr):
    # first call: no BN entries yet (it creates 9 layers x 2 averages); second call:
    # compiled once more for the grown dict; the third and fourth run warm
    assert hr.count_traces(4) == [0, 18]


def test_line_counts_agree_with_the_docs_counter(hr):
    docs = pathlib.Path(__file__).parent.parent / "docs"
    sys.path.insert(0, str(docs))
    try:
        from _compare import lines_of_code
    finally:
        sys.path.remove(str(docs))
    counts = hr.line_counts()
    for name, sections in hr.PROGRAMS.items():
        assert counts[name] == sum(lines_of_code(hr.section(s)) for s in sections)
    assert counts["(A) shim"] < counts["(B) effects in the layers"]


def test_main_prints_the_comparisons(hr, tmp_path, capsys):
    result = hr.main(["--steps", "3", "--out", str(tmp_path)])
    assert result["dropout_off"]["effects"] == ZERO
    assert (tmp_path / "haiku_resnet.json").is_file()
    out = capsys.readouterr().out
    assert "(B) effects vs Haiku, dropout off" in out and "ms/step" in out
    assert set(result["ms_per_step"]) == {"haiku", "shim", "effects"}
    assert jnp.isfinite(jnp.array(list(result["ms_per_step"].values()))).all()
