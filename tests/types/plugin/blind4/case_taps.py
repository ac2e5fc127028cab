"""Taps: record / replace / ignore / gradients, in rows, handled functions and loops."""

from __future__ import annotations

import fnmatch

import jax
import jax.numpy as jnp

import effax as fx
from optics.effects import acts, lr, step_count
from optics.layers import Dense, tapped_mlp

x = jnp.linspace(0.0, 1.0, 3)
w1, w2 = jnp.eye(3) * 0.5, jnp.ones((3, 2))
probe = fx.Tap[jax.Array]("probe")


def ablate(site: str, value: jax.Array) -> jax.Array:
    return jnp.zeros_like(value) if fnmatch.fnmatch(site, "*/out") else value


# case: recording at module level, patterns matching none of the sites still handle them
with acts.record("block*") as rec:
    tapped_mlp(x, w1, w2)
    acts.tap("embed", x)
print(rec.value)

# case: a tap at module level with no handler
acts.tap("embed", x)  # E: effax-unhandled

# case: a function with a row, called without a tap handler
y0 = tapped_mlp(x, w1, w2)  # E: effax-unhandled

# case: replace with a mapping and with a function
with acts.replace({"mlp/hidden": jnp.zeros(3)}):
    fx.jit(tapped_mlp)(x, w1, w2)
with acts.replace(ablate) as rep:
    tapped_mlp(x, w1, w2)

# case: ignore() handed to fx.handle, stored in a variable
quiet_mlp = fx.handle(tapped_mlp, acts.ignore())
print(quiet_mlp(x, w1, w2))
quiet_fast = fx.handle(tapped_mlp, acts.ignore(), transform=jax.jit)
print(quiet_fast(x, w1, w2))

# case: gradients handler in a variable, around fx.grad
def loss(v: jax.Array) -> jax.Array:
    return jnp.sum(tapped_mlp(v, w1, w2) ** 2)


grads_handler = acts.gradients("mlp/*")
with grads_handler:
    dx = fx.grad(loss)(x)
print(grads_handler.value)

# case: a row that omits the tap, the function taps directly
@fx.uses(lr)
def scaled_tap(v: jax.Array) -> jax.Array:
    return acts.tap("scaled", v * lr.ask())  # E: effax-undeclared


with acts.record(), lr.provide(jnp.float32(2.0)):
    scaled_tap(x)

# case: a row that omits the tap, calling a tapped layer through an instance
@fx.uses(lr)
def dense_step(v: jax.Array) -> jax.Array:
    layer = Dense(jnp.eye(3))
    return layer(v) * lr.ask()  # E: effax-undeclared


with acts.ignore(), lr.provide(jnp.float32(2.0)):
    dense_step(x)

# case: the tap handled inside the row function by a recorder
@fx.uses(lr)
def dense_step_recorded(v: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    with acts.record("dense") as inner:
        y = Dense(jnp.eye(3))(v) * lr.ask()
    return y, inner.value


with lr.provide(jnp.float32(2.0)):
    dense_step_recorded(x)

# case: taps in a scan body, row declared, compiled
@fx.uses(acts, step_count)
def scanned(c: jax.Array) -> jax.Array:
    def body(carry: jax.Array, _: None) -> tuple[jax.Array, None]:
        step_count.modify(lambda n: n + 1)
        return acts.tap("h", jnp.tanh(carry)), None

    out, _ = fx.scan(body, c, None, length=4)
    return out


with fx.handlers(acts.record("h"), step_count.init(jnp.int32(0))) as hs:
    fx.jit(scanned)(jnp.float32(0.5))
print(hs[acts]["h"].shape, hs[step_count])

# case: scan with a lambda body performing a tap not in the row
@fx.uses(step_count)
def scanned_lambda(c: jax.Array) -> jax.Array:
    out, _ = fx.scan(lambda carry, _: (probe.tap("c", carry + 1.0), None), c, None, length=3)  # E: effax-undeclared
    return out


with probe.ignore(), step_count.init(jnp.int32(0)):
    scanned_lambda(jnp.float32(0.0))

# case: fori_loop lambda body tapping a second Tap, at module level, handled
with probe.record() as probe_rec:
    fx.fori_loop(0, 3, lambda i, c: probe.tap("c", c * 2.0), jnp.asarray(1.0))
print(probe_rec.value["c"].shape)

# case: fori_loop lambda body tapping, at module level, only the other tap handled
with acts.record():
    fx.fori_loop(0, 3, lambda i, c: probe.tap("c", c * 2.0), jnp.asarray(1.0))  # E: effax-unhandled

# case: cond with taps in both branches under a record handler, compiled
def signed(v: jax.Array) -> jax.Array:
    return fx.cond(v > 0, lambda: acts.tap("pos", v + 1), lambda: acts.tap("neg", -v))


with acts.record() as branches:
    fx.jit(lambda xs: fx.scan(lambda c, v: (c + signed(v), None), jnp.float32(0), xs))(jnp.array([1.0, -2.0]))
print(branches.value)

# case: cond at module level with a tapping lambda and no handler
fx.cond(jnp.bool_(True), lambda: acts.tap("pos", x), lambda: x)  # E: effax-unhandled

# case: a recorder and a replacer of two taps in one bundle, attribution style
with fx.handlers(probe.record("*"), acts.gradients()) as hs2:
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, probe.tap(site, v))):
        fx.grad(loss)(x)
print(sorted(hs2[probe]), sorted(hs2[acts]))

# case: intercept of a tap with only a recorder of the other tap outside
with probe.record("*"):
    with fx.intercept(acts, tap=lambda outer, site, v: outer.tap(site, probe.tap(site, v))):
        acts.tap("embed", x)  # E: effax-unhandled

# case: vmap over a tapping function at module level, recorder installed
with acts.record() as batched:
    fx.vmap(lambda v: tapped_mlp(v, w1, w2))(jnp.ones((4, 3)))
print({k: v.shape for k, v in batched.value.items()})

# case: vmap of a row function at module level, no handler
batched_mlp = fx.vmap(tapped_mlp, in_axes=(0, None, None))
batched_mlp(jnp.ones((4, 3)), w1, w2)  # E: effax-unhandled

# case: a tap row through fx.checkpoint in a pure entry point
@fx.uses()
def remat_entry(v: jax.Array) -> jax.Array:
    with acts.ignore():
        return fx.checkpoint(tapped_mlp)(v, w1, w2)


remat_entry(x)

# case: pure entry point missing the tap handler around a checkpointed call
@fx.uses()
def remat_entry_bad(v: jax.Array) -> jax.Array:
    fast = fx.checkpoint(tapped_mlp)
    return fast(v, w1, w2)  # E: effax-undeclared


with acts.ignore():
    remat_entry_bad(x)

# case: a tap with a default-less Tap and try/except around it
try:
    probe.tap("maybe", x)
except fx.UnhandledEffectError:
    print("no probe handler")

# case: a tap in try/except catching the wrong exception
try:
    probe.tap("maybe", x)  # E: effax-unhandled
except KeyError:
    pass

# case: a recording handled function, called from a row without the tap
recorded_mlp = fx.handle(tapped_mlp, acts.record("mlp/*"))


@fx.uses(lr)
def recorded_scaled(v: jax.Array) -> jax.Array:
    return recorded_mlp(v, w1, w2) * lr.ask()


with lr.provide(jnp.float32(2.0)):
    recorded_scaled(x)

# case: a handled function ignoring the wrong tap, called from a row without the right one
@fx.uses(lr)
def probe_quiet_scaled(v: jax.Array) -> jax.Array:
    return fx.handle(tapped_mlp, probe.ignore())(v, w1, w2) * lr.ask()  # E: effax-undeclared


with lr.provide(jnp.float32(2.0)), acts.ignore():
    probe_quiet_scaled(x)

# case: the other tap's handler does not handle this one
with probe.ignore():
    tapped_mlp(x, w1, w2)  # E: effax-unhandled

# case: replace and ignore of two taps in one bundle
with fx.handlers(acts.replace({"mlp/hidden": jnp.zeros(3)}), probe.ignore()):
    probe.tap("in", x)
    tapped_mlp(x, w1, w2)
