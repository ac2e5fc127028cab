"""`RandomKey`: a named stream of PRNG keys, `KeyStream`, its handler, and `rng`,
the default stream."""

from __future__ import annotations

from typing import Any, NamedTuple

import attrs
import jax
import jax.numpy as jnp
import numpy as np

from . import _threefry, _trace
from ._arguments import check_unleaked
from ._context import run_where
from ._effect import Effect
from ._errors import EffectTypeError, EffectUsageError
from ._protocol import BatchPolicy, Export, Fields, Handler, Outcome, PyTree

__all__ = ["KeyState", "KeyStream", "RandomKey", "check_sampler", "checked_key", "rng"]


def _as_key(seed: Any, effect: RandomKey) -> jax.Array:
    if isinstance(seed, (bool, float, complex, str, bytes)):
        raise EffectTypeError(
            f"{effect!r}.seed(...) takes an int (or integer scalar array), a typed key "
            f"(jax.random.key) or a raw uint32[2] key (jax.random.PRNGKey), not a "
            f"{type(seed).__name__}."
        )
    if isinstance(seed, (int, np.integer)):
        if not -(2**63) <= int(seed) < 2**63:
            raise EffectTypeError(
                f"{effect!r}.seed({int(seed)}) takes an int seed that fits int64 (from "
                "-2**63 to 2**63 - 1), as jax.random.key does. Reduce it (e.g. "
                "`seed % 2**63`), or seed with a key (jax.random.key)."
            )
        return jax.random.key(int(seed))
    dtype = getattr(seed, "dtype", None)
    shape = getattr(seed, "shape", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise EffectTypeError(
                f"{effect!r}.seed(...) takes a single key, but got a key array of shape "
                f"{shape}. Seed one stream per key, or use effax.vmap to map over keys."
            )
        return seed  # type: ignore[no-any-return]
    if dtype == jnp.uint32 and shape == (2,):
        return seed  # type: ignore[no-any-return]
    if shape == () and dtype is not None and jnp.issubdtype(dtype, jnp.integer):
        return jax.random.key(seed)  # an integer scalar, as jax.random.key takes it
    raise EffectTypeError(
        f"{effect!r}.seed(...) takes an int (or integer scalar array), a typed key "
        "(jax.random.key) or a raw "
        f"uint32[2] key (jax.random.PRNGKey), but got {type(seed).__name__} with "
        f"dtype={dtype} and shape={shape}."
    )


_INT32_END = 2**31
_UINT32_END = 2**32


def _checked(effect: RandomKey, counter: int) -> int:
    """`counter` if `fold_in` can take it (a uint32), else a named error."""
    if counter >= _UINT32_END:
        raise EffectUsageError(
            f"{effect!r} has drawn 2**32 keys from its base key, and fold_in folds in a "
            "32-bit counter, so the next key would repeat an earlier one. Reseed the "
            f"stream with a fresh key (e.g. `{effect.handler_example()}`"
            f"{effect.where_variable()} with a key drawn from it)."
        )
    return counter


class RandomKey(Effect["KeyStream"]):
    """A named stream of PRNG keys; `effax.rng` is the default one.

    A stream is a base key and a counter: each `next_key()` is
    ``jax.random.fold_in(base_key, counter)`` followed by ``counter += 1``. The counter
    is a Python int while it is known at trace time, so compiled and eager draws are
    bit-identical and advancing it costs no device work.

    **Example:**

    >>> import jax, effax
    >>> dropout = effax.RandomKey("dropout")
    >>> with dropout.seed(0):
    ...     k0, k1 = dropout.next_key(), dropout.next_key()
    >>> bool((jax.random.key_data(k0) == jax.random.key_data(
    ...     jax.random.fold_in(jax.random.key(0), 0))).all())
    True

    """

    __slots__ = ()

    handler_hint = "{name}.seed(key)"
    operations = ("next_key",)

    @_trace.api_boundary
    def next_key(self) -> jax.Array:
        """A fresh key: ``fold_in(base_key, counter)``, then the counter advances."""
        handler = self.handler()
        if handler._effax_own:
            return handler.next_key()
        return run_where(self, handler, handler.next_key)

    def seed(self, key: int | jax.Array) -> KeyStream:
        """A key-stream handler starting at `key` (an int, a typed key or a raw key)."""
        check_unleaked(key, "the key", f"{self!r}.seed(...)")
        return KeyStream(self, _as_key(key, self))


class KeyState(NamedTuple):
    """The state of a key stream: what ``hs[stream]`` returns.

    - `base_key`: the key the stream was seeded with.
    - `counter`: how many keys were drawn from `base_key` (an int, or a traced int32
      once it is not known at trace time); the next key is
      ``fold_in(base_key, counter)``.

    **Example:**

    >>> import jax, effax
    >>> with effax.handlers(effax.rng.seed(0)) as hs:
    ...     k0, k1 = effax.rng.next_key(), effax.rng.next_key()
    >>> hs[effax.rng].counter
    2
    >>> jax.dtypes.issubdtype(hs[effax.rng].base_key.dtype, jax.dtypes.prng_key)
    True

    """

    base_key: jax.Array
    counter: int | jax.Array


@attrs.define(eq=False)
class KeyStream(Handler[RandomKey]):
    """The handler of a :class:`RandomKey`.

    The counter is `dynamic + offset`: `dynamic` is `None` while the counter is known
    in Python (then it is the int `offset`), and an int32 array once it is not (after
    an `effax.cond` whose branches draw different numbers of keys, or a
    `while_loop`). `drawn` counts the draws since this handler was made, or is `None`
    once that number is no longer known at trace time. A region that drew a known
    number of keys advances `offset` by it (the `advance` of its `fields`); one that
    did not sends the traced counter back, which is set as `counter`.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> with effax.rng.seed(0) as stream:
    ...     _ = effax.rng.next_key()
    ...     _ = effax.jit(effax.rng.next_key)()
    >>> stream.counter, stream.drawn
    (2, 2)
    >>> with effax.rng.seed(0) as stream:  # branches drawing 1 or 0 keys
    ...     _ = effax.cond(
    ...         jnp.bool_(True), lambda: effax.random.normal(), lambda: jnp.float32(0)
    ...     )
    >>> int(stream.counter), stream.drawn
    (1, None)

    """

    effect: RandomKey
    base_key: jax.Array
    offset: int = 0
    dynamic: jax.Array | None = None
    # `offset` when the number of draws was last known; `None` once it is not.
    _start: int | None = attrs.field(default=0, alias="start", repr=False)
    # Whether this is one batch element's stream, split from a stream outside.
    _split: bool = attrs.field(default=False, alias="split", repr=False)
    batch_distinct = True
    # The counter crosses compiled boundaries as int32 (`wire_counter`).
    fields = Fields(const="base_key", carry="wire_counter", advance="offset")

    @property
    def counter(self) -> int | jax.Array:
        if self.dynamic is None:
            return self.offset
        return self.dynamic if self.offset == 0 else self.dynamic + self.offset

    @counter.setter
    def counter(self, counter: int | jax.Array) -> None:
        if isinstance(counter, int):  # set from Python: draws are still counted
            if self.dynamic is None and self._start is not None:
                self._start += counter - self.offset
            else:
                self._start = None
            self.dynamic, self.offset = None, counter
        else:  # came back traced: from here on, draws are not counted
            self.dynamic, self.offset, self._start = counter, 0, None

    @property
    def wire_counter(self) -> int | jax.Array:
        """The counter as it crosses a compiled boundary: an int32 with the bits of
        the uint32 that `fold_in` folds in (counters in [2**31, 2**32) wrap). A
        Python int when known, the cheapest input of ``jax.jit`` (its C++ dispatch
        takes it on its fast path); transformations that would hold a Python
        number static (``eqx.filter_jit``) get it as a NumPy int32 instead
        (`_plumb.box`)."""
        if self.dynamic is not None:
            return self.counter
        offset = self.offset
        return offset if offset < _INT32_END else _checked(self.effect, offset) - _UINT32_END

    @wire_counter.setter
    def wire_counter(self, counter: int | jax.Array) -> None:
        self.counter = counter

    @property
    def drawn(self) -> int | None:
        return None if self._start is None else self.offset - self._start

    @property
    def value(self) -> KeyState:
        return KeyState(self.base_key, self.counter)

    def next_key(self) -> jax.Array:
        offset = self.offset
        if self.dynamic is None:
            if offset >= _INT32_END:
                offset = _checked(self.effect, offset)
            key = _threefry.fold_in(self.base_key, offset)
        else:  # `dynamic + offset`, added inside the fold_in (one equation a draw)
            key = _threefry.fold_in(self.base_key, self.dynamic, offset)
        self.offset = offset + 1
        return key

    @classmethod
    def rebuild(cls, effect: Any, static: Any, const: PyTree, carry: PyTree) -> KeyStream:
        split = static is not None
        if split:  # split across the named axes of a batched region
            const = _threefry.fold_in(const, jax.lax.axis_index(static))
        if isinstance(carry, (int, np.integer)):  # `wire_counter`, not traced on its way in
            carry = int(np.int32(carry).astype(np.uint32))
        if isinstance(carry, int):
            return cls(effect, const, offset=carry, start=carry, split=split)
        return cls(effect, const, dynamic=carry, split=split)

    def outcome(self, *, carry_required: bool) -> Outcome:
        if self._split and not carry_required:
            # an element's own stream in a batched region: its counter stays inside
            # (the stream outside advances by the one key it split, see batch_absorb)
            return Outcome(static=self.drawn)
        if self.drawn is not None and not carry_required:
            return Outcome(static=self.drawn)
        counter = self.wire_counter
        if isinstance(counter, int):
            counter = jnp.asarray(counter, jnp.int32)
        if not carry_required:
            # leaving a call: weakly typed, as a counter that went in as a Python int
            # (a loop's carry is strongly typed), so that the next call passing it
            # back in, eagerly or compiled, reuses the program
            counter = _trace.weakly_typed(counter)
        return Outcome(static=self.drawn, carry=counter)

    def snapshot(self) -> dict[str, Any]:
        """The stream's position: its base key and how many keys it drew."""
        counter = self.counter
        if not isinstance(counter, int):  # traced back: an int32 with the uint32's bits
            counter = int(np.asarray(counter).astype(np.uint32))
        return {"base_key": self.base_key, "counter": np.int64(counter)}

    def check_snapshot(self, snapshot: dict[str, Any]) -> str | None:
        counter = np.asarray(snapshot["counter"])
        if counter.shape or not 0 <= int(counter) < _UINT32_END:
            return (
                f"The snapshot of {self.effect!r} holds the key counter {counter!r}, which "
                "no stream reaches: a counter is how many keys were drawn, from 0 to "
                "2**32 - 1 (a negative one would repeat keys, a larger one overflow the "
                "uint32 that fold_in folds in). Restore a snapshot effax.snapshot made."
            )
        return None

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.base_key = snapshot["base_key"]
        self.counter = int(snapshot["counter"])

    def batch_export(self, policy: BatchPolicy) -> tuple[Export, int | None]:
        if policy.keys == "shared":
            return self.export(), None
        # One key of this stream seeds every element: element b folds in its index.
        key = _threefry.fold_in(self.base_key, self.counter)
        return Export(static=policy.axis_names, const=key, carry=0), None

    def batch_absorb(self, outcome: Outcome, policy: BatchPolicy) -> None:
        if policy.keys == "shared":
            self.absorb(outcome, steps=1)
        else:
            self.absorb(Outcome(static=1), steps=1)


def checked_key(stream: Any, where: str, shape: Any = ()) -> jax.Array:
    """``stream.next_key()`` for the sampler `where` (e.g. ``"effax.random.normal"``),
    once `check_sampler` accepted `stream` and `shape` (a refused call draws none)."""
    check_sampler(stream, where, shape)
    return stream.next_key()  # type: ignore[no-any-return]


def check_sampler(stream: Any, where: str, shape: Any = ()) -> None:
    """The checks of the sampler `where` (e.g. ``"effax.random.normal"``) that come
    before its others: `stream` must be a `RandomKey` and `shape` a sequence of
    non-negative ints (or None where the sampler allows it)."""
    if not isinstance(stream, RandomKey):
        raise EffectTypeError(
            f"{where}(stream=...) takes a RandomKey effect (e.g. `effax.rng`, or "
            f"`noise = effax.RandomKey('noise')` seeded with `noise.seed(0)`), but got "
            f"{type(stream).__name__}: {stream!r}. Leave `stream` out to draw from effax.rng."
        )
    if shape is not None:
        dims = (shape,) if isinstance(shape, int) else shape
        try:
            bad = [d for d in dims if not isinstance(d, (int, np.integer)) or d < 0]
        except TypeError:
            bad = [shape]
        if bad:
            raise EffectUsageError(
                f"{where} got shape={shape!r}: a shape is a tuple of non-negative ints "
                f"(e.g. `(3,)`); {bad[0]!r} is not one. Nothing was drawn from {stream!r}."
            )


rng = RandomKey("rng")
"""The default key stream, ``RandomKey("rng")``: the `RandomKey` effax declares for
`effax.random`, which draws from it when no `stream=` is given. Seed it like any
stream, ``with effax.rng.seed(0): ...``."""
