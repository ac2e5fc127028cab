"""The syntax tree: walking it, local bindings, and the decorators and classes
that matter to rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final, NamedTuple

from mypy.nodes import (
    ARG_NAMED,
    AssignmentExpr,
    AssignmentStmt,
    Block,
    CallExpr,
    ClassDef,
    Decorator,
    Expression,
    ForStmt,
    FuncDef,
    FuncItem,
    LambdaExpr,
    ListExpr,
    MemberExpr,
    MypyFile,
    NameExpr,
    Node,
    OperatorAssignmentStmt,
    OverloadedFuncDef,
    StarExpr,
    Statement,
    SymbolNode,
    TupleExpr,
    TypeInfo,
    WithStmt,
)

from ._names import (
    FOREIGN_PACKAGES,
    HANDLER_ACCESS,
    HANDLER_CLASSES,
    RETURNING,
    TRANSPARENT_DECORATORS,
    callee_fullname,
    effax_name,
    foreign_higher_order,
)

__all__ = [
    "CHILDREN",
    "Index",
    "Locals",
    "binding_in_module",
    "blocks_of",
    "children_of",
    "descendants",
    "calls_outer",
    "effect_operations_in",
    "forwarding_methods",
    "has_body",
    "foreign_class",
    "index_of",
    "is_uses",
    "top_level",
    "transparent",
    "unpacked",
]

# mypy's visitors are compiled traits that interpreted classes cannot subclass, so
# the walkers below reach the children of a node through its attributes. The names
# cover mypy's statements and expressions; `node` (a reference to a definition) and
# `info` are never followed.
CHILDREN: Final = (
    "expr",
    "callee",
    "args",
    "rvalue",
    "lvalues",
    "lvalue",
    "base",
    "index",
    "items",
    "left",
    "right",
    "operands",
    "cond",
    "if_expr",
    "else_expr",
    "key",
    "value",
    "left_expr",
    "sequences",
    "condlists",
    "generator",
    "begin_index",
    "end_index",
    "stride",
    "from_expr",
    "msg",
    "subject",
    "guards",
    "call",
    "types",
    "analyzed",
    "body",
    "bodies",
    "handlers",
    "else_body",
    "finally_body",
    "defs",
)


# the names of `CHILDREN` each node class has, found once per class (the walks
# below visit every node of a module: most of the plugin's time was spent here)
_FIELDS: dict[type, tuple[str, ...]] = {}


def children_of(node: Node) -> list[Node]:
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(n for n in CHILDREN if hasattr(cls, n))
    found: list[Node] = []
    for name in names:
        _collect(getattr(node, name, None), found)
    return found


def descendants(node: Node) -> Iterator[Node]:
    """Every node below `node`, depth first in source order (lambda bodies
    included; `node` references are not followed, see `CHILDREN`)."""
    stack = children_of(node)
    stack.reverse()
    while stack:
        child = stack.pop()
        yield child
        below = children_of(child)
        below.reverse()
        stack.extend(below)


def _collect(value: object, found: list[Node]) -> None:
    if isinstance(value, Expression | Statement | Block):
        found.append(value)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)


def blocks_of(statement: Statement) -> Iterator[Block]:
    """The blocks directly inside a compound statement."""
    return (node for node in children_of(statement) if isinstance(node, Block))


def top_level(statements: list[Statement]) -> Iterator[Statement]:
    """Statements at this level, inside compound statements but not definitions."""
    for statement in statements:
        yield statement
        if not isinstance(statement, FuncDef | Decorator | OverloadedFuncDef | ClassDef):
            for block in blocks_of(statement):
                yield from top_level(block.body)


class Index(NamedTuple):
    """What the plugin looks up in the statements of one level (a module, a class
    body, a function body), found in one pass (`index_of`)."""

    statements: list[Statement]  # kept: the index is that of this very list
    decorated: dict[int, Decorator]  # by id of each of its decorator expressions
    assigned: dict[int, AssignmentStmt]  # by id of its value
    bindings: dict[str, list[Expression | None]]  # by name: `name = value` (None: unpacked)


_INDEXES: dict[int, Index] = {}


def index_of(statements: list[Statement]) -> Index:
    """The index of `statements` (and the statements in their compound statements,
    not in definitions), made once per list."""
    index = _INDEXES.get(id(statements))
    if index is not None and index.statements is statements:
        return index
    index = _INDEXES[id(statements)] = Index(statements, {}, {}, {})
    for statement in top_level(statements):
        items = (
            [*statement.items, statement.impl]
            if isinstance(statement, OverloadedFuncDef)
            else [statement]
        )
        for item in items:
            if isinstance(item, Decorator):
                for decorator in item.original_decorators or item.decorators:
                    index.decorated[id(decorator)] = item
        if isinstance(statement, AssignmentStmt):
            index.assigned[id(statement.rvalue)] = statement
            for lvalue in statement.lvalues:
                for target, value in unpacked(lvalue, statement.rvalue):
                    if isinstance(target, NameExpr):
                        index.bindings.setdefault(target.name, []).append(value)
    return index


def unpacked(
    lvalue: Expression, value: Expression | None
) -> Iterator[tuple[Expression, Expression | None]]:
    """The targets an assignment binds, each with its value where it is plain to see:
    `a, b = x, y` binds `a` to `x` (None where the value is not a tuple or list of
    as many items, or a target is starred)."""
    if not isinstance(lvalue, TupleExpr | ListExpr):
        yield lvalue, value
        return
    items = value.items if isinstance(value, TupleExpr | ListExpr) else None
    split = (
        items is not None
        and len(items) == len(lvalue.items)
        and not any(isinstance(e, StarExpr) for e in (*lvalue.items, *items))
    )
    for position, target in enumerate(lvalue.items):
        yield from unpacked(target, items[position] if split and items is not None else None)


def binding_in_module(module: MypyFile, name: str) -> Expression | None:
    """The value of a module-level variable bound once, by `name = value`."""
    found = index_of(module.defs).bindings.get(name, ())
    return found[0] if len(found) == 1 else None


class Locals:
    """Collects the bindings of local variables, and the nested functions and lambdas."""

    def __init__(self, *, functions: bool) -> None:
        self.values: dict[SymbolNode, list[Expression | None]] = {}
        self.functions: set[FuncItem] = set()
        self.descend = functions  # False at module level: defs there have no inferred row

    def bind(self, lvalue: Expression, value: Expression | None) -> None:
        for target, item in unpacked(lvalue, value):
            if isinstance(target, NameExpr) and target.node is not None:
                self.values.setdefault(target.node, []).append(item)

    def visit(self, node: Node) -> None:
        if isinstance(node, AssignmentStmt):
            for lvalue in node.lvalues:
                self.bind(lvalue, node.rvalue)
        elif isinstance(node, OperatorAssignmentStmt):
            self.bind(node.lvalue, None)
        elif isinstance(node, ForStmt):
            self.bind(node.index, None)
        elif isinstance(node, WithStmt):
            for expr, target in zip(node.expr, node.target, strict=True):
                if target is not None:
                    self.bind(target, expr)
        elif isinstance(node, AssignmentExpr):
            self.bind(node.target, node.value)
        elif isinstance(node, ClassDef | OverloadedFuncDef):
            return
        if isinstance(node, Decorator):
            if self.descend:
                self.visit(node.func)
        elif isinstance(node, FuncItem):
            if self.descend or isinstance(node, LambdaExpr):
                self.functions.add(node)
                self.visit(node.body)
        else:
            for child in children_of(node):
                self.visit(child)


def is_uses(expr: Expression) -> bool:
    return isinstance(expr, CallExpr) and effax_name(callee_fullname(expr.callee)) == "uses"


def transparent(expr: Expression) -> bool:
    """Whether a decorator keeps the row of what it decorates."""
    fullname = callee_fullname(expr)
    if fullname in TRANSPARENT_DECORATORS or effax_name(fullname) in RETURNING:
        return True
    if foreign_higher_order(fullname) == "returns":  # @jax.jit, @eqx.filter_jit, ...
        return True
    if isinstance(expr, MemberExpr) and expr.name in ("setter", "deleter"):
        return True  # `@value.setter`: the setter's own row counts where it assigns
    # effax.jit(static_argnames=...) and friends
    return (
        isinstance(expr, CallExpr)
        and all(kind == ARG_NAMED for kind in expr.arg_kinds)
        and effax_name(callee_fullname(expr.callee)) in RETURNING
    )


def foreign_class(info: TypeInfo) -> bool:
    if any(effax_name(base.fullname) in HANDLER_CLASSES for base in info.mro):
        return False
    if effax_name(info.fullname) == "JitAwareContextVar":
        return True
    return info.fullname.partition(".")[0] in FOREIGN_PACKAGES


def effect_operations_in(defn: ClassDef, inherited: frozenset[str]) -> frozenset[str]:
    """The operations a user-defined effect class defines: its methods that call
    `self.handler()` (or `handler_for_write`), or another operation of `self`."""
    calls: dict[str, set[str]] = {}  # method name: the methods of `self` it calls
    for statement in defn.defs.body:
        function = statement.func if isinstance(statement, Decorator) else statement
        if not isinstance(function, FuncDef) or not function.arguments:
            continue
        this = function.arguments[0].variable.name
        calls[function.name] = {
            node.callee.name
            for node in descendants(function.body)
            if isinstance(node, CallExpr)
            and isinstance(node.callee, MemberExpr)
            and isinstance(node.callee.expr, NameExpr)
            and node.callee.expr.name == this
        }
    found: set[str] = set()
    while True:
        known = HANDLER_ACCESS | inherited | found
        new = {name for name, called in calls.items() if name not in found and called & known}
        if not new:
            return frozenset(found)
        found |= new


def forwarding_methods(defn: ClassDef) -> dict[str, bool]:
    """The methods a forwarding handler class (an `effax.Interceptor` subclass)
    defines, each with whether it forwards: whether it calls `outer`."""
    found: dict[str, bool] = {}
    for statement in defn.defs.body:
        function = statement.func if isinstance(statement, Decorator) else statement
        if isinstance(function, FuncDef):
            found[function.name] = calls_outer(function)
    return found


def calls_outer(function: FuncItem) -> bool:
    """Whether `function`'s body reads an `outer` attribute (`self.outer()`); True
    where its body is gone (mypy frees the bodies of modules it has checked)."""
    if not has_body(function):
        return True
    return any(isinstance(n, MemberExpr) and n.name == "outer" for n in descendants(function.body))


def has_body(function: FuncItem) -> bool:
    """Whether `function`'s syntax tree is there: mypy frees the bodies of modules it
    has checked, and loads definitions from its cache without them (nor arguments)."""
    try:
        return bool(function.body.body) and isinstance(function.arguments, list)
    except AttributeError:
        return False
