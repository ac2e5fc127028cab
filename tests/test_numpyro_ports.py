"""The NumPyro ports in examples/ run in their quick mode and show what they claim."""

import numpy as np
import pytest
from helpers import load_example as load


def check_comparison(result, first_section, out):
    """Timings are measured and lines counted for both; the table is printed."""
    for key in ("steps_per_second", "first_run_seconds"):
        assert result[f"port_{key}"] > 0 and result[f"original_{key}"] > 0
    lines = result["lines"]
    assert lines[f"port: {first_section}"] > 0 and lines[f"original: {first_section}"] > 0
    assert {k.split(": ")[1] for k in lines if k.startswith("port:")} == {
        k.split(": ")[1] for k in lines if k.startswith("original:")
    }
    assert "effax port" in out and "total lines of code" in out


# timings compare compiled programs run again: they need JAX's compile cache, which
# jax.checking_leaks bypasses on jax 0.10
@pytest.mark.uses_jit_cache
def test_svi_port_fits_the_exact_posterior_as_numpyro_does(capsys):
    svi = load("svi")
    result = svi.main(1001, repeats=1)
    mean, std = result["exact"]
    for name in ("port", "original"):
        loc, scale = result[name]
        assert abs(loc - mean) < 0.1 * std, (name, loc, mean)
        assert abs(scale / std - 1) < 0.1, (name, scale, std)
    # the two fits agree as closely as either agrees with the exact posterior
    np.testing.assert_allclose(result["port"], result["original"], rtol=0.05)
    # model and guide read the same; effax adds what numpyro's library provides
    assert result["lines"]["port: model and guide"] == result["lines"]["original: model and guide"]
    assert result["transparent"]
    out = capsys.readouterr().out
    check_comparison(result, "inference (sample, param, ELBO)", out)
    assert "compiled loop and a Python loop of eager steps agree: True" in out


@pytest.mark.uses_jit_cache
def test_metropolis_port_samples_the_target_as_numpyro_does(capsys):
    mh = load("metropolis")
    result = mh.main(500, num_warmup=300, repeats=1)
    for name in ("port", "original"):
        mean, var = result[name]
        np.testing.assert_allclose(mean, mh.TARGET_MEAN, atol=0.1, err_msg=name)
        np.testing.assert_allclose(var, mh.TARGET_VAR, rtol=0.15, err_msg=name)
    np.testing.assert_allclose(result["port"][0], result["original"][0], atol=0.1)
    assert result["original_reproduced"]  # the timed loop is what mcmc.run computes
    assert result["transparent"]
    lines = result["lines"]
    port_total = sum(n for k, n in lines.items() if k.startswith("port:"))
    assert port_total < sum(n for k, n in lines.items() if k.startswith("original:"))
    out = capsys.readouterr().out
    check_comparison(result, "kernel", out)
    assert "compiled chains and eager chains agree: True" in out
