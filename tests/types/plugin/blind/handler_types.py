"""Handler values: what a static Ask, a traced Ask and a State can carry."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp

import effax as fx


@dataclasses.dataclass(frozen=True)
class FrozenConfig:
    depth: int
    width: int


@dataclasses.dataclass
class MutableConfig:
    depth: int
    width: int


layer_sizes = fx.Ask[Sequence[int]]("layer_sizes", static=True)
options = fx.Ask[dict[str, float]]("options", static=True)
tags = fx.Ask[set[str]]("tags", static=True)
frozen_tags = fx.Ask[frozenset[str]]("frozen_tags", static=True)
config = fx.Ask[FrozenConfig]("config", static=True)
mutable_config = fx.Ask[MutableConfig]("mutable_config", static=True)
anything = fx.Ask[object]("anything", static=True)
mode = fx.Ask[str]("mode", static=True)
training = fx.Ask[bool]("training", static=True)
annotated_levels: fx.Ask[list[int]] = fx.Ask[list[int]]("annotated_levels", static=True)
label = fx.Ask[str]("label")
lr = fx.Ask[float]("lr")
temperature = fx.Ask[jax.Array]("temperature")
total = fx.State[float]("total")
count = fx.State[int]("count")
name_state = fx.State[str]("name_state")
buffer = fx.State[bytes]("buffer")
steps = fx.State[jax.Array]("steps")


@fx.uses(total, temperature)
def accumulate(x: jax.Array) -> jax.Array:
    total.modify(lambda t: t + 1.0)
    return x * temperature.ask()


# case: hashable static values
@fx.uses()
def static_ok() -> None:
    with fx.handlers(
        layer_sizes.provide((32, 32)),
        frozen_tags.provide(frozenset({"a", "b"})),
        config.provide(FrozenConfig(2, 64)),
        mode.provide("train"),
        training.provide(True),
        anything.provide(("x", 1)),
    ):
        pass


# case: arrays and floats for traced values
@fx.uses()
def traced_ok(x: jax.Array) -> jax.Array:
    with fx.handlers(temperature.provide(jnp.float32(0.5)), lr.provide(0.01)):
        with total.init(0.0), steps.init(jnp.int32(0)):
            return accumulate(x)


# case: int state started from an int
@fx.uses()
def int_state_ok() -> int:
    with count.init(0) as cell:
        count.set(count.get() + 1)
    return cell.value


# case: float state started from a float variable
@fx.uses(temperature)
def float_var_ok(x: jax.Array, start: float) -> jax.Array:
    with total.init(start):
        return accumulate(x)


# case: handlers made in fx.handle with good values
handled_ok = fx.handle(accumulate, total.init(1.0), temperature.provide(jnp.float32(1.0)))

# case: list for a static Sequence
sizes_bad = layer_sizes.provide([32, 32])  # E: effax-handler-type

# case: dict for a static Ask
@fx.uses()
def static_dict() -> None:
    with options.provide({"lr": 0.1}):  # E: effax-handler-type
        pass


# case: set for a static Ask
@fx.uses()
def static_set() -> None:
    with fx.handlers(tags.provide({"a"}), mode.provide("eval")):  # E: effax-handler-type
        pass


# case: non-frozen dataclass for a static Ask
mutable_provider = mutable_config.provide(MutableConfig(2, 64))  # E: effax-handler-type

# case: list for a static Ask of object
@fx.uses()
def static_object_list() -> None:
    values = [1, 2, 3]
    with anything.provide(values):  # E: effax-handler-type
        pass


# case: list for an annotated static Ask
levels_bad = annotated_levels.provide([1, 2])  # E: effax-handler-type

# case: str for a traced Ask, performed by a compiled call under it
# (issue 28 narrowed this rule: an `Ask[str]` given a str and used eagerly is legal)
@fx.uses()
def traced_str() -> None:
    with label.provide("run-1"):  # (marked here before issue 42: now reported on the compiled call, where run time raises)
        fx.jit(lambda: len(label.ask()))()  # E: effax-handler-type


# case: str for a traced Ask[str] used eagerly only
@fx.uses()
def traced_str_eager() -> None:
    with label.provide("run-1"):
        print(label.ask())


# case: str for a State
name_cell = name_state.init("")  # (reported before issue 42; a State[str] given a str now only where a compiled call performs it)

# case: bytes for a State
@fx.uses()
def bytes_state() -> None:
    with buffer.init(b"\x00"):  # (reported before issue 42, as above)
        buffer.set(buffer.get() + b"\x01")


# case: int literal for State[float]
@fx.uses(temperature)
def float_state_int(x: jax.Array) -> jax.Array:
    with total.init(0):  # E: effax-handler-type
        return accumulate(x)


# case: int variable for State[float]
@fx.uses(temperature)
def float_state_len(xs: list[jax.Array]) -> jax.Array:
    n = len(xs)
    with total.init(n):  # E: effax-handler-type
        return accumulate(xs[0])


# case: bool for State[int]
@fx.uses()
def int_state_bool() -> int:
    with count.init(False) as cell:  # E: effax-handler-type
        count.set(count.get() + 1)
    return cell.value


# case: bad value inside fx.handlers
@fx.uses()
def handlers_bad(x: jax.Array) -> jax.Array:
    with fx.handlers(temperature.provide(jnp.float32(1.0)), total.init(1)):  # E: effax-handler-type
        return accumulate(x)


# case: bad value given to fx.handle
handled_bad = fx.handle(accumulate, total.init(0), temperature.provide(jnp.float32(1.0)))  # E: effax-handler-type

# case: bad value in a class body
class Defaults:
    cell = count.init(True)  # E: effax-handler-type


# case: list returned by a helper for a static Sequence
def make_sizes() -> list[int]:
    return [8, 8]


sizes_from_call = layer_sizes.provide(make_sizes())  # E: effax-handler-type

# case: int for State[float] at module level with handlers
with total.init(0), temperature.provide(jnp.float32(2.0)):  # E: effax-handler-type
    y_total = accumulate(jnp.ones(3))

