"""effax: algebraic effect handlers for JAX."""

import importlib.metadata

from . import random as random
from ._context import JitAwareContextVar as JitAwareContextVar
from ._control import (
    cond as cond,
)
from ._control import (
    fori_loop as fori_loop,
)
from ._control import (
    map as map,
)
from ._control import (
    scan as scan,
)
from ._control import (
    switch as switch,
)
from ._control import (
    while_loop as while_loop,
)
from ._effects import (
    Ask as Ask,
)
from ._effects import (
    BatchPolicy as BatchPolicy,
)
from ._effects import (
    Collector as Collector,
)
from ._effects import (
    Effect as Effect,
)
from ._effects import (
    Emit as Emit,
)
from ._effects import (
    Export as Export,
)
from ._effects import (
    Handler as Handler,
)
from ._effects import (
    Handlers as Handlers,
)
from ._effects import (
    KeyState as KeyState,
)
from ._effects import (
    KeyStream as KeyStream,
)
from ._effects import (
    Outcome as Outcome,
)
from ._effects import (
    Provider as Provider,
)
from ._effects import (
    RandomKey as RandomKey,
)
from ._effects import (
    State as State,
)
from ._effects import (
    StateCell as StateCell,
)
from ._effects import (
    handlers as handlers,
)
from ._effects import (
    rng as rng,
)
from ._errors import (
    EffectLeakError as EffectLeakError,
)
from ._errors import (
    StateTypeError as StateTypeError,
)
from ._errors import (
    UndeclaredEffectError as UndeclaredEffectError,
)
from ._errors import (
    UnhandledEffectError as UnhandledEffectError,
)
from ._handle import (
    handle as handle,
)
from ._handle import (
    jit as jit,
)
from ._handle import (
    plumb_and_transform as plumb_and_transform,
)
from ._uses import uses as uses
from ._transforms import (
    checkpoint as checkpoint,
)
from ._transforms import (
    grad as grad,
)
from ._transforms import (
    shard_map as shard_map,
)
from ._transforms import (
    value_and_grad as value_and_grad,
)
from ._transforms import (
    vmap as vmap,
)

try:
    __version__ = importlib.metadata.version("effax")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
    __version__ = "0.0.0"
