"""Every benchmark runs for one iteration, so none can rot."""

import importlib.util
import pathlib

BENCHMARKS = pathlib.Path(__file__).parent.parent / "benchmarks"


def load(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_context_quick():
    results = load("bench_context").main(["--quick"])
    assert results["JitAwareContextVar.get"] > 0
    assert set(results) >= {"Ask.ask", "State.get", "State.set", "RandomKey.next_key"}
