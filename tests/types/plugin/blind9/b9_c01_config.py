"""Configuration with Ask: traced and static values, defaults, frozen dataclasses."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import ModelConfig, config, depth, gain, label, levels, mode, temperature, training, verbose
from b9lib.layers import maybe_print, soften

x = jnp.array([-1.0, 0.5, 2.0])

# case: activation chosen by a static ask


@fx.uses(mode, temperature)
def activate(v: jax.Array) -> jax.Array:
    act = {"relu": jax.nn.relu, "tanh": jnp.tanh}[mode.ask()]
    return act(v / temperature.ask())


with mode.provide("relu"), temperature.provide(jnp.float32(2.0)):
    y1 = activate(x)
    y2 = fx.jit(activate)(x)

# case: static ask missing at module level

y3 = activate(x)  # E: effax-unhandled

# case: static ask provided, traced one missing

with mode.provide("tanh"):
    y4 = fx.jit(activate)(x)  # E: effax-unhandled

# case: config dataclass read by a shapes helper


@fx.uses(config)
def layer_shapes() -> list[tuple[int, int]]:
    cfg = config.ask()
    return [(cfg.width, cfg.width)] * cfg.depth


with config.provide(ModelConfig(width=3, depth=3)):
    shapes = layer_shapes()

# case: config helper with a row that forgets config


@fx.uses(depth)
def describe_model() -> str:
    cfg = config.ask()  # E: effax-undeclared
    return f"{cfg.act} x {depth.ask()}"


with config.provide(ModelConfig()), depth.provide(2):
    describe_model()

# case: unhashable static value


@dataclasses.dataclass(frozen=True)
class Schedule:
    milestones: tuple[int, ...]
    names: list[str]


schedule = fx.Ask[Schedule]("schedule", static=True)
bad_schedule = schedule.provide(Schedule((1, 2), ["warm", "cool"]))  # E: effax-handler-type

# case: hashable static tuple


@fx.uses(levels)
def pyramid(v: jax.Array) -> jax.Array:
    for n in levels.ask():
        v = v + n
    return v


with levels.provide((1, 2, 3)):
    pyr = fx.jit(pyramid)(x)

# case: a tuple holding a list for a static ask

nested = fx.Ask[tuple[object, ...]]("nested", static=True)
nested_handler = nested.provide((1, [2, 3]))  # E: effax-handler-type

# case: default ask needs no handler

print(verbose.ask(), maybe_print(x), gain.ask())

# case: default ask in a row that omits it, no handler anywhere


@fx.uses(temperature)
def gained(v: jax.Array) -> jax.Array:
    return v * gain.ask() / temperature.ask()  # E: effax-undeclared


with temperature.provide(jnp.float32(1.0)):
    gained(x)

# case: default ask provided but hidden by the row


@fx.uses(temperature)
def loud_soften(v: jax.Array) -> jax.Array:
    if verbose.ask():  # E: effax-undeclared
        print("softening")
    return soften(v)


with temperature.provide(jnp.float32(1.0)), verbose.provide(True):
    loud_soften(x)

# case: nested override of a provided value


@fx.uses(mode)
def current_mode() -> str:
    return mode.ask()


with mode.provide("relu"):
    outer_mode = current_mode()
    with mode.provide("tanh"):
        inner_mode = current_mode()

# case: binding a value to one function with handle

cold = fx.handle(soften, temperature.provide(jnp.float32(0.1)))
cold_logits = cold(x)
with temperature.provide(jnp.float32(5.0)):
    warm_logits = soften(x)

# case: handle binds the wrong effect

unscaled = fx.handle(soften, mode.provide("relu"))
unscaled(x)  # E: effax-unhandled

# case: traced Ask of str compiled under its handler


@fx.uses(label)
def tagged(v: jax.Array) -> jax.Array:
    if label.ask() == "double":
        return 2 * v
    return v


with label.provide("double"):
    eager_tagged = tagged(x)

# case: traced str crossing jit

with label.provide("double"):
    fx.jit(tagged)(x)  # E: effax-handler-type

# case: traced str given to a compiled handle

for rep in range(2):
    tagged_fast = fx.handle(tagged, label.provide("double"), transform=jax.jit)  # E: effax-handler-type
    tagged_fast(x)

# case: default argument evaluated at definition

with temperature.provide(jnp.float32(3.0)):

    def with_default(v: jax.Array, t: jax.Array = temperature.ask()) -> jax.Array:
        return v / t

    with_default(x)

# case: default argument outside any handler


def scaled_default(v: jax.Array, t: jax.Array = temperature.ask()) -> jax.Array:  # E: effax-unhandled
    return v * t


# case: class body reading a static ask


with depth.provide(3):

    class Stack:
        n_layers = depth.ask()

    Stack()

# case: class body without a handler


class Wide:
    width = depth.ask()  # E: effax-unhandled


# case: training flag default off


@fx.uses(training)
def phase() -> str:
    return "train" if training.ask() else "eval"


print(phase())
with training.provide(True):
    print(phase())

# case: lambda with a row kept in a variable

halve = fx.uses(temperature)(lambda v: v / (2 * temperature.ask()))
with temperature.provide(jnp.float32(2.0)):
    halve(x)
halve(x)  # E: effax-unhandled

# case: a static list given to a tuple-typed ask

bad_levels = levels.provide([1, 2])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]  # E: effax-handler-type

# case: static dict config value

options = fx.Ask[dict[str, int]]("options", static=True)
options_handler = options.provide({"width": 3})  # E: effax-handler-type

# case: a frozen config with only hashable fields


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    name: str = "adam"
    betas: tuple[float, float] = (0.9, 0.999)


optim_config = fx.Ask[OptimConfig]("optim_config", static=True)


@fx.uses(optim_config)
def optimiser_name() -> str:
    cfg = optim_config.ask()
    return f"{cfg.name}{cfg.betas}"


with optim_config.provide(OptimConfig()):
    name_a = optimiser_name()
    name_b = fx.jit(lambda: jnp.float32(len(optimiser_name())))()

# case: an aliased declaration asked at module level

temp_alias = temperature
with temp_alias.provide(jnp.float32(1.5)):
    t_now = temperature.ask()
temp_alias.ask()  # E: effax-unhandled

# case: a module attribute access of a declaration

import b9lib.effects as E

with E.mode.provide("relu"):
    m_now = E.mode.ask()
E.mode.ask()  # E: effax-unhandled

# case: an import under another name

from b9lib.effects import temperature as temp_in

with temp_in.provide(jnp.float32(1.0)):
    soften(x)
soften(x)  # E: effax-unhandled

# case: provide kept in a variable, reused for several calls

hot = temperature.provide(jnp.float32(10.0))
with hot:
    hot1 = soften(x)
with hot:
    hot2 = fx.jit(soften)(x)

# case: interceptor doubling the temperature without a provider

hotter = fx.intercept(temperature, ask=lambda outer: 2 * outer.ask())
with temperature.provide(jnp.float32(0.5)), hotter:
    doubled = soften(x)
with hotter:
    soften(x)  # E: effax-unhandled

# case: interceptor forwarding a default ask with no provider

louder = fx.intercept(gain, ask=lambda outer: 2 * outer.ask())
with louder:
    gain.ask()  # E: effax-unhandled

# case: interceptor answering a default ask by itself

with fx.intercept(gain, ask=lambda outer: 3.0):
    g_fixed = gain.ask()
