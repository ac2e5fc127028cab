"""What the Python stack says the code is inside: the JAX or Flax NNX transformation
being traced, named to word an error message, and the effax wrapper to use instead.
Best effort (it reads frames' module and function names), and never consulted to
decide anything."""

from __future__ import annotations

import sys
from typing import Any, Final

from . import _trace

__all__ = ["innermost_staging_api", "inside_nnx_vmap"]

# Public JAX entry points whose Python frames identify the staging transform that
# is being traced, mapped to the effax wrapper to use instead. Only consulted to
# word an error message, never to decide anything.
_JIT = ("jax.jit", "effax.jit (or effax.handle(fn, transform=jax.jit))")
_NAMESAKES = ("scan", "map", "fori_loop", "while_loop", "cond", "switch", "checkpoint")
_STAGING_APIS: Final = {
    **{name: (name, f"effax.{name}") for name in _NAMESAKES},
    **dict.fromkeys(("remat", "fun_remat"), ("checkpoint", "effax.checkpoint")),
    "eval_shape": ("eval_shape", "effax.handle(fn, transform=jax.eval_shape)"),
    **dict.fromkeys(
        ("make_jaxpr", "make_jaxpr_f"),
        (
            "jax.make_jaxpr",
            "jax.make_jaxpr(effax.handle(fn, handler)), which installs the handler inside "
            "the traced function,",
        ),
    ),
    "pmap": ("pmap", "effax.shard_map"),
    **dict.fromkeys(("_python_pjit_helper", "_cpp_pjit", "cache_miss", "trace"), _JIT),
}
_STAGING_MODULES: Final = {_trace.SHARD_MAP_MODULE: ("shard_map", "effax.shard_map")}
# Flax NNX's lifted transforms, by the function of `flax.nnx` that calls JAX's
# (the innermost JAX staging API is inside it), and their effax.nnx twins.
_NNX_FUNCTIONS: Final = {
    **{name: name for name in ("fori_loop", "while_loop", "cond", "switch")},
    **dict.fromkeys(("scan_wrapper", "simple_scan_wrapper"), "scan"),
    **dict.fromkeys(("remat_wrapper", "simple_remat_wrapper"), "remat"),
    **dict.fromkeys(("jit_wrapper", "simple_jit_wrapper", "__call__"), "jit"),
}
_NNX_JIT = ("Flax NNX's nnx.jit", "effax.handle(fn, transform=nnx.jit)")


def _nnx_transform(frame: Any, api: tuple[str, str]) -> tuple[str, str] | None:
    """The NNX transform of the `flax.nnx` frames from `frame` outwards, around JAX's
    `api`, if known (NNX's remat wraps `jax.checkpoint` in general-purpose helpers)."""
    if api[0] == "checkpoint" and frame.f_globals.get("__name__", "").startswith("flax.nnx"):
        return ("Flax NNX's nnx.remat", "effax.nnx.remat (same arguments)")
    while frame is not None and frame.f_globals.get("__name__", "").startswith("flax.nnx"):
        name = _NNX_FUNCTIONS.get(frame.f_code.co_name)
        if name == "jit":
            return _NNX_JIT
        if name is not None:
            return (f"Flax NNX's nnx.{name}", f"effax.nnx.{name} (same arguments)")
        frame = frame.f_back
    return None


def innermost_staging_api() -> tuple[str, str] | None:
    """Best effort: ``(jax api, effax wrapper)`` of the staging transform being traced.

    Walks the Python stack outwards to the innermost frame that belongs to a known
    staging API, then on through further frames of the same JAX module (so
    ``lax.map`` is reported rather than the ``lax.scan`` it calls, but a
    ``shard_map`` inside ``jax.jit`` is reported as ``shard_map``). Returns `None`
    if nothing is recognised.
    """
    frame: Any = sys._getframe(1)
    found: tuple[str, str] | None = None
    found_module = ""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("jax."):
            api = _STAGING_MODULES.get(module) or _STAGING_APIS.get(frame.f_code.co_name)
            if api is not None and (found is None or module == found_module):
                found, found_module = api, module
        elif found is not None:
            return _nnx_transform(frame, found) or found  # (Flax NNX's lifted transform?)
        frame = frame.f_back
    return found


def inside_nnx_vmap() -> bool:
    """Best effort, for messages: whether the innermost `vmap` being traced is Flax
    NNX's `nnx.vmap` (a frame of `flax.nnx` just outside JAX's `vmap`)."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if _trace.is_vmap_frame(frame):
            while frame is not None and frame.f_globals.get("__name__", "").startswith("jax."):
                frame = frame.f_back
            return frame is not None and frame.f_globals.get("__name__", "").startswith("flax.nnx")
        frame = frame.f_back
    return False
