"""The plugin's look-ups: what a name mypy asks about refers to (a function with a
row, a class of the user's), and the guard around every analysis."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from mypy.nodes import LambdaExpr, MypyFile, OverloadedFuncDef, SymbolNode, TypeInfo, Var
from mypy.options import Options
from mypy.plugin import Plugin

from ._handling import is_interceptor_class
from ._marks import row_of_type
from ._names import is_effect_class, kind_of
from ._report import DEBUG_VARIABLE
from ._rows import Analysis, decorated_with_row

__all__ = ["NOT_USER_CODE", "Lookups", "sources_digest"]

# where no function with a row or user-defined effect can be: not looked up
NOT_USER_CODE: Final = ("builtins.", "typing.", "effax.", "jax.", "numpy.")


def sources_digest(folder: Path = Path(__file__).parent) -> str:
    """A digest of the `*.py` files in `folder` (the plugin's package), names and
    contents, in order."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


class Lookups(Plugin):
    """What names refer to, for `EffaxPlugin`'s hooks."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._debug = os.environ.get(DEBUG_VARIABLE) == "1"

    def _lookup(self, fullname: str) -> SymbolNode | None:
        if "." not in fullname:
            return None
        symbol = self.lookup_fully_qualified(fullname)
        return symbol.node if symbol is not None else None

    def _user_class(self, fullname: str) -> TypeInfo | None:
        """The class of the user's code that `fullname` names, if it is one."""
        if fullname.startswith(NOT_USER_CODE):
            return None
        try:
            node = self._lookup(fullname)
            return node if isinstance(node, TypeInfo) else None
        except Exception:
            if self._debug:
                raise
        return None

    def _user_effect(self, fullname: str) -> TypeInfo | None:
        """The class `fullname` names, where it is a user-defined effect class."""
        info = self._user_class(fullname)
        return info if info and is_effect_class(info) and kind_of(info) is None else None

    def _user_interceptor(self, fullname: str) -> bool:
        """Whether `fullname` names a subclass of `effax.Interceptor` of the user's."""
        info = self._user_class(fullname)
        return info is not None and is_interceptor_class(info)

    def _has_row(self, fullname: str) -> bool:
        """Whether `fullname` names a function with an effect row (a call of one is
        checked here at module level; inside functions, from their `effax.uses`)."""
        if fullname.startswith(NOT_USER_CODE):
            return False
        try:
            node = self._lookup(fullname)
            if isinstance(node, TypeInfo):  # a class whose `__init__` (or `__call__`:
                # `Scale(3)(x)`, checked from the constructor's hook) has a row
                return any(self._has_row(f"{node.fullname}.{m}") for m in ("__init__", "__call__"))
            if isinstance(node, OverloadedFuncDef):  # an overload, or a property's setter
                items = [node.impl] if node.impl is not None else node.items
                return any(decorated_with_row(item) for item in items)
            if isinstance(node, Var):  # a function with a row, or a lambda of the module
                return row_of_type(node.type) is not None or isinstance(
                    self._names().module_binding(node), LambdaExpr
                )
            return decorated_with_row(node)
        except Exception:
            if self._debug:
                raise
        return False

    def _names(self) -> Analysis:
        """An analysis of no body, made once per map of modules mypy gives the plugin:
        what names refer to, from any scope."""
        modules = self._module_map()
        cached: Analysis | None = getattr(self, "_no_body", None)
        if cached is None or cached.modules is not modules:
            self._no_body = cached = Analysis(modules, None, [])
        return cached

    def _module_map(self) -> Mapping[str, MypyFile]:
        modules: Mapping[str, MypyFile] | None = getattr(self, "_modules", None)
        return modules or {}

    def _guarded(self, check: Callable[[], None]) -> None:
        """Run one analysis; a failure of the plugin must not fail the user's mypy run."""
        try:
            check()
        except Exception:
            if self._debug:
                raise
