"""Make JAX strict for the whole suite."""

import atexit
import gc
import os
import shutil
import tempfile

# Multi-device tests run on 8 host CPU devices; this must be set before JAX
# initialises its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import pytest

# tests/types/ holds files that mypy checks (tests/test_typing.py); never import them.
collect_ignore_glob = ["types/*", "heldout/*"]

jax.config.update("jax_numpy_rank_promotion", "raise")
# No key is ever used twice: effax's streams must hand out fresh keys only.
jax.config.update("jax_debug_key_reuse", True)

# One test process compiles the same XLA program many times over: each test, and each
# effax wrapper it makes, is a new Python function whose jit cache starts empty, for
# programs that earlier tests compiled already (XLA compiling is about 60% of a shard
# of generated programs). JAX's persistent compilation cache, keyed by the program and
# its compile options, serves those from disk (three shards of tests/test_properties.py
# and test_compositions.py: 99 s -> 82 s on two cores). Its folder is this process's
# own (two pytest-xdist workers never read a file the other is still writing) and new
# (no run sees another's programs), removed at exit. JAX records a compilation's event
# for a program the cache serves too, so tests that count compilations count the same
# with it (tests/helpers.py: counting_compiles). EFFAX_TEST_XLA_CACHE=0 turns it off.
if os.environ.get("EFFAX_TEST_XLA_CACHE", "1") != "0":
    _compilation_cache = tempfile.mkdtemp(prefix="effax-tests-xla-cache-")
    atexit.register(shutil.rmtree, _compilation_cache, ignore_errors=True)
    jax.config.update("jax_compilation_cache_dir", _compilation_cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_collection_modifyitems(items):
    """The longest tests (`runs_long`: the shards of generated programs, near a minute
    each) run first, so that pytest-xdist's workers end together rather than one
    running a late shard while the others idle. The order is otherwise kept."""
    items.sort(key=lambda item: item.get_closest_marker("runs_long") is None)


# JAX 0.10's leak checking bypasses JAX's caches (jax._src.util.cache): under it every
# program and every eager operation compiles anew, which doubles the time of a test
# that compiles (tests/test_control.py: 87 s against 45 s). From 0.11 on the caches stay.
_LEAK_CHECKING_BYPASSES_CACHES = jax.__version_info__ < (0, 11)


@pytest.fixture(autouse=True)
def _check_leaks(request):
    """Tests run under jax.checking_leaks(): no tracer outlives its trace.

    Every test on JAX >= 0.11 (the Python 3.12 suite runs them all on 0.12); on 0.10,
    where leak checking bypasses the compile cache, the core transparency suite
    (`core`: the files that run on every JAX line) only. Tests that leak a trace on
    purpose, to show effax refusing to use it, are marked `leaks_on_purpose`; tests
    that count compilations or compile many programs (`uses_jit_cache`) run without
    it on every line.
    """
    marked = request.node.get_closest_marker
    if (
        marked("leaks_on_purpose")
        or marked("uses_jit_cache")
        or (_LEAK_CHECKING_BYPASSES_CACHES and not marked("core"))
    ):
        yield
        return
    # JAX collects garbage (gc.collect) at the end of every trace it checks; what the
    # earlier tests left alive is frozen out of those collections, so each costs what
    # this test allocates, not the whole session's heap
    gc.collect()
    gc.freeze()
    with jax.checking_leaks():
        yield


@pytest.fixture(autouse=True)
def _key_reuse(request):
    """Key reuse is an error, except in tests that compare two implementations on
    the same keys (`reuses_keys_on_purpose`)."""
    if request.node.get_closest_marker("reuses_keys_on_purpose"):
        with jax.debug_key_reuse(False):
            yield
    else:
        yield


@pytest.fixture(autouse=True)
def _no_handlers_leak():
    """Every test starts and ends with an empty handler stack."""
    from effax import _context

    assert not _context.current_stack(), "a previous test leaked handlers"
    yield
    assert not _context.current_stack(), "this test leaked handlers"
