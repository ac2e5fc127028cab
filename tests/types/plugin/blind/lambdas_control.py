# mypy: disable-error-code="no-untyped-call"
"""Lambdas and control flow: effax.scan / fori_loop / cond / switch / while_loop / map."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
steps = fx.State[jax.Array]("steps")
trace_log = fx.Emit[jax.Array]("trace_log")
noise = fx.RandomKey("noise")


@fx.uses(temperature)
def scaled(x: jax.Array) -> jax.Array:
    return x * temperature.ask()


@fx.uses(steps)
def scan_body(carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    steps.modify(lambda n: n + 1)
    return carry + x, carry


@fx.uses(steps)
def keep_going(c: jax.Array) -> jax.Array:
    return c < steps.get()


@fx.uses(noise)
def noisy_step(c: jax.Array) -> jax.Array:
    return c + jax.random.normal(noise.next_key())


@fx.uses(trace_log)
def trace_log_and(x: jax.Array) -> jax.Array:
    trace_log.emit(x)
    return x


def apply_twice(f: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
    return f(f(x))


scaled_lambda = fx.uses(temperature)(lambda v: v * temperature.ask())


# case: scan body lambda within the row
@fx.uses(steps)
def scan_lambda_ok(xs: jax.Array) -> jax.Array:
    total, _ = fx.scan(lambda c, x: (c + x * steps.get(), x), jnp.float32(0), xs)
    return jnp.asarray(total)


# case: fori_loop lambda within the row
@fx.uses(temperature)
def fori_ok(x: jax.Array) -> jax.Array:
    return fx.fori_loop(0, 4, lambda i, c: c * temperature.ask(), x)


# case: cond branches with different effects, both declared
@fx.uses(temperature, noise)
def cond_ok(pred: jax.Array, x: jax.Array) -> jax.Array:
    return fx.cond(pred, lambda: scaled(x), lambda: x + jax.random.normal(noise.next_key()))


# case: switch branches declared
@fx.uses(temperature, trace_log)
def switch_ok(i: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.asarray(fx.switch(i, [lambda v: scaled(v), lambda v: v], x) + trace_log_and(x))


# case: while_loop with rowed functions
@fx.uses(steps, noise)
def while_ok(x: jax.Array) -> jax.Array:
    return fx.while_loop(keep_going, noisy_step, x)


# case: scan body handled by an enclosing with
@fx.uses()
def scan_handled(xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    with steps.init(jnp.int32(0)) as cell:
        total, _ = fx.scan(scan_body, jnp.float32(0), xs)
    return total, cell.value


# case: effax.map lambda within the row
@fx.uses(noise)
def map_ok(xs: jax.Array) -> jax.Array:
    return fx.map(lambda x: x + jax.random.normal(noise.next_key()), xs)


# case: lambda passed to JAX within the row
@fx.uses(temperature)
def jax_vmap_ok(xs: jax.Array) -> jax.Array:
    return jnp.asarray(jax.vmap(lambda v: v * temperature.ask())(xs))


# case: lambda passed to own helper within the row
@fx.uses(temperature)
def helper_ok(x: jax.Array) -> jax.Array:
    return apply_twice(lambda v: scaled(v), x)


# case: rowed lambda called within the row
@fx.uses(temperature)
def rowed_lambda_ok(x: jax.Array) -> jax.Array:
    return jnp.asarray(scaled_lambda(x))


# case: stored lambda called under its handler
@fx.uses()
def stored_lambda_handled(x: jax.Array) -> jax.Array:
    bump = lambda: steps.modify(lambda n: n + 1)
    with steps.init(jnp.int32(0)) as cell:
        bump()
    return x + cell.value


# case: nested def body passed to scan within the row
@fx.uses(steps)
def nested_body_ok(xs: jax.Array) -> jax.Array:
    def body(c: jax.Array, x: jax.Array) -> tuple[jax.Array, None]:
        steps.modify(lambda n: n + 1)
        return c + x, None

    total, _ = fx.scan(body, jnp.float32(0), xs)
    return jnp.asarray(total)


# case: scan body lambda outside the row
@fx.uses(temperature)
def scan_lambda_missing(xs: jax.Array) -> jax.Array:
    total, _ = fx.scan(lambda c, x: (c + x * steps.get(), x), jnp.float32(0), xs)  # E: effax-undeclared
    return jnp.asarray(total)


# case: rowed scan body outside the row
@fx.uses(temperature)
def scan_body_missing(xs: jax.Array) -> jax.Array:
    total, _ = fx.scan(scan_body, jnp.float32(0), xs)  # E: effax-undeclared
    return jnp.asarray(total * temperature.ask())


# case: fori_loop lambda outside the row
@fx.uses(steps)
def fori_missing(x: jax.Array) -> jax.Array:
    return fx.fori_loop(0, 4, lambda i, c: c * temperature.ask(), x)  # E: effax-undeclared


# case: one cond branch outside the row
@fx.uses(temperature)
def cond_missing(pred: jax.Array, x: jax.Array) -> jax.Array:
    return fx.cond(pred, lambda: scaled(x), lambda: x + jax.random.normal(noise.next_key()))  # E: effax-undeclared


# case: rowed function as a cond branch
@fx.uses(noise)
def cond_function_branch(pred: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.asarray(fx.cond(pred, scaled, lambda v: v, x))  # E: effax-undeclared


# case: switch branch outside the row
@fx.uses(temperature)
def switch_missing(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [lambda v: scaled(v), lambda v: trace_log_and(v)], x)  # E: effax-undeclared


# case: while_loop body outside the row
@fx.uses(steps)
def while_missing(x: jax.Array) -> jax.Array:
    return fx.while_loop(keep_going, noisy_step, x)  # E: effax-undeclared


# case: effax.map lambda outside the row
@fx.uses()
def map_missing(xs: jax.Array) -> jax.Array:
    return fx.map(lambda x: scaled(x), xs)  # E: effax-undeclared


# case: lambda passed to jax.lax.scan outside the row
@fx.uses(steps)
def lax_scan_missing(xs: jax.Array) -> jax.Array:
    total, _ = jax.lax.scan(lambda c, x: (c + scaled(x), None), jnp.float32(0), xs)  # E: effax-undeclared
    return jnp.asarray(total)


# case: lambda passed to jax.vmap outside the row
@fx.uses(steps)
def jax_vmap_missing(xs: jax.Array) -> jax.Array:
    return jnp.asarray(jax.vmap(lambda v: v * temperature.ask())(xs))  # E: effax-undeclared


# case: lambda passed to builtin map outside the row
@fx.uses()
def builtin_map_missing(xs: list[jax.Array]) -> list[jax.Array]:
    return list(map(lambda v: scaled(v), xs))  # E: effax-undeclared


# case: stored lambda called outside the row
@fx.uses(temperature)
def stored_lambda_missing(x: jax.Array) -> jax.Array:
    current = lambda: steps.get()
    return scaled(x) + current()  # E: effax-undeclared


# case: rowed lambda called outside the row
@fx.uses(steps)
def rowed_lambda_missing(x: jax.Array) -> jax.Array:
    return jnp.asarray(scaled_lambda(x)) + steps.get()  # E: effax-undeclared


# case: nested def body passed to scan outside the row
@fx.uses(temperature)
def nested_body_missing(xs: jax.Array) -> jax.Array:
    def body(c: jax.Array, x: jax.Array) -> tuple[jax.Array, None]:
        steps.modify(lambda n: n + 1)
        return c + x, None

    total, _ = fx.scan(body, jnp.float32(0), xs)  # E: effax-undeclared
    return jnp.asarray(total)


# case: lambda passed to own helper outside the row
@fx.uses(temperature)
def helper_missing(x: jax.Array) -> jax.Array:
    return apply_twice(lambda v: v * steps.get(), x)  # limit


# case: scan at module level
total_module, _ = fx.scan(scan_body, jnp.float32(0), jnp.arange(3.0))  # E: effax-unhandled

# case: cond at module level under a partial handler
with temperature.provide(jnp.float32(1.0)):
    y_cond = fx.cond(True, lambda: scaled(jnp.ones(2)), lambda: jnp.ones(2) + steps.get())  # E: effax-unhandled
