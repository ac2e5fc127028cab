"""Gaussian-process regression: kernels configured by Ask, hyperparameters fitted by grad."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import gain, losses, lr, verbose

lengthscale = fx.Ask[jax.Array]("lengthscale")
jitter = fx.Ask[float]("jitter", default=1e-4)
kernel_name = fx.Ask[str]("kernel_name", static=True)
hyper = fx.State[jax.Array]("hyper")

x_train = jnp.linspace(0.0, 3.0, 6)
y_train = jnp.sin(x_train)
x_test = jnp.linspace(0.0, 3.0, 4)

# case: kernel matrix from asked hyperparameters


@fx.uses(lengthscale, kernel_name)
def kernel(a: jax.Array, b: jax.Array) -> jax.Array:
    d = (a[:, None] - b[None, :]) / lengthscale.ask()
    if kernel_name.ask() == "rbf":
        return jnp.exp(-0.5 * d**2)
    return jnp.exp(-jnp.abs(d))


@fx.uses(lengthscale, kernel_name, jitter)
def posterior_mean(xs: jax.Array, ys: jax.Array, xq: jax.Array) -> jax.Array:
    k = kernel(xs, xs) + jitter.ask() * jnp.eye(xs.shape[0])
    return kernel(xq, xs) @ jnp.linalg.solve(k, ys)  # E: no-any-return


with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    mean_rbf = posterior_mean(x_train, y_train, x_test)
    mean_rbf_fast = fx.jit(posterior_mean)(x_train, y_train, x_test)
    with jitter.provide(1e-2):
        mean_jittered = posterior_mean(x_train, y_train, x_test)

# case: posterior without a kernel name

with lengthscale.provide(jnp.float32(1.0)):
    posterior_mean(x_train, y_train, x_test)  # E: effax-unhandled

# case: posterior whose row omits the jitter default


@fx.uses(lengthscale, kernel_name)
def posterior_var(xs: jax.Array, xq: jax.Array) -> jax.Array:
    k = kernel(xs, xs) + jitter.ask() * jnp.eye(xs.shape[0])  # E: effax-undeclared
    kq = kernel(xq, xs)
    return jnp.diag(kernel(xq, xq) - kq @ jnp.linalg.solve(k, kq.T))


with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"), jitter.provide(1e-3):
    posterior_var(x_train, x_test)

# case: marginal likelihood fitted with effax grad on state


@fx.uses(kernel_name, hyper, losses)
def neg_log_lik(log_ell: jax.Array) -> jax.Array:
    with lengthscale.provide(jnp.exp(log_ell)):
        k = kernel(x_train, x_train) + 1e-3 * jnp.eye(x_train.shape[0])
    alpha = jnp.linalg.solve(k, y_train)
    nll = 0.5 * y_train @ alpha + 0.5 * jnp.linalg.slogdet(k)[1]
    hyper.set(jax.lax.stop_gradient(log_ell))
    losses.emit(jax.lax.stop_gradient(nll))
    return nll  # E: no-any-return


with fx.handlers(kernel_name.provide("rbf"), hyper.init(jnp.float32(0)), losses.collect(), lr.provide(jnp.float32(0.05))) as gh:
    log_ell = jnp.float32(0.0)
    for _ in range(3):
        g = fx.grad(neg_log_lik)(log_ell)
        log_ell = log_ell - lr.ask() * g

# case: fitting loop with a row missing the learning rate


@fx.uses(kernel_name, hyper, losses)
def fit(n: int) -> jax.Array:
    log_ell = jnp.float32(0.0)
    for _ in range(n):
        log_ell = log_ell - lr.ask() * fx.grad(neg_log_lik)(log_ell)  # E: effax-undeclared
    return log_ell  # E: no-any-return


with fx.handlers(kernel_name.provide("rbf"), hyper.init(jnp.float32(0)), losses.collect(), lr.provide(jnp.float32(0.05))):
    fit(2)

# case: checkpointed kernel evaluation

remat_kernel = fx.checkpoint(kernel)
with lengthscale.provide(jnp.float32(0.5)), kernel_name.provide("laplace"):
    k_remat = remat_kernel(x_train, x_test)

# case: JAX checkpoint of a rowed function at module level

jax.checkpoint(kernel)(x_train, x_test)  # E: effax-unhandled

# case: kernels mapped with jax.tree.map under handlers

pairs = {"train": x_train, "test": x_test}
with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    grams = jax.tree.map(lambda a: kernel(a, a), pairs)

# case: jax.tree.map of a rowed function with no handler


@fx.uses(lengthscale)
def rescale(a: jax.Array) -> jax.Array:
    return a / lengthscale.ask()


rescaled = jax.tree.map(rescale, pairs)  # E: effax-unhandled

# case: rowed function as a sort key

candidates = [jnp.float32(0.3), jnp.float32(2.0), jnp.float32(1.1)]


@fx.uses(lengthscale)
def distance_to_ell(v: jax.Array) -> float:
    return float(jnp.abs(v - lengthscale.ask()))


with lengthscale.provide(jnp.float32(1.0)):
    ordered = sorted(candidates, key=distance_to_ell)
sorted(candidates, key=distance_to_ell)  # E: effax-unhandled

# case: reduce over kernels with functools.reduce

with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    summed = functools.reduce(lambda acc, a: acc + kernel(a, a).sum(), [x_train, x_test], jnp.float32(0))

# case: reduce with a rowed reducer and no handlers


@fx.uses(lengthscale)
def add_scaled(acc: jax.Array, a: jax.Array) -> jax.Array:
    return acc + jnp.sum(a) / lengthscale.ask()


functools.reduce(add_scaled, [x_train, x_test], jnp.float32(0))  # E: effax-unhandled

# case: builtin map of a rowed function

with lengthscale.provide(jnp.float32(2.0)):
    mapped = list(map(rescale, [x_train, x_test]))

# case: lengthscale sweep with vmap of a handled function


def mean_at(ell: jax.Array) -> jax.Array:
    with lengthscale.provide(ell), kernel_name.provide("rbf"):
        return posterior_mean(x_train, y_train, x_test)


sweep = jax.vmap(mean_at)(jnp.array([0.5, 1.0, 2.0]))

# case: functools.partial of a rowed function

partial_kernel = functools.partial(kernel, x_train)
with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    pk = partial_kernel(x_test)
partial_kernel(x_test)  # E: effax-unhandled

# case: noise gain with a default, in a row

noise_level = fx.Ask[jax.Array]("noise_level")


@fx.uses(noise_level, gain, verbose)
def observed(y: jax.Array) -> jax.Array:
    if verbose.ask():
        print("observing")
    return y + gain.ask() * noise_level.ask()


with noise_level.provide(jnp.float32(0.01)):
    obs = observed(y_train)

# case: posterior sampled per test point with effax vmap


@fx.uses(lengthscale, kernel_name)
def point_mean(xq: jax.Array) -> jax.Array:
    kq = kernel(xq[None], x_train)
    k = kernel(x_train, x_train) + 1e-3 * jnp.eye(x_train.shape[0])
    return (kq @ jnp.linalg.solve(k, y_train))[0]  # E: no-any-return


with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    pointwise = fx.vmap(point_mean)(x_test)

# case: a vmap of it inside a row without the kernel name


@fx.uses(lengthscale)
def pointwise_means(xq: jax.Array) -> jax.Array:
    return fx.vmap(point_mean)(xq)  # E: effax-undeclared


with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    pointwise_means(x_test)

# case: an overloaded predictor with a row

from typing import overload


@overload
def predict(xq: jax.Array) -> jax.Array: ...
@overload
def predict(xq: float) -> float: ...
@fx.uses(lengthscale, kernel_name)
def predict(xq: jax.Array | float) -> jax.Array | float:
    arr = jnp.atleast_1d(jnp.asarray(xq))
    k = kernel(x_train, x_train) + 1e-3 * jnp.eye(x_train.shape[0])
    out = kernel(arr, x_train) @ jnp.linalg.solve(k, y_train)
    return out if isinstance(xq, jax.Array) else float(out[0])


with lengthscale.provide(jnp.float32(1.0)), kernel_name.provide("rbf"):
    p_arr = predict(x_test)
    p_float = predict(0.5)
predict(0.5)  # E: effax-unhandled

# case: hyperparameter grid evaluated with switch over kernels


@fx.uses(lengthscale)
def grid_value(i: jax.Array) -> jax.Array:
    return fx.switch(
        i,
        [
            lambda: jnp.sum(jnp.exp(-0.5 * (x_train / lengthscale.ask()) ** 2)),
            lambda: jnp.sum(jnp.exp(-jnp.abs(x_train / lengthscale.ask()))),
        ],
    )


with lengthscale.provide(jnp.float32(0.7)):
    grid = [grid_value(jnp.int32(i)) for i in range(2)]

# case: switch branches reading an undeclared kernel name


@fx.uses(lengthscale)
def grid_named(i: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda: jnp.sum(kernel(x_train, x_train)), lambda: jnp.float32(0)])  # E: effax-undeclared, no-any-return


with lengthscale.provide(jnp.float32(0.7)), kernel_name.provide("rbf"):
    grid_named(jnp.int32(0))

# case: while loop searching a lengthscale under a tolerance

tolerance = fx.Ask[jax.Array]("tolerance")


@fx.uses(tolerance)
def search_ell(start: jax.Array) -> jax.Array:
    return fx.while_loop(lambda e: e > tolerance.ask(), lambda e: e * 0.5, start)


with tolerance.provide(jnp.float32(0.1)):
    ell_found = search_ell(jnp.float32(2.0))
search_ell(jnp.float32(2.0))  # E: effax-unhandled

# case: the fitted model exported as a pure entry point


@fx.uses()
def fitted_mean(ell: jax.Array) -> jax.Array:
    with lengthscale.provide(ell), kernel_name.provide("rbf"):
        return posterior_mean(x_train, y_train, x_test)  # E: effax-undeclared


exported = jax.jit(fitted_mean)(jnp.float32(1.0))
