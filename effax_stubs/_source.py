"""Functions whose body mypy no longer holds, read again from their source file.

mypy frees the function bodies of a module once it has checked it, and loads a
module from its incremental cache without them; an interceptor's function defined
in another module (`fx.intercept(e, op=count_draw)`, an `fx.Interceptor` subclass's
method) is then only a signature. Handler code needs two facts about it, read here
from the file with Python's `ast`, names resolved through the module's symbol table
(which mypy keeps): whether it reads its first parameter (`outer`), and which effects
its body performs (operations of declared effects, calls of functions with a row).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping

from mypy.nodes import Decorator, FuncDef, MypyFile, SymbolNode, Var
from mypy.types import Instance, get_proper_type

from ._marks import declaration_of_type, row_of_type
from ._names import OPERATIONS, Row, effect_operations

__all__ = ["body_performs", "definition", "reads_first"]

_TREES: dict[str, tuple[float, ast.Module | None]] = {}


def definition(
    modules: Mapping[str, MypyFile], node: FuncDef
) -> tuple[ast.FunctionDef, MypyFile] | None:
    """`node`'s definition in its source file, with its module: a function at module
    level or a method of a class at module level."""
    info = node.info if node.info else None
    module_name = info.module_name if info is not None else node.fullname.rpartition(".")[0]
    module = modules.get(module_name)
    if module is None or not module.path or not module.path.endswith(".py"):
        return None
    tree = _parse(module.path)
    if tree is None:
        return None
    body = tree.body
    if info is not None:
        classes = [c for c in body if isinstance(c, ast.ClassDef) and c.name == info.name]
        body = classes[0].body if len(classes) == 1 else []
    found = [f for f in body if isinstance(f, ast.FunctionDef) and f.name == node.name]
    return (found[0], module) if len(found) == 1 else None


def reads_first(function: ast.FunctionDef) -> bool:
    """Whether `function` reads its first parameter (an interceptor's `outer`, or the
    `self` whose `outer()` a subclass's method calls)."""
    arguments = [*function.args.posonlyargs, *function.args.args]
    if not arguments:
        return True
    first = arguments[0].arg  # (closures in the body read it too)
    nodes = (n for statement in function.body for n in ast.walk(statement))
    return any(isinstance(n, ast.Name) and n.id == first for n in nodes)


def body_performs(function: ast.FunctionDef, module: MypyFile) -> Row | None:
    """The effects `function`'s body performs (in any branch, as rows count them), or
    None where it may install handlers of its own (a `with` or a `try`: not followed
    here). Names are the module's, but for the function's own locals."""
    found: set[str] = set()
    nodes = _body_nodes(function)
    arguments = function.args
    local = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    local |= {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in nodes:
        if isinstance(node, ast.With | ast.AsyncWith | ast.Try | ast.TryStar):
            return None
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Name | ast.Attribute) and _root(callee) in local:
            continue
        if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name):
            target = _resolve(module, callee.value.id)
            if isinstance(target, Var):  # `steps.modify(...)`: an operation of an effect
                declaration = declaration_of_type(target.type)
                proper = get_proper_type(target.type) if target.type is not None else None
                if isinstance(proper, Instance):
                    operations = effect_operations(proper.type)
                elif declaration is not None:
                    operations = OPERATIONS.get(declaration.kind or "", frozenset())
                else:
                    operations = frozenset()
                if declaration is not None and callee.attr in operations:
                    found.add(declaration.fullname)
                    continue
            if isinstance(target, MypyFile):  # `layers.scaled(x)`: a module's function
                symbol = target.names.get(callee.attr)
                found |= _row_of_node(symbol.node if symbol is not None else None)
        elif isinstance(callee, ast.Name):
            found |= _row_of_node(_resolve(module, callee.id))
    return frozenset(found)


def _root(expr: ast.expr) -> str | None:
    """The name an attribute chain starts from (`steps` for `steps.modify`)."""
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _row_of_node(node: SymbolNode | None) -> Row:
    if isinstance(node, Decorator):
        return row_of_type(node.var.type) or frozenset()
    if isinstance(node, Var):
        return row_of_type(node.type) or frozenset()
    return frozenset()


def _resolve(module: MypyFile, name: str) -> SymbolNode | None:
    symbol = module.names.get(name)
    return symbol.node if symbol is not None else None


def _body_nodes(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `function`'s body, not of the functions and classes nested in it."""
    found: list[ast.AST] = []
    stack: list[ast.AST] = list(reversed(function.body))
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return found


def _parse(path: str) -> ast.Module | None:
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    cached = _TREES.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    try:
        with open(path, encoding="utf-8") as f:
            tree: ast.Module | None = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        tree = None
    _TREES[path] = (mtime, tree)
    return tree
