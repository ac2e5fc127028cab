"""effax_stubs: static checking of effax effect rows.

This package holds the mypy plugin ``effax_stubs.mypy_plugin``, which checks which
effects a function performs and whether a program handles them all (see
``docs/typing.md``). It is a plugin package, not a PEP 561 stubs folder: effax
ships its own inline types.
"""
