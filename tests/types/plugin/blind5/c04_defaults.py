"""Default values of parameters, and Asks declared with a default."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

import effax as fx
import b5lib.effects as cfg
from b5lib.effects import gain, verbose
from b5lib.effects import steps as n_calls
from b5lib.effects import temperature as tau
from b5lib.layers import amplified, scaled

ones = jnp.ones(2)

# case: a default computed from an Ask under a provider, where the def runs
with tau.provide(jnp.float32(0.5)):

    def at_half(x: jax.Array, t: jax.Array = tau.ask()) -> jax.Array:
        return x * t


print(at_half(ones))

# case: a default computed from an Ask with no provider at module level
def at_unknown(x: jax.Array, t: jax.Array = tau.ask()) -> jax.Array:  # E: effax-unhandled
    return x * t

# case: a default calling a function with a row, at module level
def pre_scaled(x: jax.Array = scaled(ones)) -> jax.Array:  # E: effax-unhandled
    return x

# case: a lambda default at module level, with and without a provider
with tau.provide(jnp.float32(1.0)):
    offset = lambda x, t=tau.ask(): x + t
print(offset(ones))  # E: no-untyped-call

# case: a lambda default at module level, with and without a provider (the failing use)
bad_offset = lambda x, t=tau.ask(): x + t  # E: effax-unhandled

# case: a default in a class body, which runs where the class is defined
class Schedule:
    def rate(self, base: float = gain.ask()) -> float:
        return base * 0.1


class HotSchedule:
    def rate(self, t: jax.Array = tau.ask()) -> jax.Array:  # E: effax-unhandled
        return t * 0.1


print(Schedule().rate())

# case: a class body under a provider, its default read once
with tau.provide(jnp.float32(2.0)):

    class WarmSchedule:
        def rate(self, t: jax.Array = tau.ask()) -> jax.Array:
            return t * 0.1


print(WarmSchedule().rate())

# case: a nested def whose default performs an effect outside the enclosing row
@fx.uses(n_calls)
def make_stepper() -> Callable[[jax.Array], jax.Array]:
    def stepper(x: jax.Array, t: jax.Array = tau.ask()) -> jax.Array:  # E: effax-undeclared
        n_calls.modify(lambda n: n + 1)
        return x * t

    return stepper


@fx.uses(n_calls, tau)
def make_stepper_ok() -> Callable[[jax.Array], jax.Array]:
    def stepper(x: jax.Array, t: jax.Array = tau.ask()) -> jax.Array:
        return x * t

    return stepper


with fx.handlers(tau.provide(jnp.float32(3.0)), n_calls.init(jnp.int32(0))):
    print(make_stepper_ok()(ones))
with fx.handlers(tau.provide(jnp.float32(3.0)), n_calls.init(jnp.int32(0))):
    make_stepper()

# case: a nested lambda default handled by a with inside the function
@fx.uses()
def make_offset() -> Callable[..., jax.Array]:
    with tau.provide(jnp.float32(4.0)):
        f: Callable[..., jax.Array] = lambda x, t=tau.ask(): x + t
    return f


print(make_offset()(ones))

# case: an Ask with a default asked at module level needs no handler
print(gain.ask(), verbose.ask(), amplified(ones))
print(fx.jit(amplified)(ones), fx.handle(amplified, transform=jax.jit)(ones))

# case: a default-valued Ask as a parameter default, at module level
def louder(x: jax.Array, k: float = gain.ask()) -> jax.Array:
    return x * k


print(louder(ones))

# case: a default-valued Ask outside a row, with its provider installed around the call
@fx.uses(tau)
def gained(x: jax.Array) -> jax.Array:
    return scaled(x) * gain.ask()  # E: effax-undeclared


@fx.uses(tau, gain)
def gained_ok(x: jax.Array) -> jax.Array:
    return scaled(x) * gain.ask()


with tau.provide(jnp.float32(1.0)):
    print(gained_ok(ones), fx.jit(gained_ok)(ones))
with fx.handlers(tau.provide(jnp.float32(1.0)), gain.provide(2.0)):
    gained(ones)

# case: a default-valued Ask through control flow at module level
print(fx.cond(True, lambda: amplified(ones), lambda: ones))
print(fx.scan(lambda c, _: (amplified(c), None), ones, None, length=2)[0])

# case: a static default-valued flag read to branch inside a compiled function
@fx.uses(verbose, tau)
def maybe_loud(x: jax.Array) -> jax.Array:
    if verbose.ask():
        return scaled(x) * 10
    return scaled(x)


with tau.provide(jnp.float32(1.0)):
    print(fx.jit(maybe_loud)(ones))
    with verbose.provide(True):
        print(fx.jit(maybe_loud)(ones))

# case: a static default-valued flag read to branch inside a compiled function (the failing use)
fx.jit(maybe_loud)(ones)  # E: effax-unhandled

# case: a declaration given its default through **options
with_default: dict[str, Any] = {"default": 0.25}
margin = fx.Ask[float]("margin", **with_default)
print(margin.ask())

# case: **options without a default, which is taken to have one
no_default: dict[str, Any] = {"static": True}
margin2 = fx.Ask[float]("margin2", **no_default)
margin2.ask()  # limit: **options are taken to hold a default

# case: a default reading State, at module level under its cell
with n_calls.init(jnp.int32(7)):

    def from_count(x: jax.Array, n: jax.Array = n_calls.get()) -> jax.Array:
        return x * n


print(from_count(ones))

# case: a default reading an Ask with a default inside a function whose row omits it
@fx.uses()
def make_gainer() -> Callable[..., float]:
    def gainer(k: float = cfg.gain.ask()) -> float:  # E: effax-undeclared
        return k

    return gainer


with cfg.gain.provide(3.0):
    make_gainer()

# case: a method default in a class body nested in a function with a full row
@fx.uses(tau)
def build_layer() -> Any:
    class Layer:
        def scale(self, t: jax.Array = tau.ask()) -> jax.Array:
            return t

    return Layer()


with tau.provide(jnp.float32(6.0)):
    print(build_layer().scale())
