"""Every benchmark runs for one iteration, so none can rot."""

import importlib.util
import math
import pathlib
import sys

import pytest

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


# --- the suite run by benchmarks/run.py: every case for one iteration ------------------

ROW_KEYS = {
    "case",
    "contender",
    "value",
    "unit",
    "baseline",
    "baseline_value",
    "ratio",
    "target",
    "meets_target",
    "notes",
}


@pytest.fixture
def benchmarks_on_path(monkeypatch):
    # the benchmark scripts import their shared helpers (`_harness`) as siblings
    monkeypatch.syspath_prepend(str(BENCHMARKS))


def check_rows(rows, cases):
    assert {r["case"] for r in rows} == set(cases)
    for r in rows:
        assert set(r) == ROW_KEYS
        if r["notes"].startswith("SKIPPED"):
            assert math.isnan(r["value"])
            continue
        assert r["value"] > 0, r
        if r["baseline"] is not None:
            assert r["baseline_value"] > 0, r
            assert r["ratio"] > 0, r


@pytest.mark.uses_jit_cache  # compiles the step per contender, with 100 States
def test_bench_dispatch_quick(benchmarks_on_path):
    results = load("bench_dispatch").main(["--quick"])
    check_rows(results["rows"], {"1", "2", "3", "11"})
    contenders = {r["contender"] for r in results["rows"]}
    # 1: around, cells; 2: 100 States, 1 State; 3: +100 handlers, `with` per call;
    # 11: one interceptor
    assert len(contenders) == 7
    assert all(results["agreement"].values()), results["agreement"]
    assert "effax.handle(jit), handlers around + 1 interceptor" in results["agreement"]
    assert not any(results["retraces_while_timing"].values()), results["retraces_while_timing"]


def test_bench_compile_quick(benchmarks_on_path):
    results = load("bench_compile").main(["--quick"])
    check_rows(results["rows"], {"4"})
    assert len(results["rows"]) == 2
    for part in ("plain", "keyed"):
        assert results[part]["agree"]
        for stages in results[part]["stages_s"].values():
            assert all(s[k] > 0 for s in stages for k in ("trace", "lower", "compile", "total"))


@pytest.mark.uses_jit_cache
def test_bench_first_call_quick(benchmarks_on_path):
    results = load("bench_first_call").main(["--quick"])
    check_rows(results["rows"], {"7"})
    assert results["agree"]
    # one trace of the body and one XLA compile for each, 100 unrelated handlers or not
    assert results["counts"] == {"effax": (1, 1), "hand": (1, 1)}


def test_bench_donation_quick(benchmarks_on_path):
    results = load("bench_donation").main(["--quick"])
    check_rows(results["rows"], {"10"})
    assert results["agree"]
    memory = results["memory"]
    if memory["effax"] is not None:  # the backend reports memory
        # the parameters (4 x 512 x 512 float32) are aliased, as with donate_argnums
        assert memory["effax"]["alias"] >= 4 * 512 * 512 * 4
        assert memory["effax"]["peak"] <= memory["hand"]["peak"]


@pytest.mark.uses_jit_cache  # compiles the tapped and hand-written steps, loop and scan
def test_bench_taps_quick(benchmarks_on_path):
    module = load("bench_taps")
    results = module.main(["--quick"])
    check_rows(results["rows"], {"12"})
    # (a) ignore() and (b) record(), the layers in a Python loop and in an effax.scan,
    # each against its own hand-written jax.jit step
    assert {r["contender"]: (r["baseline"], r["target"]) for r in results["rows"]} == (
        module.COMPARED
    )
    # losses, parameters and every recorded activation bitwise equal to the hand's
    assert set(results["agreement"]) == set(module.COMPARED)
    assert all(results["agreement"].values()), results["agreement"]
    assert not any(results["retraces_while_timing"].values()), results["retraces_while_timing"]


@pytest.mark.uses_jit_cache  # compiles the effax.nnx and the NNX steps, twice each
def test_bench_nnx_quick(benchmarks_on_path):
    results = load("bench_nnx").main(["--quick"])
    check_rows(results["rows"], {"13"})
    assert results["agree"]  # losses and model states bitwise the NNX program's
    assert {r["target"] for r in results["rows"]} == {1.02, 1.05}


def test_bench_keys_quick(benchmarks_on_path):
    results = load("bench_keys").main(["--quick"])
    check_rows(results["rows"], {"8", "9"})
    assert results["agree"]  # compiled draws are fold_in(base, c + i*k + j), bitwise
    calls = [r["notes"] for r in results["rows"] if r["case"] == "8"]
    # one threefry hash fewer per step than the kernel that splits its key
    assert calls == ["threefry calls per step: effax 2, hand 3"] * 2


def test_bench_eager_quick(benchmarks_on_path):
    results = load("bench_eager").main(["--quick"])
    check_rows(results["rows"], {"5"})
    names = {r["contender"] for r in results["rows"]}
    assert {"Ask.ask (eager)", "State.get (eager)", "State.set (eager)"} <= names
    assert {"RandomKey.next_key (eager)", "Emit.emit (eager)"} <= names


@pytest.mark.uses_jit_cache  # compiles a training step per library and model
def test_bench_peers_quick(benchmarks_on_path):
    module = load("bench_peers")
    results = module.main(["--quick"])
    check_rows(results["rows"], {"6"})
    measured = {r["contender"] for r in results["rows"] if not math.isnan(r["value"])}
    # every library trains every model (the CNN's rows suffixed): it runs or says why not
    assert measured | set(results["skipped"]) == set(module.CONTENDERS)
    assert all(reason for reason in results["skipped"].values())
    assert set(results["fastest"]) == {"MLP", "CNN"}
    for model in (module.MLP, module.CNN):
        # effax and the hand-plumbed step always run, and agree bit for bit
        for library in (module.EFFAX, module.HAND):
            name = module.contender(library, model)
            assert name in measured
            assert results["agreement"][name]["dropout_bitwise"]
            assert results["agreement"][name]["no_dropout_bitwise"]
        hand = module.contender(module.HAND, model)
        ratios = [r for r in results["rows"] if module.CONTENDERS[r["contender"]][1] is model]
        ratios = [r for r in ratios if r["contender"] in measured and r["contender"] != hand]
        assert ratios and all(r["baseline"] == hand for r in ratios)
    for name in measured:
        assert results["agreement"][name]["agrees"], (name, results["agreement"][name])


def test_run_writes_json_markdown_chart(benchmarks_on_path, tmp_path):
    results = load("run").main(["--quick", "--cases", "5", "--out", str(tmp_path)])
    check_rows(results["rows"], {"5"})
    assert (tmp_path / "results.json").stat().st_size > 0
    assert "| case | contender |" in (tmp_path / "results.md").read_text()
    if "matplotlib" in sys.modules or importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "results.png").stat().st_size > 0


@pytest.mark.uses_jit_cache  # compiles case 1's and case 3's steps
def test_profile_dispatch_quick(benchmarks_on_path):
    results = load("profile_dispatch").main(["--quick", "--top", "5"])
    check_rows(results["rows"], {"prof"})
    assert set(results["profiles"]) == {"case 1", "case 3"}
    assert "ncalls" in results["profiles"]["case 1"]
    # the generated per-call code: the handlers' fields go straight into the call
    assert "_fxh2.value = " in results["generated"]
    assert ".export()" not in results["generated"]
