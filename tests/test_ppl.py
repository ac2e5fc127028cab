"""`examples/ppl.py` (issue 25): NumPyro's handlers rebuilt on effax interception,
checked against NumPyro on the same models and the same parameter values."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from helpers import load_example
from numpyro import handlers
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.util import log_density as numpyro_log_density

import effax as fx

ppl = load_example("ppl")
DATA = 1.0 + jax.random.normal(jax.random.key(1), (6,))


# Each model is written once, over a `lang` that has `sample` and `param`: the
# port (`ppl`) or NumPyro itself.


def plated(lang, data):
    loc = lang.sample("loc", dist.Normal(0.0, 2.0))
    log_scale = lang.sample("log_scale", dist.Normal(0.0, 0.5))
    w = lang.param("w", jnp.float32(1.5))
    lang.sample("obs", dist.Normal(w * loc, jnp.exp(log_scale)), obs=data)


def guide(lang, data):
    m, s = lang.param("m", jnp.float32(0.3)), lang.param("s", jnp.float32(-0.5))
    lang.sample("loc", dist.Normal(m, jnp.exp(s)))
    lang.sample("log_scale", dist.Normal(0.1, 0.2))


VALUES = {"loc": jnp.float32(0.7), "log_scale": jnp.float32(-0.2), "w": jnp.float32(1.5)}
PARAMS = {"m": jnp.float32(0.3), "s": jnp.float32(-0.5), "w": jnp.float32(1.5)}


def ours(model, values, *handlers_):
    with ppl.seed(0) as hs, ppl.condition(values), ppl.substitute(values):
        with fx.handlers(*handlers_):
            model(ppl, DATA)
    return hs[ppl.log_joint]


def theirs(model):
    return numpyro_log_density(lambda d: model(numpyro, d), (DATA,), {}, VALUES)[0]


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_log_joint_density_matches_numpyro(wrap):
    run = (lambda f: f()) if wrap == "eager" else (lambda f: fx.jit(f)())
    np.testing.assert_allclose(run(lambda: ours(plated, VALUES)), theirs(plated), rtol=1e-6)


def test_scale_and_mask_match_numpyro():
    with_scale = ours(plated, VALUES, ppl.scale(0.25))
    np.testing.assert_allclose(
        with_scale,
        numpyro_log_density(
            handlers.scale(lambda d: plated(numpyro, d), 0.25), (DATA,), {}, VALUES
        )[0],
        rtol=1e-6,
    )
    keep = DATA > 1.0

    def masked(lang, data):
        loc = lang.sample("loc", dist.Normal(0.0, 2.0))
        if lang is ppl:
            with ppl.mask(keep):
                lang.sample("obs", dist.Normal(loc, 1.0), obs=data)
        else:
            with handlers.mask(mask=keep):
                lang.sample("obs", dist.Normal(loc, 1.0), obs=data)

    np.testing.assert_allclose(ours(masked, VALUES), theirs(masked), rtol=1e-6)


def test_block_hides_sites_from_the_handlers_outside():
    def model(lang, data):
        lang.sample("a", dist.Normal(0.0, 1.0), obs=0.5)
        with ppl.block():
            lang.sample("b", dist.Normal(0.0, 1.0), obs=0.25)

    for wrap in (lambda f: f(), lambda f: fx.jit(f)()):
        with ppl.seed(0) as hs, ppl.trace() as tr, ppl.scale(0.0):
            wrap(lambda: model(ppl, DATA))
        assert set(ppl.values_of(tr[ppl.sites])) == {"a"}  # trace does not see b
        # the scale outside zeroes a's density; b's, hidden from it, counts in full
        np.testing.assert_allclose(hs[ppl.log_joint], dist.Normal(0.0, 1.0).log_prob(0.25))


def test_trace_replay_substitute_give_numpyro_s_elbo():
    """One particle: the guide's draw traced, the model replayed on it; NumPyro's
    log densities at the same values give the same ELBO."""
    with ppl.rng.seed(3):
        value = ppl.elbo(lambda d: plated(ppl, d), lambda d: guide(ppl, d), PARAMS, DATA)
    with ppl.rng.seed(3), ppl.log_joint.init(jnp.float32(0)), ppl.Sampler(ppl.ppl):
        with ppl.trace() as tr, ppl.substitute(PARAMS):
            guide(ppl, DATA)
    z = ppl.values_of(tr[ppl.sites])
    at = {**PARAMS, **z}
    log_p = numpyro_log_density(lambda d: plated(numpyro, d), (DATA,), {}, at)[0]
    log_q = numpyro_log_density(lambda d: guide(numpyro, d), (DATA,), {}, at)[0]
    np.testing.assert_allclose(value, log_p - log_q, rtol=1e-5)


# --- a local-level time series: latent states sampled inside a scan ---------------

Y = jnp.array([0.2, 0.5, 0.1, 0.9, 1.3, 1.0], jnp.float32)


def local_level(y):
    sigma = ppl.sample("sigma", dist.LogNormal(0.0, 0.5))

    def step(level, _):
        level = ppl.sample("level", dist.Normal(level, sigma))
        ppl.sample("y", dist.Normal(level, 0.3))  # observed through `condition`
        return level, None

    ppl.scan(step, jnp.float32(0), jnp.zeros(y.shape[0]))


def local_level_guide(y):
    ppl.sample("sigma", dist.LogNormal(ppl.param("s_loc", jnp.float32(-0.5)), 0.2))
    locs, scales = ppl.param("locs", jnp.zeros_like(y)), ppl.param("scales", jnp.zeros_like(y))
    ppl.scan(
        lambda c, ls: (c, ppl.sample("level", dist.Normal(ls[0], jnp.exp(ls[1])))),
        None,
        (locs, scales),
    )


def local_level_unrolled(y, sites):
    """NumPyro, as a Python loop with a site per step."""
    sigma = numpyro.sample("sigma", dist.LogNormal(0.0, 0.5))
    level = 0.0
    for t in range(y.shape[0]):
        level = numpyro.sample(f"level_{t}", dist.Normal(level, sigma))
        numpyro.sample(f"y_{t}", dist.Normal(level, 0.3), obs=y[t])
    del sites


def local_level_guide_unrolled(y, params):
    numpyro.sample("sigma", dist.LogNormal(params["s_loc"], 0.2))
    for t in range(y.shape[0]):
        numpyro.sample(f"level_{t}", dist.Normal(params["locs"][t], jnp.exp(params["scales"][t])))


TS_PARAMS = {
    "s_loc": jnp.float32(-0.3),
    "locs": jnp.linspace(0.0, 1.0, 6, dtype=jnp.float32),
    "scales": jnp.full(6, -1.0, jnp.float32),
}


def ts_elbo(params):
    def model(y):
        with ppl.condition({"y": y}):
            local_level(y)

    return ppl.elbo(model, local_level_guide, params, Y)


@pytest.mark.parametrize("wrap", ["eager", "jit", "vmap"])
def test_a_scan_of_latent_states_traces_replays_and_conditions_correctly(wrap):
    """numpyro#1685's case: trace + replay + condition through a scan give the
    ELBO of the unrolled model at the same latent values."""
    if wrap == "vmap":  # four particles, each its own key stream
        run = lambda: fx.vmap(lambda _: ts_elbo(TS_PARAMS), keys="split")(jnp.arange(4))
    else:
        run = (
            (lambda: ts_elbo(TS_PARAMS)) if wrap == "eager" else fx.jit(lambda: ts_elbo(TS_PARAMS))
        )
    with ppl.rng.seed(5):
        values = jnp.atleast_1d(run())
    # the same draws, traced: the guide's latent values per particle
    with ppl.rng.seed(5):
        if wrap == "vmap":
            key = ppl.rng.next_key()
            streams = [jax.random.fold_in(key, b) for b in range(4)]
        else:
            streams = [None]
    for b, value in enumerate(values):
        with ppl.rng.seed(streams[b] if streams[b] is not None else 5):
            with ppl.log_joint.init(jnp.float32(0)), ppl.Sampler(ppl.ppl):
                with ppl.trace() as tr, ppl.substitute(TS_PARAMS):
                    local_level_guide(Y)
        z = ppl.values_of(tr[ppl.sites])
        assert z["level"].shape == (6,)  # stacked per step by the scan
        at = {"sigma": z["sigma"], **{f"level_{t}": z["level"][t] for t in range(6)}}
        log_p = numpyro_log_density(local_level_unrolled, (Y, None), {}, at)[0]
        log_q = numpyro_log_density(local_level_guide_unrolled, (Y, TS_PARAMS), {}, at)[0]
        np.testing.assert_allclose(value, log_p - log_q, rtol=1e-5)


# --- models NumPyro cannot express: a while loop; and a cond ---------------------------


def walk():
    def body(c):
        x, n = c
        return x + ppl.sample("step", dist.Normal(0.0, 0.5)), n + 1

    return fx.while_loop(lambda c: (jnp.abs(c[0]) < 1.0) & (c[1] < 30), body, (0.0, 0))


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_a_while_loop_model_has_the_log_density_of_its_draws(wrap):
    run = walk if wrap == "eager" else fx.jit(walk)
    with ppl.seed(11) as hs:
        x, n = run()
    # the same walk in Python: draw i is fold_in(key(11), i), as a stream's are
    normal = dist.Normal(0.0, 0.5)
    total, position, steps = 0.0, 0.0, 0
    while abs(position) < 1.0 and steps < 30:
        s = normal.sample(jax.random.fold_in(jax.random.key(11), steps))
        total, position, steps = total + normal.log_prob(s), position + s, steps + 1
    assert int(n) == steps and int(hs[ppl.rng].counter) == steps
    np.testing.assert_allclose(x, position, rtol=1e-6)
    np.testing.assert_allclose(hs[ppl.log_joint], total, rtol=1e-5)


@pytest.mark.parametrize("wrap", ["eager", "jit"])
@pytest.mark.parametrize("flag", [True, False])
def test_a_cond_model_has_the_log_density_of_the_branch_taken(flag, wrap):
    def model():
        return fx.cond(
            jnp.bool_(flag),
            lambda: ppl.sample("x", dist.Normal(0.0, 1.0)),
            lambda: ppl.sample("x", dist.Normal(3.0, 0.5)),
        )

    run = model if wrap == "eager" else fx.jit(model)
    with ppl.seed(2) as hs, ppl.condition({"x": jnp.float32(0.4)}):
        run()
    d = dist.Normal(0.0, 1.0) if flag else dist.Normal(3.0, 0.5)
    np.testing.assert_allclose(hs[ppl.log_joint], d.log_prob(0.4), rtol=1e-6)


# --- SVI --------------------------------------------------------------------------------


def test_svi_converges_to_numpyro_s_result_compiled_once():
    data = 1.0 + jax.random.normal(jax.random.key(1), (20,))
    # one optimizer for both: Adam with a decaying step, so that the last iterate
    # of a one-particle ELBO is close to the optimum
    steps = 1500
    optimizer = optax.adam(optax.exponential_decay(0.05, steps, 0.02))
    traces = []

    def model(d):
        traces.append(1)
        ppl.normal_model(d)

    update = ppl.svi_step(model, ppl.normal_guide, optimizer)
    init = {"guide_loc": jnp.float32(0), "guide_scale": jnp.float32(0)}
    with ppl.rng.seed(0), ppl.params.init(init) as ours_, ppl.opt_state.init(optimizer.init(init)):
        for _ in range(steps):
            update(data)
    assert len(traces) == 1  # the whole step (ELBO, gradient, Adam) compiled once

    def np_model(d):
        loc = numpyro.sample("loc", dist.Normal(0.0, 1.0))
        numpyro.sample("obs", dist.Normal(loc, 1.0), obs=d)

    def np_guide(d):
        loc = numpyro.param("guide_loc", 0.0)
        scale = jnp.exp(numpyro.param("guide_scale", 0.0))
        numpyro.sample("loc", dist.Normal(loc, scale))

    svi = SVI(np_model, np_guide, numpyro.optim.optax_to_numpyro(optimizer), Trace_ELBO())
    result = svi.run(jax.random.key(0), steps, data, progress_bar=False)
    exact_loc = float(data.sum() / (data.shape[0] + 1))
    exact_log_scale = float(np.log(1 / np.sqrt(data.shape[0] + 1)))
    for fitted in (ours_.value, result.params):
        assert abs(float(fitted["guide_loc"]) - exact_loc) < 0.05, fitted
        assert abs(float(fitted["guide_scale"]) - exact_log_scale) < 0.2, fitted
    assert abs(float(ours_.value["guide_loc"]) - float(result.params["guide_loc"])) < 0.08


def test_the_example_runs(capsys):
    ppl.main(["--quick"])
    assert "guide loc" in capsys.readouterr().out


def test_numpyro_s_own_scan_gives_the_same_log_density_here():
    """Beside it, NumPyro's `contrib.control_flow.scan` on the same model and values
    (numpyro#1685 reported a wrong ELBO for replay through it; 0.22 agrees here)."""
    from numpyro.contrib.control_flow import scan

    def model_scan(y):
        sigma = numpyro.sample("sigma", dist.LogNormal(0.0, 0.5))

        def step(level, y_t):
            level = numpyro.sample("level", dist.Normal(level, sigma))
            numpyro.sample("y", dist.Normal(level, 0.3), obs=y_t)
            return level, None

        scan(step, 0.0, y)

    z = {"sigma": jnp.float32(0.8), "level": jnp.linspace(0.1, 1.1, 6, dtype=jnp.float32)}
    at = {"sigma": z["sigma"], **{f"level_{t}": z["level"][t] for t in range(6)}}
    unrolled = numpyro_log_density(local_level_unrolled, (Y, None), {}, at)[0]
    np.testing.assert_allclose(numpyro_log_density(model_scan, (Y,), {}, z)[0], unrolled, rtol=1e-6)

    def model(y):
        with ppl.condition({"y": y}):
            local_level(y)

    np.testing.assert_allclose(ppl.log_density(model, z, Y), unrolled, rtol=1e-6)


# --- issue 39 item 9: never silently wrong -------------------------------------------
# `condition` around a scan longer than its data: NumPyro's rule (numpyro 0.22,
# `contrib.control_flow.scan._subs_wrapper`) observes step t while t < len(data) and
# draws a fresh value after it; the site stays observed, so every step's log density,
# drawn or given, counts in `log_density`.

OBSERVED = jnp.array([0.4, -0.3, 1.1], jnp.float32)
HORIZON = 7


def ar(lang, scan, length):
    def step(c, _):
        y = lang.sample("y", dist.Normal(0.9 * c, 1.0))
        return y, y

    return scan(step, jnp.float32(0), None, length=length)[1]


def forecast(seed):
    with ppl.seed(seed) as hs, ppl.trace() as tr, ppl.condition({"y": OBSERVED}):
        ys = ar(ppl, ppl.scan, HORIZON)
    return ys, hs[ppl.log_joint], ppl.values_of(tr[ppl.sites])["y"], hs[ppl.rng].counter


def forecast_by_hand(key):
    """The same forecast as a Python loop: step t draws key t of the stream (the
    condition draws at every step, so that a step's number of draws is fixed)."""
    ys, total, c = [], 0.0, 0.0
    for t in range(HORIZON):
        d = dist.Normal(0.9 * c, 1.0)
        fresh = d.sample(jax.random.fold_in(key, t))
        c = OBSERVED[t] if t < OBSERVED.shape[0] else fresh
        ys.append(c)
        total = total + d.log_prob(c)
    return jnp.stack(ys), total


def test_numpyro_s_own_rule_for_a_condition_shorter_than_its_scan():
    """What the port copies: NumPyro observes the first steps, samples the rest, and
    counts every step's density (the drawn ones too) in the log joint."""
    from numpyro.contrib.control_flow import scan

    model = handlers.condition(lambda: ar(numpyro, scan, HORIZON), {"y": OBSERVED})
    with handlers.trace() as tr, handlers.seed(rng_seed=0):
        ys = model()
    n = OBSERVED.shape[0]
    np.testing.assert_array_equal(ys[:n], OBSERVED)
    assert not np.any(np.isclose(ys[n:], OBSERVED[-1]))  # sampled, not clamped
    assert tr["y"]["is_observed"]
    lp = tr["y"]["fn"].log_prob(tr["y"]["value"])
    log_joint = numpyro_log_density(handlers.seed(model, 0), (), {}, {})[0]
    np.testing.assert_allclose(log_joint, lp.sum(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="requires length less than or equal"):
        handlers.seed(handlers.condition(lambda: ar(numpyro, scan, 2), {"y": OBSERVED}), 0)()


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_condition_shorter_than_its_scan_observes_then_samples(wrap):
    run = forecast if wrap == "eager" else fx.jit(forecast, static_argnums=0)
    ys, log_joint, traced, counter = run(4)
    expected, expected_log_joint = forecast_by_hand(jax.random.key(4))
    n = OBSERVED.shape[0]
    np.testing.assert_array_equal(ys[:n], OBSERVED)
    np.testing.assert_allclose(ys, expected, rtol=1e-6)
    np.testing.assert_allclose(traced, ys)
    assert not np.any(np.isclose(ys[n:], OBSERVED[-1]))  # not the last observation
    np.testing.assert_allclose(log_joint, expected_log_joint, rtol=1e-5)
    assert int(counter) == HORIZON
    # NumPyro's log density of the same values (every step observed there)
    from numpyro.contrib.control_flow import scan

    theirs_ = numpyro_log_density(lambda: ar(numpyro, scan, HORIZON), (), {}, {"y": ys})[0]
    np.testing.assert_allclose(log_joint, theirs_, rtol=1e-5)


def test_condition_shorter_than_its_scan_under_vmap_forecasts_each_particle():
    """Three particles, each its own key stream: each observes the data and draws
    its own forecast, as the Python loop does with that particle's stream."""

    def particle(_):
        with ppl.log_joint.init(jnp.float32(0)) as lj, ppl.Sampler(ppl.ppl):
            with ppl.condition({"y": OBSERVED}):
                ys = ar(ppl, ppl.scan, HORIZON)
        return ys, lj.value

    with ppl.rng.seed(6):
        ys, log_joints = fx.vmap(particle, keys="split")(jnp.arange(3))
    with ppl.rng.seed(6):
        key = ppl.rng.next_key()
    for b in range(3):
        expected, expected_log_joint = forecast_by_hand(jax.random.fold_in(key, b))
        np.testing.assert_allclose(ys[b], expected, rtol=1e-6)
        np.testing.assert_allclose(log_joints[b], expected_log_joint, rtol=1e-5)
    assert not np.allclose(ys[0, 3:], ys[1, 3:])  # particles forecast differently


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_a_local_level_forecast_observes_the_data_and_samples_the_horizon(wrap):
    """Latent levels drawn by the base handler and the forecast drawn by the
    condition share the stream: step t draws keys 2t (level) and 2t + 1 (y)."""
    horizon = 9

    def model():
        with ppl.seed(8) as hs, ppl.trace() as tr, ppl.condition({"y": Y}):
            local_level(jnp.zeros(horizon))
        return hs[ppl.log_joint], ppl.values_of(tr[ppl.sites])

    log_joint, z = (model if wrap == "eager" else fx.jit(model))()
    key = jax.random.key(8)
    sigma = dist.LogNormal(0.0, 0.5).sample(jax.random.fold_in(key, 0))
    level, ys = 0.0, []
    for t in range(horizon):
        level = dist.Normal(level, sigma).sample(jax.random.fold_in(key, 1 + 2 * t))
        fresh = dist.Normal(level, 0.3).sample(jax.random.fold_in(key, 2 + 2 * t))
        ys.append(Y[t] if t < Y.shape[0] else fresh)
    np.testing.assert_allclose(z["y"], jnp.stack(ys), rtol=1e-5)
    at = {"sigma": z["sigma"], **{f"level_{t}": z["level"][t] for t in range(horizon)}}
    log_p = numpyro_log_density(local_level_unrolled, (z["y"], None), {}, at)[0]
    np.testing.assert_allclose(log_joint, log_p, rtol=1e-5)


def test_condition_longer_than_its_scan_is_refused():
    with ppl.seed(0), ppl.condition({"y": jnp.zeros(HORIZON + 2)}):
        with pytest.raises(fx.EffectUsageError, match=r"condition.*'y'.*9 steps.*scan of 7"):
            ar(ppl, ppl.scan, HORIZON)


def test_a_value_neither_per_step_nor_a_series_is_refused():
    with ppl.seed(0), ppl.condition({"y": jnp.zeros((HORIZON, 2))}):
        with pytest.raises(fx.EffectUsageError, match=r"condition.*'y'.*shape \(7, 2\)"):
            ar(ppl, ppl.scan, HORIZON)


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_a_per_step_value_is_observed_at_every_step(wrap):
    """NumPyro's rule again: a value of the site's own shape is not a series."""

    def run():
        with ppl.seed(0) as hs, ppl.condition({"y": jnp.float32(0.5)}):
            ys = ar(ppl, ppl.scan, 4)
        return ys, hs[ppl.log_joint]

    ys, log_joint = (run if wrap == "eager" else fx.jit(run))()
    np.testing.assert_array_equal(ys, jnp.full(4, 0.5))
    d = dist.Normal(jnp.array([0.0, 0.45, 0.45, 0.45]), 1.0)
    np.testing.assert_allclose(log_joint, d.log_prob(0.5).sum(), rtol=1e-6)


# `numpyro.plate` (or any NumPyro handler) around a `ppl.sample` is refused by name:
# the port's sites go through effax handlers only, so NumPyro's would be ignored.


@pytest.mark.parametrize("wrap", ["eager", "jit"])
def test_a_numpyro_plate_around_a_ppl_sample_is_refused(wrap):
    def model():
        with numpyro.plate("data", 3):
            return ppl.sample("x", dist.Normal(0.0, 1.0))

    run = model if wrap == "eager" else fx.jit(model)
    with (
        ppl.seed(0),
        pytest.raises(
            fx.EffectUsageError, match=r"ppl.sample\('x'\) ran inside numpyro.plate\('data'.*expand"
        ),
    ):
        run()


def test_a_numpyro_handler_around_a_ppl_sample_is_refused():
    with (
        ppl.seed(0),
        handlers.scale(scale=0.5),
        pytest.raises(fx.EffectUsageError, match=r"ran inside numpyro.handlers.scale.*ppl.scale"),
    ):
        ppl.sample("x", dist.Normal(0.0, 1.0))


def test_a_param_series_shorter_than_its_scan_is_refused():
    def step(c, _):
        return c + ppl.param("w", jnp.float32(0)), None

    with ppl.seed(0), ppl.substitute({"w": jnp.ones(2)}):
        with pytest.raises(
            fx.EffectUsageError, match=r"substitute.*'w' has 2 steps, fewer than.*scan of 4"
        ):
            ppl.scan(step, jnp.float32(0), None, length=4)


def test_a_numpyro_handler_around_a_ppl_param_is_refused():
    with (
        ppl.seed(0),
        handlers.substitute(data={"w": 1.0}),
        pytest.raises(
            fx.EffectUsageError, match=r"ppl.param\('w'\) ran inside numpyro.handlers.substitute"
        ),
    ):
        ppl.param("w", jnp.float32(0))
