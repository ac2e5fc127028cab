"""The mypy plugin's tables of effax's API (`effax_stubs._names`) against the runtime
API they describe, read with `inspect`: a new operation, handler maker or wrapper
that the tables miss (or an entry the API lost) fails here, not silently in users'
type checks."""

import inspect
import typing

import pytest

import effax
from effax_stubs import _names

# public members every effect inherits from `Effect`: neither operations nor makers
_EFFECT_MEMBERS = {n for n in dir(effax.Effect) if not n.startswith("_")}
# declaration attributes that are neither (Ask's `static` flag and `default`)
_ATTRIBUTES = {"static", "default"}


def _own_methods(kind):
    cls = getattr(effax, kind)
    names = {n for n in dir(cls) if not n.startswith("_")} - _EFFECT_MEMBERS - _ATTRIBUTES
    assert all(callable(getattr(cls, n)) for n in names), names
    return names


def _handler_makers(kind):
    """The methods of `kind` that return a handler (annotated to return a subclass of
    `effax.Handler`, as the plugin reads a user-defined effect's makers)."""
    cls = getattr(effax, kind)
    makers = set()
    for name in _own_methods(kind):
        returned = inspect.signature(getattr(cls, name), eval_str=True).return_annotation
        returned = typing.get_origin(returned) or returned  # `Recorder[T]`: `Recorder`
        if isinstance(returned, type) and issubclass(returned, effax.Handler):
            makers.add(name)
    return makers


@pytest.mark.parametrize("kind", _names.KINDS)
def test_every_effect_kind_is_an_effax_effect(kind):
    assert issubclass(getattr(effax, kind), effax.Effect)


@pytest.mark.parametrize("kind", _names.KINDS)
def test_operations_and_handler_makers_are_each_kinds_methods(kind):
    makers = _handler_makers(kind)
    assert makers, kind
    assert makers == _names.MAKERS[kind], kind
    assert _own_methods(kind) - makers == _names.OPERATIONS[kind]


def test_every_handler_maker_belongs_to_some_kind():
    assert set(_names.MAKERS) == set(_names.OPERATIONS) == set(_names.KINDS)
    makers = set().union(*(_handler_makers(k) for k in _names.KINDS))
    assert makers == _names.HANDLER_MAKERS


def test_every_effect_kind_effax_exports_is_in_the_tables():
    # a new kind (as `Tap` was) that the tables miss would be read as a user-defined
    # effect, whose operations mypy cannot see in an installed package
    kinds = {
        name
        for name in effax.__all__
        if isinstance(getattr(effax, name), type)
        and issubclass(getattr(effax, name), effax.Effect)
        and getattr(effax, name) is not effax.Effect
    }
    assert kinds == set(_names.KINDS)


@pytest.mark.parametrize("name", sorted(_names.PERFORMING))
def test_performing_wrappers_positions_and_keywords_match_their_signatures(name):
    positions, keywords = _names.PERFORMING[name]
    parameters = list(inspect.signature(getattr(effax, name)).parameters)
    assert tuple(parameters[i] for i in positions) == keywords


@pytest.mark.parametrize("name", sorted(_names.RETURNING))
def test_returning_wrappers_take_the_function_first(name):
    first = next(iter(inspect.signature(getattr(effax, name)).parameters))
    assert first in _names.FUNCTION_NAMES


def test_the_tables_cover_every_wrapper_of_a_function():
    # every public effax function whose first parameter is a function name either
    # runs it during the call (PERFORMING) or returns a wrapper (RETURNING), or is
    # one of the few that do neither with a row (`handle` is read on its own)
    covered = set(_names.PERFORMING) | set(_names.RETURNING) | {"handle"}
    takers = set()
    for name in dir(effax):
        value = getattr(effax, name)
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        parameters = list(inspect.signature(value).parameters)
        if parameters and parameters[0] in _names.FUNCTION_NAMES:
            takers.add(name)
    assert takers - covered == set()


def test_every_sampler_of_effax_random_is_one_to_the_plugin():
    # the plugin names a sampler by the module effax defines it in (found by the
    # blind9 corpus: `fx.random.bernoulli(..., stream=s)` was not read, it lives in
    # effax._discrete)
    for name in effax.random.__all__:
        sampler = getattr(effax.random, name)
        assert _names.is_sampler(f"{sampler.__module__}.{sampler.__qualname__}"), name
    assert not _names.is_sampler("effax._discrete.draw")  # (not a sampler of the API)
    assert not _names.is_sampler("effax.randomness.normal")


def test_the_ask_keywords_the_plugin_reads_are_asks():
    # `_marks.declaration_in` reads `static=` and `default=` (an Ask with a default is
    # never unhandled) from a declaration's keywords, and `NO_DEFAULT` as no default
    parameters = inspect.signature(effax.Ask).parameters
    for name in ("static", "default"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert repr(parameters["default"].default) == "NO_DEFAULT"
    assert effax.Ask[float]("t", default=0.5).default == 0.5
