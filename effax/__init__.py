"""effax: algebraic effect handlers for JAX."""

from . import random as random
from ._ask import Ask as Ask, Provider as Provider
from ._context_var import JitAwareContextVar as JitAwareContextVar
from ._control import (
    cond as cond,
    fori_loop as fori_loop,
    map as map,
    scan as scan,
    switch as switch,
    while_loop as while_loop,
)
from ._effect import Effect as Effect
from ._emit import Collector as Collector, Discarder as Discarder, Emit as Emit
from ._errors import (
    EffectError as EffectError,
    EffectLeakError as EffectLeakError,
    EffectTypeError as EffectTypeError,
    EffectUsageError as EffectUsageError,
    StateTypeError as StateTypeError,
    UndeclaredEffectError as UndeclaredEffectError,
    UnhandledEffectError as UnhandledEffectError,
)
from ._grad import grad as grad, value_and_grad as value_and_grad
from ._handle import Compiled as Compiled, handle as handle, jit as jit
from ._handlers import Handlers as Handlers, handlers as handlers
from ._intercept import Interceptor as Interceptor, intercept as intercept
from ._plumb import plumb_and_transform as plumb_and_transform
from ._protocol import (
    BatchPolicy as BatchPolicy,
    Export as Export,
    Fields as Fields,
    Handler as Handler,
    Outcome as Outcome,
)
from ._random_key import (
    KeyState as KeyState,
    KeyStream as KeyStream,
    RandomKey as RandomKey,
    rng as rng,
)
from ._recorder import (
    GradientRecorder as GradientRecorder,
    Recorder as Recorder,
    TapHandler as TapHandler,
)
from ._snapshot import (
    assert_processes_agree as assert_processes_agree,
    restore as restore,
    snapshot as snapshot,
)
from ._state import State as State, StateCell as StateCell
from ._state_dict import StateDict as StateDict, StateDictCell as StateDictCell
from ._tap import Ignorer as Ignorer, Replacer as Replacer, Tap as Tap
from ._transforms import checkpoint as checkpoint, shard_map as shard_map, vmap as vmap
from ._uses import uses as uses

__all__ = [
    "Ask",
    "assert_processes_agree",
    "BatchPolicy",
    "checkpoint",
    "Collector",
    "Compiled",
    "cond",
    "Discarder",
    "Effect",
    "EffectError",
    "EffectLeakError",
    "EffectTypeError",
    "EffectUsageError",
    "Emit",
    "Export",
    "Fields",
    "fori_loop",
    "grad",
    "GradientRecorder",
    "handle",
    "Handler",
    "Handlers",
    "handlers",
    "Ignorer",
    "intercept",
    "Interceptor",
    "jit",
    "JitAwareContextVar",
    "KeyState",
    "KeyStream",
    "map",
    "Outcome",
    "plumb_and_transform",
    "Provider",
    "random",
    "RandomKey",
    "Recorder",
    "Replacer",
    "restore",
    "rng",
    "scan",
    "shard_map",
    "snapshot",
    "State",
    "StateCell",
    "StateDict",
    "StateDictCell",
    "StateTypeError",
    "switch",
    "Tap",
    "TapHandler",
    "UndeclaredEffectError",
    "UnhandledEffectError",
    "uses",
    "value_and_grad",
    "vmap",
    "while_loop",
    "__version__",
]

# The release (semantic versioning; CHANGELOG.md has a section per release). The build
# reads it from here (pyproject.toml's [tool.hatch.version]): it is the wheel's version.
__version__ = "0.3.0"
