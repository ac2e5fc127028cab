"""A tiny DDPM-style diffusion model: a schedule provided by the caller, keys from the
shared noise stream, the denoiser's activations tapped, function evaluations counted."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

import effax as fx
from b8lib.effects import noise

schedule = fx.Ask[jax.Array]("schedule")  # the betas, one per step
n_steps = fx.Ask[int]("n_steps", static=True)
guidance = fx.Ask[float]("guidance", default=1.0)
sampler_mode = fx.Ask[str]("sampler_mode")
timesteps = fx.Ask[tuple[list[int], ...]]("timesteps", static=True)
denoise_acts = fx.Tap[jax.Array]("denoise_acts")
sample_log = fx.Emit[jax.Array]("sample_log")
nfe = fx.State[jax.Array]("nfe")

BETAS = jnp.linspace(1e-3, 0.2, 8)
DIM = 4


def make_params(seed: int) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {
        "w1": jax.random.normal(k1, (DIM + 1, 16)) * 0.3,
        "w2": jax.random.normal(k2, (16, DIM)) * 0.3,
    }


PARAMS = make_params(0)


# case: forward noising q(x_t | x_0) draws from the shared noise stream
@fx.uses(schedule, noise)
def q_sample(x0: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    alpha_bar = jnp.cumprod(1.0 - schedule.ask())[t]
    eps = fx.random.normal(x0.shape, stream=noise)
    return jnp.sqrt(alpha_bar) * x0 + jnp.sqrt(1.0 - alpha_bar) * eps, eps


with schedule.provide(BETAS), noise.seed(0):
    xt, eps0 = q_sample(jnp.ones(DIM), jnp.int32(3))


# case: the denoiser taps its hidden layer and counts its evaluations
@fx.uses(denoise_acts, nfe)
def eps_model(params: dict[str, jax.Array], x: jax.Array, t: jax.Array) -> jax.Array:
    nfe.modify(lambda n: n + 1)
    h = jnp.tanh(jnp.concatenate([x, jnp.atleast_1d(t / 8.0)]) @ params["w1"])
    h = denoise_acts.tap("hidden", h)
    return h @ params["w2"]


with fx.handlers(denoise_acts.record(), nfe.init(jnp.int32(0))) as hs:
    eps_model(PARAMS, jnp.ones(DIM), jnp.float32(2.0))
print("hidden", hs[denoise_acts]["hidden"].shape, "nfe", int(hs[nfe]))


# case: one reverse step; guidance answers its default where nobody provides it
@fx.uses(schedule, noise, guidance, denoise_acts, nfe)
def p_step(params: dict[str, jax.Array], x: jax.Array, t: jax.Array) -> jax.Array:
    beta = schedule.ask()[t]
    alpha_bar = jnp.cumprod(1.0 - schedule.ask())[t]
    eps = guidance.ask() * eps_model(params, x, t.astype(jnp.float32))
    mean = (x - beta / jnp.sqrt(1.0 - alpha_bar) * eps) / jnp.sqrt(1.0 - beta)
    return mean + jnp.sqrt(beta) * fx.random.normal(x.shape, stream=noise)


# case: the sampler is a fori_loop over the static number of steps, compiled
@fx.uses(schedule, noise, guidance, denoise_acts, nfe, n_steps)
def sample(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    n = n_steps.ask()
    return fx.fori_loop(0, n, lambda i, x: p_step(params, x, jnp.int32(n - 1) - i), x)


fast_sample = fx.jit(sample)
with fx.handlers(
    schedule.provide(BETAS), noise.seed(1), denoise_acts.ignore(), nfe.init(jnp.int32(0)), n_steps.provide(8)
) as hs:
    x_gen = fast_sample(PARAMS, jnp.zeros(DIM))
    x_gen = fast_sample(PARAMS, jnp.zeros(DIM))
print("sample", x_gen, "evaluations", int(hs[nfe]))


# case: a logging sampler whose row leaves out the log it emits into
@fx.uses(schedule, noise, guidance, denoise_acts, nfe)
def sample_logged(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    x = fx.fori_loop(0, 3, lambda i, x: (sample_log.emit(x), p_step(params, x, 2 - i))[1], x)  # E: effax-undeclared
    return x


with fx.handlers(
    schedule.provide(BETAS), noise.seed(2), denoise_acts.ignore(), nfe.init(jnp.int32(0)), sample_log.collect()
):
    sample_logged(PARAMS, jnp.zeros(DIM))


# case: a script compiles the sampler with the step count given but no schedule
with fx.handlers(noise.seed(3), denoise_acts.ignore(), nfe.init(jnp.int32(0)), n_steps.provide(4)):
    x_bad = fx.jit(sample)(PARAMS, jnp.zeros(DIM))  # E: effax-unhandled


# case: a traced string option read eagerly is fine, compiled it cannot cross
@fx.uses(sampler_mode, schedule)
def step_scale() -> jax.Array:
    factor = 2.0 if sampler_mode.ask() == "ddim" else 1.0
    return schedule.ask()[0] * factor


with sampler_mode.provide("ddim"), schedule.provide(BETAS):
    print("eager scale", step_scale())
    fx.jit(step_scale)()  # E: effax-handler-type


# case: the same mistake bound with fx.handle and called later
with schedule.provide(BETAS):
    ddim_scale = fx.handle(step_scale, sampler_mode.provide("ddim"), transform=jax.jit)  # E: effax-handler-type
    ddim_scale()


# case: denoising score matching, the denoiser rematerialised, differentiated with fx.grad
@fx.uses(schedule, noise, denoise_acts, nfe)
def dsm_loss(params: dict[str, jax.Array], x0: jax.Array) -> jax.Array:
    t = fx.random.randint((), 0, 8, stream=noise)
    xt, eps = q_sample(x0, t)
    pred = fx.checkpoint(eps_model)(params, xt, t.astype(jnp.float32))
    return jnp.mean((pred - eps) ** 2)


with fx.handlers(schedule.provide(BETAS), noise.seed(4), denoise_acts.ignore(), nfe.init(jnp.int32(0))):
    g = fx.jit(fx.grad(dsm_loss))(PARAMS, jnp.ones(DIM))
print("grad norm", float(jnp.linalg.norm(g["w1"])))


# case: a training step whose row forgets the evaluation counter
@fx.uses(schedule, noise, denoise_acts)
def train_step(params: dict[str, jax.Array], x0: jax.Array) -> dict[str, jax.Array]:
    loss, grads = fx.value_and_grad(dsm_loss)(params, x0)  # E: effax-undeclared
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)  # E: no-any-return


with fx.handlers(schedule.provide(BETAS), noise.seed(5), denoise_acts.ignore(), nfe.init(jnp.int32(0))):
    train_step(PARAMS, jnp.ones(DIM))


# case: the same step with the counter handled inside: a pure entry point
@fx.uses(schedule, noise, denoise_acts)
def train_step_counted(params: dict[str, jax.Array], x0: jax.Array) -> tuple[dict[str, jax.Array], jax.Array]:
    with nfe.init(jnp.int32(0)) as counter:
        loss, grads = fx.value_and_grad(dsm_loss)(params, x0)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), counter.value


with fx.handlers(schedule.provide(BETAS), noise.seed(6), denoise_acts.ignore()):
    new_params, calls = train_step_counted(PARAMS, jnp.ones(DIM))


# case: a post-processing step taps the clean estimate outside its row
@fx.uses(schedule)
def predict_x0(x: jax.Array, eps: jax.Array, t: jax.Array) -> jax.Array:
    alpha_bar = jnp.cumprod(1.0 - schedule.ask())[t]
    x0 = (x - jnp.sqrt(1.0 - alpha_bar) * eps) / jnp.sqrt(alpha_bar)
    return denoise_acts.tap("x0", x0)  # E: effax-undeclared


with schedule.provide(BETAS), denoise_acts.record():
    predict_x0(xt, eps0, jnp.int32(3))


# case: the denoiser run at module level with its taps recorded but nothing counting
with denoise_acts.record() as rec:
    eps_hat = eps_model(PARAMS, xt, jnp.float32(3.0))  # E: effax-unhandled


# case: jax.grad of the loss with respect to the input, called at module level
@fx.uses(denoise_acts, nfe)
def energy(x: jax.Array) -> jax.Array:
    return jnp.sum(eps_model(PARAMS, x, jnp.float32(0.0)) ** 2)


with nfe.init(jnp.int32(0)):
    score = jax.grad(energy)(jnp.ones(DIM))  # E: effax-unhandled


# case: the same gradient with both handlers, and the emitted values discarded
with nfe.init(jnp.int32(0)), denoise_acts.ignore(), sample_log.discard():
    score = jax.grad(energy)(jnp.ones(DIM))
    sample_log.emit(score)


# case: a schedule chosen by index with fx.switch
@fx.uses(n_steps)
def pick_schedule(kind: jax.Array) -> jax.Array:
    n = n_steps.ask()
    linear = lambda: jnp.linspace(1e-3, 0.2, n)  # noqa: E731
    cosine = lambda: 0.2 * (1.0 - jnp.cos(jnp.linspace(0.0, jnp.pi / 2, n)))  # noqa: E731
    return fx.switch(kind, [linear, cosine])


with n_steps.provide(8):
    betas_cos = pick_schedule(jnp.int32(1))


# case: functools.partial of the sampler, called with nothing installed
sample_default = functools.partial(sample, PARAMS)
x_partial = sample_default(jnp.zeros(DIM))  # E: effax-unhandled


# case: a static option holding lists of step indices
with timesteps.provide(([7, 5, 3], [1, 0])):  # E: effax-handler-type
    print(timesteps.ask())


# case: the static option as tuples, used to unroll a strided sampler
strided = fx.Ask[tuple[int, ...]]("strided", static=True)


@fx.uses(schedule, noise, guidance, denoise_acts, nfe, strided)
def strided_sample(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    for t in strided.ask():
        x = p_step(params, x, jnp.int32(t))
    return x


with fx.handlers(
    schedule.provide(BETAS), noise.seed(7), denoise_acts.ignore(), nfe.init(jnp.int32(0)), strided.provide((7, 4, 1))
) as hs:
    fx.jit(strided_sample)(PARAMS, jnp.zeros(DIM))
print("strided evaluations", int(hs[nfe]))
