"""A small package for cross-module cases: `lib` declares, the other modules use.

mypy checks `lib` first and frees its syntax tree before it checks the users, so
everything here reaches them through types and symbol-table metadata only (as it
does from mypy's incremental cache).
"""
