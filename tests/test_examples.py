"""Every example script runs, in its quick mode, and shows what it claims."""

import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counter_counts_and_traces_once(capsys):
    counter = load("counter")
    assert counter.main(3) == [1, 2, 3]
    assert len(counter.traces) == 1
    out = capsys.readouterr().out
    assert "plain object under jax.jit: [1, 1, 1]" in out


def test_readme_example_runs():
    readme = (EXAMPLES.parent / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    assert blocks, "the README has a Python example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert int(namespace["hs"][namespace["steps"]]) == 2
    assert len(namespace["hs"][namespace["aux_loss"]]) == 2
