"""Rule 3: handlers given values their effects cannot carry, where types agree."""

import jax
import jax.numpy as jnp

import effax as fx
from mylib import config, temperature

static_list = fx.Ask[list[int]]("static_list", static=True)
static_mode = fx.Ask[str]("static_mode", static=True)
traced_mode = fx.Ask[str]("traced_mode")
weights = fx.Ask[jax.Array]("weights", static=True)
total = fx.State[float]("total")
count = fx.State[int]("count")
name = fx.State[str]("name")
params = fx.State[jax.Array]("params")

# case: a static Ask's value must be hashable
static_list.provide([1, 2])  # E: effax-handler-type: Ask "static_list" is static, so its value is hashed into the jit cache key, but "provide" is given an unhashable "list"
weights.provide(jnp.ones(3))  # E: effax-handler-type: unhashable "Array"

# case: hashable values for static Asks
static_mode.provide("fast")
config.provide((1, "a"))

# case: a traced Ask cannot carry text into a compiled call
with traced_mode.provide("fast"):
    fx.jit(lambda: len(traced_mode.ask()))()  # E: effax-handler-type: Ask "traced_mode" is traced, so its value crosses jax.jit as an array, but "provide" is given a "str"; declare it with static=True
fx.handle(lambda: traced_mode.ask(), traced_mode.provide("x"), transform=jax.jit)()  # E: effax-handler-type

# case: a State cannot carry text into a compiled call
with name.init("x"):
    fx.jit(lambda: len(name.get()))()  # E: effax-handler-type: State "name" is traced
fx.handle(lambda: name.get(), name.init("y"), transform=jax.jit)()  # E: effax-handler-type


# case: a State[str] used eagerly only (round 4: the Ask[str] rule)
name.init("x")
with name.init("x"):
    name.set(name.get() + "y")
fx.handle(lambda: name.get(), name.init("y"))()


# case: a State of another type given text is refused wherever it is
anything = fx.State[object]("anything")
anything.init("x")  # E: effax-handler-type: State "anything" is traced

# case: a State initialised with a narrower Python scalar
total.init(0)  # E: effax-handler-type: State "total" holds "float" values but is initialised with "int"
count.init(True)  # E: effax-handler-type: initialised with "bool"

# case: values of the declared type
total.init(0.0)
count.init(0)
params.init(jnp.zeros(3))
temperature.provide(1)  # an int for an Ask[float] is fine: an Ask is read-only

# case: where types already catch it, only mypy's own error
temperature.provide("hot")  # pyright: ignore[reportArgumentType]  # E: arg-type
total.init("zero")  # pyright: ignore[reportArgumentType]  # E: arg-type

# case: dataclasses and attrs classes for static Asks: frozen ones only
import dataclasses

import attrs


@dataclasses.dataclass
class Mutable:
    width: int


@dataclasses.dataclass(frozen=True)
class Frozen:
    width: int


@dataclasses.dataclass(unsafe_hash=True)
class UnsafeHash:
    width: int


@attrs.define
class AttrsMutable:
    width: int


@attrs.frozen
class AttrsFrozen:
    width: int


mutable_config = fx.Ask[Mutable]("mutable_config", static=True)
frozen_config = fx.Ask[Frozen]("frozen_config", static=True)
unsafe_config = fx.Ask[UnsafeHash]("unsafe_config", static=True)
attrs_config = fx.Ask[AttrsMutable]("attrs_config", static=True)
attrs_frozen_config = fx.Ask[AttrsFrozen]("attrs_frozen_config", static=True)
mutable_config.provide(Mutable(1))  # E: effax-handler-type: unhashable "Mutable"
attrs_config.provide(AttrsMutable(1))  # E: effax-handler-type: unhashable "AttrsMutable"
frozen_config.provide(Frozen(1))
unsafe_config.provide(UnsafeHash(1))
attrs_frozen_config.provide(AttrsFrozen(1))

# case: a State of a tuple initialised with narrower Python scalars
pair = fx.State[tuple[float, float]]("pair")
pair.init((0, 1))  # E: effax-handler-type: initialised with "tuple[int, int]"
pair.init((0.0, 1.0))


# case: an unhashable static value of the wrong type: both errors (round 4), one ignorable alone
nested = fx.Ask[tuple[tuple[int, ...], ...]]("nested", static=True)
nested.provide(((1, 2), [3]))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]  # E: effax-handler-type: unhashable "tuple[tuple[int, int], list]"
nested.provide(((1, 2), (3,)))
