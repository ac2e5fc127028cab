"""Rule 1: effect operations inside a function with a declared row."""

import jax.numpy as jnp
import mylib

import effax as fx
from mylib import dropout, log, steps, t2, temperature
from mylib import steps as s
from mylib import temperature as t

# case: operation in the row
@fx.uses(temperature)
def ask_declared() -> float:
    return temperature.ask()


# case: operation outside the row, with the message pinned
@fx.uses(temperature)
def set_undeclared() -> None:
    steps.set(1)  # E: effax-undeclared: Effect "steps" is neither in the effect row of "set_undeclared" (effax.uses(temperature)) nor handled by an enclosing "with"


# case: every operation of every kind outside a pure row
@fx.uses()
def all_undeclared() -> None:
    temperature.ask()  # E: effax-undeclared
    steps.get()  # E: effax-undeclared
    steps.set(2)  # E: effax-undeclared
    steps.modify(lambda n: n + 1)  # E: effax-undeclared
    dropout.next_key()  # E: effax-undeclared
    log.emit(1.0)  # E: effax-undeclared


# case: every operation declared
@fx.uses(temperature, steps, dropout, log)
def all_declared() -> None:
    steps.set(steps.get() + 1)
    steps.modify(lambda n: n + int(temperature.ask()))
    dropout.next_key()
    log.emit(temperature.ask())


# case: effax.random samplers draw from effax.rng
@fx.uses()
def sampler_undeclared() -> None:
    fx.random.normal((2,))  # E: effax-undeclared: Effect "rng" is neither


# case: effax.rng declared
@fx.uses(fx.rng)
def sampler_declared() -> None:
    fx.random.normal((2,))
    fx.random.uniform((2,), minval=-1.0)
    fx.rng.next_key()


# case: a sampler with stream= draws from that stream
@fx.uses(fx.rng)
def sampler_stream() -> None:
    fx.random.uniform((2,), stream=dropout)  # E: effax-undeclared: Effect "dropout"
    fx.random.bernoulli(0.5, stream=fx.rng)


# case: the discrete samplers (defined in effax._discrete) draw from their stream too
@fx.uses(fx.rng)
def discrete_samplers() -> None:
    fx.random.bernoulli(0.5, (4,))
    fx.random.randint((2,), 0, 5)
    fx.random.bernoulli(0.5, (4,), stream=dropout)  # E: effax-undeclared: Effect "dropout"
    fx.random.categorical(jnp.zeros(3), stream=dropout)  # E: effax-undeclared
    fx.random.permutation(5, stream=dropout)  # E: effax-undeclared
    fx.random.choice(5, (2,), stream=dropout)  # E: effax-undeclared
    with dropout.seed(0):
        fx.random.choice(5, (2,), stream=dropout)


fx.random.bernoulli(0.5, (4,))  # E: effax-unhandled
with fx.rng.seed(0):
    fx.random.permutation(5)
    fx.random.bernoulli(0.5, (4,), stream=dropout)  # E: effax-unhandled


# case: aliases name the same effect
@fx.uses(t)
def import_alias() -> float:
    return temperature.ask() + mylib.temperature.ask() + t2.ask()


# case: an effect under an alias is still the effect
@fx.uses(temperature)
def import_alias_undeclared() -> int:
    return s.get()  # E: effax-undeclared: Effect "steps"


# case: an effect declared in this module, further down
@fx.uses(steps)
def declared_below() -> int:
    return local.get() + steps.get()  # E: effax-undeclared: Effect "local"


local = fx.State[int]("local")


# case: a local alias is the effect it was bound to
@fx.uses(temperature)
def local_alias() -> int:
    here = temperature
    counter = steps
    here.ask()
    return counter.get()  # E: effax-undeclared: Effect "steps"


# case: a local rebound to another effect is not tracked
@fx.uses()
def local_rebound(flag: bool) -> int:
    effect = steps
    if flag:
        effect = local
    return effect.get()
