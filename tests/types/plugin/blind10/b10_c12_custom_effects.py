"""Custom effects and interceptors: an energy meter, capped and swallowing interceptors, taps, named state."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.custom import Capped, Gauge, Meter, Swallow, energy, flops, spend
from b10lib.effects import acts, bn_stats, ema, eps, step_count
from b10lib.layers import batch_norm, tapped_mlp

V = jnp.array([1.0, -2.0, 3.0])
P1 = {"w": jnp.full((3, 4), 0.1), "b": jnp.zeros(4)}
P2 = {"w": jnp.full((4, 2), 0.2), "b": jnp.zeros(2)}


@fx.uses(energy, flops)
def costed_matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    flops.add(jnp.float32(2 * a.size * b.shape[-1]))
    return spend(a @ b)


def capped_at(cap: float) -> fx.Interceptor[Meter]:
    return Capped(energy, cap)


# case: spending under a gauge made by the effect's handler maker
with energy.gauge() as g:
    spend(V)
    fx.jit(spend)(V)
print(g.value)

# case: spending at module level with no gauge
spend(V)  # E: effax-unhandled

# case: a matmul with both meters, one made by constructing the handler class
with energy.gauge() as ge, Gauge(flops) as gf:
    costed_matmul(V[None], jnp.ones((3, 2)))
print(ge.value, gf.value)

# case: a matmul with the flops meter missing
with energy.gauge():
    costed_matmul(V[None], jnp.ones((3, 2)))  # E: effax-unhandled

# case: a capped interceptor forwarding to a gauge outside it, compiled too
with energy.gauge() as g, Capped(energy, 0.5):
    spend(V)
    fx.jit(spend)(V)
print(g.value)

# case: the capped interceptor with nothing to forward to
with Capped(energy, 0.5):
    spend(V)  # E: effax-unhandled

# case: a swallowing interceptor answers alone, counting in a state outside it
with step_count.init(jnp.int32(0)) as sc, Swallow(energy, ()):
    spend(V)
print(sc.value)

# case: the swallowing interceptor with no counter outside it
with Swallow(energy, ()):
    spend(V)  # E: effax-unhandled


# case: the swallowing interceptor installed inside a function whose row lacks the counter
@fx.uses()
def dry_run(x: jax.Array) -> jax.Array:
    with Swallow(energy, ()):
        return spend(x)  # E: effax-undeclared


with step_count.init(jnp.int32(0)):
    dry_run(V)


# case: the same with the counter in the row
@fx.uses(step_count)
def dry_run_ok(x: jax.Array) -> jax.Array:
    with Swallow(energy, ()):
        return spend(x)


with step_count.init(jnp.int32(0)):
    dry_run_ok(V)

# case: an fx.intercept doubling additions, in a bundle after the gauge
double = fx.intercept(energy, add=lambda outer, a: outer.add(2 * a))
with fx.handlers(energy.gauge(), double) as hs:
    spend(V)
print(hs[energy])

# case: the doubling interceptor alone
with double:
    spend(V)  # E: effax-unhandled

# case: an interceptor whose function performs another effect: counts additions in a state
counting = fx.intercept(energy, add=lambda outer, a: (step_count.modify(lambda n: n + 1), outer.add(a))[1])
with step_count.init(jnp.int32(0)), energy.gauge(), counting:
    spend(V)

# case: the counting interceptor with no counter outside it
with energy.gauge(), counting:
    spend(V)  # E: effax-unhandled

# case: a handled spend given a capped interceptor only, called bare
capped_spend = fx.handle(spend, Capped(energy, 1.0))
capped_spend(V)  # E: effax-unhandled

# case: a handled spend given a gauge and a capped interceptor, called bare
full_spend = fx.handle(spend, energy.gauge(), Capped(energy, 1.0))
print(full_spend(V))

# case: an interceptor returned by a helper of mine, nothing outside it
with capped_at(0.1):
    spend(V)  # limit: an interceptor returned by a function of yours may answer alone or forward

# case: an interceptor answering reads of a state alone, a write forwarded to nothing
with fx.intercept(ema, get=lambda outer: jnp.float32(0)):
    ema.set(jnp.float32(1))  # limit: rows name effects, not operations

# case: an interceptor answering reads of a state, with the state outside it
with ema.init(jnp.float32(5)) as ec, fx.intercept(ema, get=lambda outer: jnp.float32(0)):
    ema.set(ema.get() + 1)
print(ec.value)

# case: activations recorded by pattern, compiled
with acts.record("mlp/*") as rec:
    fx.jit(tapped_mlp)(P1, P2, V)
print(sorted(rec.value))

# case: the tapped MLP at module level with no tap handler
tapped_mlp(P1, P2, V)  # E: effax-unhandled

# case: a hidden unit patched by replacement, and gradients at the taps
with acts.replace({"mlp/hidden": jnp.zeros(4)}):
    print(tapped_mlp(P1, P2, V))
with acts.gradients("mlp/hidden") as gr:
    fx.grad(lambda x: jnp.sum(tapped_mlp(P1, P2, x)))(V)
print(gr.value["mlp/hidden"].shape)

# case: a tap interceptor scaling the hidden layer, with a recorder outside it
boost = fx.intercept(acts, tap=lambda outer, site, x: outer.tap(site, 2 * x))
with acts.record() as rec2, boost:
    tapped_mlp(P1, P2, V)

# case: the tap interceptor with no tap handler outside it
with boost:
    tapped_mlp(P1, P2, V)  # E: effax-unhandled

# case: batch norm entries created on first use, eps from its default
with bn_stats.init() as bn:
    batch_norm("bn0", jnp.ones((4, 3)))
    fx.jit(lambda x: batch_norm("bn0", x))(jnp.ones((4, 3)))
print(sorted(bn.value))

# case: batch norm with no named-state handler
batch_norm("bn0", jnp.ones((4, 3)))  # E: effax-unhandled

# case: an entry read by name without init before it exists
with bn_stats.init():
    bn_stats.get("bn9/mean")  # limit: entries by name are not checked

# case: a gauge snapshotted and restored into a fresh one
with energy.gauge() as g1:
    spend(V)
snap = fx.snapshot(g1)
g2 = energy.gauge()
fx.restore(snap, g2)
print(g2.value)


# case: a normaliser that asks eps from a row without it, under a caller's provider
@fx.uses(bn_stats)
def normalise(x: jax.Array) -> jax.Array:
    return batch_norm("bn1", x)  # E: effax-undeclared


with bn_stats.init(), eps.provide(1e-3):
    normalise(jnp.ones((4, 3)))

# case: a scan that spends per step, under a gauge and a capped interceptor
with energy.gauge() as g3, Capped(energy, 1.0):
    fx.scan(lambda c, x: (c + spend(x), None), jnp.float32(0), V)
print(g3.value)

# case: the same scan at module level with no gauge
fx.scan(lambda c, x: (c + spend(x), None), jnp.float32(0), V)  # E: effax-unhandled

# case: a budget read through its property operation, under a purse
from b10lib.custom import Budget, budget  # noqa: E402

with budget.purse(5.0) as purse:
    budget.pay(2.0)
    print(budget.left)
print(purse.value)

# case: the budget read at module level with no purse
print(budget.left)  # E: effax-unhandled


# case: a shop function that pays from a row without the budget
@fx.uses(energy)
def buy(x: jax.Array) -> jax.Array:
    budget.pay(jnp.sum(x))  # E: effax-undeclared
    return spend(x)


with budget.purse(10.0), energy.gauge():
    buy(V)


# case: an interceptor subclass of the budget that answers reads alone
class Unlimited(fx.Interceptor[Budget]):
    def remaining(self) -> jax.Array:
        return jnp.float32(1e9)  # E: no-any-return


with budget.purse(1.0), Unlimited(budget, ()):
    print(budget.left)
    budget.pay(0.5)
