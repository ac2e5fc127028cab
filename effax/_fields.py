"""`Fields`: where a handler keeps what crosses a traced boundary, by attribute
name (the short form of the plumbing protocol, `effax._protocol`).

A declaration, not behaviour: two readers interpret it, the methods `Handler`
derives from it (`_protocol`) and the warm path's generated code, which inlines
its attribute reads and writes (`_warmpath`); it depends on nothing (layer 1)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Fields"]


class Fields(NamedTuple):
    """Where a handler keeps what crosses a traced boundary, by attribute name.

    A handler class that sets ``fields`` gets :meth:`Handler.export`,
    :meth:`Handler.outcome` and :meth:`Handler.absorb` derived from it, and
    `effax.handle` turns each compiled call into straight-line reads and writes of
    these attributes (no protocol method calls, no `Export`/`Outcome` objects),
    which is what keeps a handled call as cheap as a plain ``jax.jit`` call. Each
    entry is an attribute name, or `None` for "nothing":

    - `static`: read as `Export.static` (hashable; part of the cache key).
    - `const`: read as `Export.const` (read-only inside).
    - `carry`: read as `Export.carry`, sent back out as `Outcome.carry`, and set from
      the outcome by `absorb`.
    - `values`: a list; sent out as `Outcome.values` (a tuple) and extended by
      `absorb` with the values that come back.
    - `advance`: an int that `absorb` advances by ``steps * outcome.static`` when
      the outcome's static part is an int and `steps` is known (then the carry is
      not taken: the count says everything). The derived `outcome` reports no
      count; a handler using `advance` overrides `outcome` to report it, as
      `KeyStream` does (how many keys were drawn).

    Attributes may be properties (a `carry` property needs a setter). A handler's
    `fields` must not change after it is created.

    **Example:** the built-in handlers' fields.

    >>> import jax.numpy as jnp, effax
    >>> effax.State[jnp.ndarray]("w").init(jnp.zeros(2)).fields
    Fields(static=None, const=None, carry='value', values=None, advance=None)
    >>> effax.Emit[int]("log").collect().fields
    Fields(static=None, const=None, carry=None, values='values', advance=None)
    >>> effax.rng.seed(0).fields
    Fields(static=None, const='base_key', carry='wire_counter', values=None, advance='offset')

    """

    static: str | None = None
    const: str | None = None
    carry: str | None = None
    values: str | None = None
    advance: str | None = None
