"""Configuration through `Ask`: static and traced values, defaults, a CLI entry point."""

from __future__ import annotations

import argparse
import dataclasses
import sys

import jax
import jax.numpy as jnp

import effax as fx
import b6lib.effects as fxe
from b6lib.effects import ModelConfig, SweepConfig
from b6lib.effects import temperature as temp
from b6lib.interceptors import loud
from b6lib.layers import l2_penalty, maybe_log, softmax_t


@fx.uses(fxe.config)
def layer_shapes() -> list[tuple[int, int]]:
    cfg = fxe.config.ask()
    return [(cfg.width, cfg.width)] * cfg.depth


@fx.uses(fxe.config, temp)
def forward(x: jax.Array) -> jax.Array:
    for n_in, n_out in layer_shapes():
        x = jnp.tanh(x @ jnp.eye(n_in, n_out)) / temp.ask()
    return x


X = jnp.ones((2, 8))

# case: a frozen dataclass as a static config, provided around the calls
with fxe.config.provide(ModelConfig(depth=3)):
    shapes = layer_shapes()
with fxe.config.provide(ModelConfig()), temp.provide(jnp.float32(2.0)):
    y = fx.jit(forward)(X)

# case: the config asked at module level with nothing installed
shapes_again = layer_shapes()  # E: effax-unhandled
with fxe.mode.provide("eval"):
    y2 = forward(X)  # E: effax-unhandled
with fxe.config.provide(ModelConfig(width=8)):
    y3 = fx.jit(forward)(X)  # E: effax-unhandled

# case: an Ask with a default needs no handler, asked or through a row
quiet = fxe.verbose.ask()
logged = maybe_log(jnp.ones(3))
penalty = fx.jit(l2_penalty)({"w": jnp.ones(3)})
with loud:
    logged_loudly = maybe_log(jnp.ones(3))


# case: a row that holds the defaulted Ask, called under its provider
@fx.uses(temp, fxe.verbose)
def tempered_ok(x: jax.Array) -> jax.Array:
    return maybe_log(x) / temp.ask()


with temp.provide(jnp.float32(0.5)), fxe.verbose.provide(True):
    ok = tempered_ok(jnp.ones(2))


# case: a row that leaves out the defaulted Ask, called under its provider
@fx.uses(temp)
def tempered(x: jax.Array) -> jax.Array:
    return maybe_log(x) / temp.ask()  # E: effax-undeclared


with temp.provide(jnp.float32(0.5)), fxe.verbose.provide(False):
    bad = tempered(jnp.ones(2))

# case: a hashable tuple schedule, and a frozen config with a tuple of tags
with fxe.schedule.provide((0.1, 0.01, 0.001)), fxe.config.provide(ModelConfig(tags=("a", "b"))):
    lrs = list(fxe.schedule.ask())
    depth = fxe.config.ask().depth

# case: unhashable values given to static Asks
bad_schedule = fxe.schedule.provide([0.1, 0.01])  # pyright: ignore[reportArgumentType]  # E: effax-handler-type, arg-type
bad_sweep = fxe.sweep.provide(SweepConfig("grid", [0, 1, 2]))  # E: effax-handler-type
with fxe.sweep.provide(SweepConfig(name="one", seeds=[7])):  # E: effax-handler-type
    pass

# case: a traced Ask[str] read eagerly only
with fxe.label.provide("baseline"):
    run_name = fxe.label.ask().upper()


@fx.uses(fxe.label)
def describe(x: jax.Array) -> jax.Array:
    print("run", fxe.label.ask())
    return x * 2


with fxe.label.provide("baseline"):
    described = describe(jnp.ones(2))

# case: the traced Ask[str] compiled under its provider
with fxe.label.provide("baseline"):
    compiled_describe = fx.jit(describe)(jnp.ones(2))  # E: effax-handler-type
described_handled = fx.handle(describe, fxe.label.provide("x"), transform=jax.jit)(jnp.ones(2))  # E: effax-handler-type


# case: default values that ask, evaluated where the def runs, under a handler or a default
def sharpen(x: jax.Array, t: float = fxe.weight_decay.ask()) -> jax.Array:
    return x * t


with temp.provide(jnp.float32(4.0)):

    def cool_ok(x: jax.Array, t: jax.Array = temp.ask()) -> jax.Array:
        return x / t


cooled = cool_ok(jnp.ones(2))


# case: a default value that asks with nothing installed where the def runs
def cool(x: jax.Array, t: jax.Array = temp.ask()) -> jax.Array:  # E: effax-unhandled
    return x / t


# case: class bodies run where the class is defined: defaults answer
class Defaults:
    wd = fxe.weight_decay.ask()
    verbose = fxe.verbose.ask()


# case: a class body asking a temperature nobody provides
class Frozen:
    t = temp.ask()  # E: effax-unhandled
    wd = fxe.weight_decay.ask()


# case: a defaulted Ask under interceptors: one forwarding to a provider, one answering
with fxe.weight_decay.provide(0.5), fx.intercept(fxe.weight_decay, ask=lambda outer: 2 * outer.ask()):
    doubled_ok = l2_penalty({"w": jnp.ones(2)})
with fx.intercept(fxe.weight_decay, ask=lambda outer: 0.0):
    no_penalty = l2_penalty({"w": jnp.ones(2)})

# case: a defaulted Ask under an interceptor that forwards to no provider
with fx.intercept(fxe.weight_decay, ask=lambda outer: 2 * outer.ask()):
    doubled_penalty = l2_penalty({"w": jnp.ones(2)})  # E: effax-unhandled


# case: a pure entry point parsing its command line, everything handled inside
@dataclasses.dataclass
class Args:
    depth: int
    temperature: float


def parse(argv: list[str]) -> Args:
    parser = argparse.ArgumentParser(description="config demo")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=1.0)
    ns = parser.parse_args(argv)
    return Args(depth=ns.depth, temperature=ns.temperature)


@fx.uses()
def main(argv: list[str]) -> float:
    args = parse(argv)
    cfg = ModelConfig(depth=args.depth)
    with fxe.config.provide(cfg), temp.provide(jnp.float32(args.temperature)):
        out = fx.jit(forward)(X)
    return float(jnp.sum(out))


if __name__ == "__main__":
    total = main(sys.argv[1:])


# case: an entry point whose row names only the config, reading the caller's temperature
@fx.uses(fxe.config)
def main_leaky(argv: list[str]) -> float:
    args = parse(argv)
    with fxe.config.provide(ModelConfig(depth=args.depth)):
        out = forward(X)  # E: effax-undeclared
    return float(jnp.sum(out))


if __name__ == "__main__":
    with temp.provide(jnp.float32(1.0)), fxe.config.provide(ModelConfig()):
        leaky_total = main_leaky(sys.argv[1:])

# case: the CLI block that forgets the temperature
if __name__ == "__main__":
    cli = parse(sys.argv[1:])
    with fxe.config.provide(ModelConfig(depth=cli.depth)):
        probs = softmax_t(forward(X))  # E: effax-unhandled, effax-unhandled
