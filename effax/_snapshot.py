"""`snapshot` and `restore`: handlers' states as plain arrays, to save and resume.

A training run keeps its state in handlers: parameters and optimizer state in
`State` cells, its position in each key stream. `snapshot` reads them out as a
dict keyed by effect name, holding only arrays (typed keys become their key data),
so that `np.savez` or Orbax can save it; `restore` writes such a dict back into
the handlers of a fresh run, checked first, so that the resumed run is bit for bit
the run that was interrupted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from . import _trace
from ._boundary import describe_signature, signature
from ._errors import EffectLeakError, EffectTypeError, EffectUsageError, StateTypeError
from ._handlers import Handlers
from ._protocol import Handler

__all__ = ["ChecksSnapshots", "SnapshotsPart", "assert_processes_agree", "restore", "snapshot"]


@runtime_checkable
class SnapshotsPart(Protocol):
    """A handler whose state may hold other parts than a snapshot of it (a
    `StateDict` cell: entries created since, or none yet)."""

    def snapshot_like(self, snapshot: Any) -> Any:
        """The state that `snapshot` must match (structure, shapes, dtypes) to be
        restored, and whose arrays the restored ones are placed like (for other
        handlers: the current one, ``snapshot()``)."""
        ...


@runtime_checkable
class ChecksSnapshots(Protocol):
    """A handler that refuses some snapshots of its own structure (a key stream: a
    counter no stream reaches)."""

    def check_snapshot(self, snapshot: Any) -> str | None:
        """Why `snapshot` cannot be restored into it, or None; asked before anything
        is written."""
        ...


def snapshot(*handlers: Handler[Any] | Handlers) -> dict[str, Any]:
    """The states of `handlers` (cells, key streams, or `effax.handlers` bundles)
    as a pytree of plain arrays, keyed by effect name.

    A `State` cell gives its value, a key stream ``{"base_key": <key data>,
    "counter": int64}``; handlers with nothing to resume (an `Ask`'s provider, a
    collector) are left out. Typed keys are saved as their key data
    (``jax.random.key_data``), so `np.savez` and Orbax can save the result.
    Every array is a copy in buffers of its own: a later call with
    ``donate_state=True`` deletes the state's buffers, never the snapshot's.

    **Example:**

    >>> import jax.numpy as jnp, numpy as np, effax
    >>> weights = effax.State[jnp.ndarray]("weights")
    >>> with effax.handlers(weights.init(jnp.ones(2)), effax.rng.seed(0)) as hs:
    ...     _ = effax.rng.next_key()
    ...     saved = effax.snapshot(hs)
    >>> sorted(saved), int(saved["rng"]["counter"]), saved["rng"]["base_key"].dtype
    (['rng', 'weights'], 1, dtype('uint32'))
    >>> with effax.handlers(weights.init(jnp.zeros(2)), effax.rng.seed(1)) as fresh:
    ...     effax.restore(saved, fresh)
    ...     k = effax.rng.next_key()  # the key the first run would draw next
    >>> bool((jax.random.key_data(k) == jax.random.key_data(
    ...     jax.random.fold_in(jax.random.key(0), 1))).all()), fresh[weights].tolist()
    (True, [1.0, 1.0])

    """
    return {h.effect.name: _plain(state, copy=True) for h, state in _states(handlers)}


def restore(snapshot: Mapping[str, Any], *handlers: Handler[Any] | Handlers) -> None:
    """Write `snapshot` (from `effax.snapshot`, possibly saved and loaded) back into
    `handlers`, in place.

    Every entry is checked before anything is written: a missing name raises
    `EffectUsageError`, an entry whose structure, shapes or dtypes differ from the
    handler's current state raises `StateTypeError`; either way no handler
    changes. Restored arrays are placed with the sharding of the values they
    replace; typed keys are rebuilt with the implementation of the keys they
    replace; they are copies, so a donated call afterwards leaves the snapshot
    whole. Entries for effects not among `handlers` are ignored.
    """
    if not isinstance(snapshot, Mapping):
        raise EffectTypeError(
            f"effax.restore takes the dict effax.snapshot returned, not a "
            f"{type(snapshot).__name__}."
        )
    writes = []
    for handler, state in _states(handlers):
        effect = handler.effect
        if effect.name not in snapshot:
            raise EffectUsageError(
                f"The snapshot has no entry {effect.name!r} for {effect!r} (it has "
                f"{sorted(snapshot)}). Snapshot the same handlers you restore, or pass "
                "only the handlers whose state it holds."
            )
        saved = snapshot[effect.name]
        part = issubclass(type(handler), SnapshotsPart)
        state = cast(SnapshotsPart, handler).snapshot_like(saved) if part else handler.snapshot()
        holds, fits = signature(saved, exact=True), signature(_plain(state), exact=True)
        if holds != fits:
            raise StateTypeError(
                f"The snapshot of {effect!r} does not fit its handler: it holds "
                f"{describe_signature(holds)}, the handler {describe_signature(fits)}. "
                "Restore into handlers initialised like the ones that were snapshotted (same "
                "structure, shapes and dtypes)."
            )
        if any(_trace.is_tracer(leaf) for leaf in jax.tree.leaves(saved)):
            raise EffectLeakError(
                f"The snapshot of {effect!r} holds a JAX tracer, not an array: it was taken "
                "inside a transformation (or from a value that escaped one). Take the "
                "snapshot outside jax.jit / effax.jit, between calls, and restore it there."
            )
        checks = issubclass(type(handler), ChecksSnapshots)
        why = cast(ChecksSnapshots, handler).check_snapshot(saved) if checks else None
        if why is not None:
            raise EffectUsageError(why)
        writes.append((handler, jax.tree.map(_like, saved, state)))
    for handler, state in writes:
        handler.restore(state)


def assert_processes_agree(*handlers: Handler[Any] | Handlers) -> None:
    """Check that every process holds the same state in `handlers` (after
    ``jax.distributed.initialize``; nothing to check in one process).

    A collective: every process must call it, with the same handlers. Raises
    `EffectUsageError` naming the effect whose state differs, e.g. a key stream
    seeded per process (``seed(100 + jax.process_index())``), which a compiled
    call would otherwise treat as one replicated key. States spread over devices
    of several processes (not fully addressable) hold one global value and are
    not compared.
    """
    _states(handlers)  # the arguments are checked in one process too
    if _trace.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    saved = snapshot(*handlers)
    for name in sorted(saved):  # the same order in every process
        local = jax.tree.map(_host_local, saved[name])
        try:
            multihost_utils.assert_equal(local, fail_message=name)
        except AssertionError:
            raise EffectUsageError(
                f"The handler of {name!r} holds different states in different processes "
                f"(this is process {jax.process_index()}). Every process must install the "
                "same handlers with the same values (e.g. seed every key stream with the "
                "same key, and split it per device with effax.shard_map): a compiled "
                "program treats differing values as one replicated value."
            ) from None


def _host_local(x: Any) -> Any:
    """A leaf as this process sees it (a global array of several processes: a
    placeholder, since it is one value)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(x.addressable_data(0)) if x.is_fully_replicated else np.zeros(())
    return np.asarray(x)


def _states(handlers: Iterable[Handler[Any] | Handlers]) -> list[tuple[Handler[Any], Any]]:
    """The handlers with something to save, and their `snapshot()`; names checked."""
    flat: list[Handler[Any]] = []
    for item in handlers:
        if isinstance(item, Handlers):
            flat.extend(item.handler(effect) for effect in item)
        elif isinstance(item, Handler):
            flat.append(item)
        else:
            raise EffectTypeError(
                "effax.snapshot / effax.restore take handlers or effax.handlers(...) "
                f"bundles, but got {type(item).__name__}: {item!r}."
            )
    # (an interceptor has no state of its own: the handler it forwards to has it)
    states = [(h, h.snapshot()) for h in flat if not h.forwards]
    states = [(h, s) for h, s in states if s is not None]
    for handler, state in states:
        if any(_trace.is_tracer(leaf) for leaf in jax.tree.leaves(state)):
            raise EffectLeakError(
                f"The handler of {handler.effect!r} holds a JAX tracer, not an array: it "
                "was made inside a transformation (jax.jit, effax.jit, ...) and escaped it, "
                "or this runs inside one. Snapshot and restore handlers made outside "
                "every transformation, between calls."
            )
    by_name: dict[str, Handler[Any]] = {}
    for handler, _ in states:
        other = by_name.setdefault(handler.effect.name, handler)
        if other is not handler:
            raise EffectUsageError(
                f"{other.effect!r} and {handler.effect!r} share the name "
                f"{handler.effect.name!r}, which keys a snapshot: give the effects "
                "distinct names, or snapshot them separately."
                if other.effect is not handler.effect
                else f"{handler.effect!r} is handled twice among these handlers."
            )
    return states


def _plain(tree: Any, *, copy: bool = False) -> Any:
    """`tree` with typed keys as their key data and Python numbers as arrays; with
    `copy`, every array in buffers of its own (see `_own`)."""

    def leaf(x: Any) -> Any:
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        if isinstance(x, (jax.Array, np.ndarray)):
            return _own(x) if copy else x
        return np.asarray(x)

    return jax.tree.map(leaf, tree)


def _own(x: Any) -> Any:
    """`x` in a buffer of its own. A snapshot must not share a buffer with a
    handler's state (nor a restored state with the snapshot): a compiled call with
    ``donate_state=True`` deletes the buffers it is given, and the checkpoint
    taken to resume from would go with them. One device copy per array, made
    asynchronously (as cheap as any small computation)."""
    if isinstance(x, jax.Array):
        return jax.device_put(x, x.sharding, may_alias=False)
    return np.array(x, copy=True)


def _like(saved: Any, current: Any) -> Any:
    """A saved leaf, as the kind of value it replaces."""
    if isinstance(current, jax.Array):
        if jnp.issubdtype(current.dtype, jax.dtypes.prng_key):
            saved = jax.random.wrap_key_data(saved, impl=jax.random.key_impl(current))
        return jax.device_put(saved, current.sharding, may_alias=False)
    if isinstance(current, np.ndarray | np.generic):
        return np.asarray(saved, dtype=current.dtype).reshape(np.shape(current))[()]
    return type(current)(np.asarray(saved).item())
