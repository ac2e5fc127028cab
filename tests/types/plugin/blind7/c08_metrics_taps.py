"""Metrics and logging: Emit collectors, taps on intermediates, interceptors of both."""

from __future__ import annotations

import fnmatch

import jax
import jax.numpy as jnp

import effax as fx
from b7lib.effects import acts, init_key, losses, metrics, step_count
from b7lib.interceptors import ClipLosses, count_keys
from b7lib.layers import dense, init_dense, jitter
from b7lib.training import report

log_every = fx.Ask[int]("log_every", static=True, default=10)
grad_log = fx.Emit[jax.Array]("grad_log")
probes = fx.Tap[jax.Array]("probes")

with init_key.seed(0):
    P1 = init_dense(4, 8)
    P2 = init_dense(8, 2)


@fx.uses(acts)
def mlp(x: jax.Array) -> jax.Array:
    h = jnp.tanh(dense(P1, x, "mlp/hidden"))
    return dense(P2, h, "mlp/out")


@fx.uses(acts, losses, metrics)
def loss_with_metrics(x: jax.Array, y: jax.Array) -> jax.Array:
    out = mlp(x)
    loss = jnp.mean((out - y) ** 2)
    losses.emit(loss)
    report(loss=loss, out_norm=jnp.linalg.norm(out))
    return loss


@fx.uses(acts, losses)
def loss_unreported(x: jax.Array, y: jax.Array) -> jax.Array:
    loss = jnp.mean((mlp(x) - y) ** 2)
    losses.emit(loss)
    report(loss=loss)  # E: effax-undeclared
    return loss


@fx.uses(probes)
def probed_scan(x: jax.Array) -> jax.Array:
    def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        return probes.tap("c", jnp.tanh(c) + 0.1), None

    return fx.scan(body, x, None, length=4)[0]


@fx.uses(losses)
def probed_scan_undeclared(x: jax.Array) -> jax.Array:
    def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
        return probes.tap("c", jnp.tanh(c) + 0.1), None

    return fx.scan(body, x, None, length=4)[0]  # E: effax-undeclared


x = jnp.linspace(-1.0, 1.0, 4)
y = jnp.array([0.5, -0.5])

# case: a loss with taps ignored and every writer collected
with fx.handlers(acts.ignore(), losses.collect(), metrics.collect()) as hs:
    l0 = loss_with_metrics(x, y)
    l1 = fx.jit(loss_with_metrics)(x, y)

# case: a loss with its metrics left unhandled
with acts.ignore(), losses.collect():
    loss_with_metrics(x, y)  # E: effax-unhandled

# case: a loss with no tap handler: taps need one too
with losses.collect(), metrics.collect():
    loss_with_metrics(x, y)  # E: effax-unhandled

# case: the model recorded by pattern: a recorder handles every site
with acts.record("mlp/hid*") as rec:
    out = fx.jit(mlp)(x)

# case: the model called with no handler of its taps
mlp(x)  # E: effax-unhandled

# case: a replaced hidden site, compiled
with acts.replace({"mlp/hidden": jnp.zeros(8)}):
    patched = fx.jit(mlp)(x)


def ablate(site: str, value: jax.Array) -> jax.Array:
    return jnp.zeros_like(value) if fnmatch.fnmatch(site, "*/out") else value


# case: a replacement by function
with acts.replace(ablate):
    ablated = mlp(x)

# case: an interceptor of taps handles nothing by itself
with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, 2 * v)):
    mlp(x)  # E: effax-unhandled

# case: an interceptor of taps over a recorder
with acts.record() as rec2, fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, 2 * v)):
    doubled = mlp(x)

# case: gradients at the tapped sites
with acts.gradients("mlp/*") as site_grads:
    g = fx.grad(lambda v: jnp.sum(mlp(v) ** 2))(x)

# case: a loop of probes recorded
with probes.record() as probe_rec:
    final = fx.jit(probed_scan)(jnp.float32(0.0))

# case: a loop of probes with nothing recording
probed_scan(jnp.float32(0.0))  # E: effax-unhandled

# case: a scanned body whose row misses the probes (a recorder outside)
with probes.record(), losses.collect():
    probed_scan_undeclared(jnp.float32(0.0))

# case: a row that leaves out metrics its callee reports (a collector outside)
with acts.ignore(), losses.collect(), metrics.collect():
    loss_unreported(x, y)

# case: a clipping interceptor forwarding to a collector
with losses.collect() as clipped, ClipLosses(losses, ()):
    losses.emit(jnp.float32(42.0))

# case: a clipping interceptor with nothing behind it, at module level
with ClipLosses(losses, ()):
    losses.emit(jnp.float32(42.0))  # E: effax-unhandled

# case: counted key draws, the count kept outside the interceptor
with fx.rng.seed(0), step_count.init(jnp.int32(0)) as drawn, count_keys:
    j = jitter(x)
    j2 = fx.jit(jitter)(x)

# case: counted key draws with no counter outside the interceptor
with fx.rng.seed(0), count_keys:
    jitter(x)  # E: effax-unhandled

# case: the counter installed inside the interceptor is not visible to it
with fx.rng.seed(0), count_keys, step_count.init(jnp.int32(0)):
    jitter(x)  # E: effax-unhandled


@fx.uses(losses, metrics)
def log_phase(phase: jax.Array, value: jax.Array) -> jax.Array:
    return fx.switch(  # E: no-any-return
        phase,
        [
            lambda v: (losses.emit(v), v)[1],
            lambda v: (losses.emit(2 * v), v)[1],
        ],
        value,
    )


@fx.uses(metrics)
def log_phase_narrow(phase: jax.Array, value: jax.Array) -> jax.Array:
    return fx.switch(phase, [lambda v: (losses.emit(v), v)[1], lambda v: v], value)  # E: effax-undeclared, no-any-return


# case: a switch between two logging branches
with losses.collect() as phase_log, metrics.collect():
    log_phase(jnp.int32(1), jnp.float32(3.0))

# case: a switch whose branch emits a loss outside the row (a collector outside)
with losses.collect(), metrics.collect():
    log_phase_narrow(jnp.int32(0), jnp.float32(3.0))

# case: a switch of logging branches with no collectors
log_phase(jnp.int32(0), jnp.float32(1.0))  # E: effax-unhandled


@fx.uses(step_count, log_every)
def count_until(limit: jax.Array) -> jax.Array:
    def cond(n: jax.Array) -> jax.Array:
        return n < limit

    def body(n: jax.Array) -> jax.Array:
        step_count.modify(lambda s: s + log_every.ask())
        return n + 1

    return fx.while_loop(cond, body, jnp.int32(0))  # E: no-any-return


# case: a while loop that reduces into a State, with the static default
with step_count.init(jnp.int32(0)) as sc:
    count_until(jnp.int32(3))

# case: a while loop with no state installed
count_until(jnp.int32(3))  # E: effax-unhandled

# case: gradients logged through fx.value_and_grad with a collector
with grad_log.collect() as gl:
    val, gr = fx.value_and_grad(lambda w: (grad_log.emit(jax.lax.stop_gradient(w)), jnp.sum(w**2))[1])(x)

# case: gradients logged with no collector
fx.value_and_grad(lambda w: (grad_log.emit(jax.lax.stop_gradient(w)), jnp.sum(w**2))[1])(x)  # E: effax-unhandled

# case: a metrics report collected at module level
with metrics.collect():
    report(step=jnp.int32(1))

# case: a metrics report with nothing installed
report(step=jnp.int32(1))  # E: effax-unhandled
