"""effax: algebraic effect handlers for JAX."""

import importlib.metadata

from . import random as random
from ._callpath import handle as handle, jit as jit
from ._context import JitAwareContextVar as JitAwareContextVar
from ._control import (
    cond as cond,
    fori_loop as fori_loop,
    map as map,
    scan as scan,
    switch as switch,
    while_loop as while_loop,
)
from ._effects import (
    Ask as Ask,
    BatchPolicy as BatchPolicy,
    Collector as Collector,
    Effect as Effect,
    Emit as Emit,
    Export as Export,
    Fields as Fields,
    Handler as Handler,
    Handlers as Handlers,
    KeyState as KeyState,
    KeyStream as KeyStream,
    Outcome as Outcome,
    Provider as Provider,
    RandomKey as RandomKey,
    State as State,
    StateCell as StateCell,
    handlers as handlers,
    rng as rng,
)
from ._errors import (
    EffectLeakError as EffectLeakError,
    StateTypeError as StateTypeError,
    UndeclaredEffectError as UndeclaredEffectError,
    UnhandledEffectError as UnhandledEffectError,
)
from ._plumb import plumb_and_transform as plumb_and_transform
from ._transforms import (
    checkpoint as checkpoint,
    grad as grad,
    shard_map as shard_map,
    value_and_grad as value_and_grad,
    vmap as vmap,
)
from ._uses import uses as uses

try:
    __version__ = importlib.metadata.version("effax")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
    __version__ = "0.0.0"
