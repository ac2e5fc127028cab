"""Run-time check of a blind corpus: run every case, compare effax errors with the marks.

Run (from the repository root):
  XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      .venvs/default/bin/python tests/types/plugin/_check_runtime.py tests/types/plugin/blind5

Each corpus file is parsed with `ast`; its preamble and then each case's top-level
statements are executed one statement at a time (compiled with the file's name, so
tracebacks carry the real line numbers) in one namespace per file, with
``__name__ == "__main__"`` so that ``if __name__ == "__main__":`` blocks run. Cases
exercise themselves (they call what they define, under the handlers a caller would
install). Every exception raised by a statement is caught; an effax error is
mapped to a code (UnhandledEffectError -> effax-unhandled, UndeclaredEffectError ->
effax-undeclared, EffectTypeError/StateTypeError -> effax-handler-type) and
confirmed against a mark on any corpus line of its traceback (innermost first),
or for effax-handler-type a mark inside the raising top-level statement. A
traceback line carrying a `# limit:` comment accounts for an error the plugin is
documented not to see. Lines are traced (sys.settrace, corpus files only) to report
marks never reached.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import sys
import threading
import time
import traceback
import types
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
    raise SystemExit(f"usage: {sys.argv[0]} CORPUS_FOLDER (e.g. tests/types/plugin/blind4)")
ROOT = Path(sys.argv[1]).resolve()
sys.argv = sys.argv[:1]  # (the corpus's scripts parse their own command line)
sys.path.insert(0, str(ROOT))

import effax as fx  # noqa: E402

CODE_OF = [
    (fx.UndeclaredEffectError, "effax-undeclared"),
    (fx.UnhandledEffectError, "effax-unhandled"),
    (fx.StateTypeError, "effax-handler-type"),
    (fx.EffectTypeError, "effax-handler-type"),
]
MARK = re.compile(r"#\s*E:\s*([\w\-, ]+)")
LIMIT = re.compile(r"#\s*limit:")
CASE = re.compile(r"^\s*#\s*case:")

corpus_files = sorted(
    p for p in ROOT.rglob("*.py") if p.name != "_check_runtime.py" and "__pycache__" not in p.parts
)
FILES = {str(p) for p in corpus_files}

marks: dict[tuple[str, int], set[str]] = {}
limits: set[tuple[str, int]] = set()
for p in corpus_files:
    for i, line in enumerate(p.read_text().splitlines(), 1):
        m = MARK.search(line)
        codes = {c.strip() for c in m.group(1).split(",")} if m else set()
        codes = {c for c in codes if c.startswith("effax-")}  # (not mypy's own, pinned too)
        if codes:
            marks[(str(p), i)] = codes
        if LIMIT.search(line):
            limits.add((str(p), i))

executed: set[tuple[str, int]] = set()


def _local(frame: types.FrameType, event: str, arg: object):  # type: ignore[no-untyped-def]
    if event == "line":
        executed.add((frame.f_code.co_filename, frame.f_lineno))
    return _local


def _global(frame: types.FrameType, event: str, arg: object):  # type: ignore[no-untyped-def]
    if frame.f_code.co_filename in FILES:
        executed.add((frame.f_code.co_filename, frame.f_lineno))
        return _local
    return None


confirmed: dict[tuple[str, int], set[str]] = defaultdict(set)
limit_hits: list[tuple[str, int, str]] = []
unexpected: list[str] = []
other_errors: list[str] = []


def code_of(exc: BaseException) -> str | None:
    for cls, code in CODE_OF:
        if isinstance(exc, cls):
            return code
    return None


def corpus_frames(exc: BaseException) -> list[tuple[str, int]]:
    frames = [(f.filename, f.lineno or 0) for f in traceback.extract_tb(exc.__traceback__)]
    return [f for f in reversed(frames) if f[0] in FILES]


def record(exc: BaseException, stmt_span: tuple[str, int, int]) -> None:
    code = code_of(exc)
    frames = corpus_frames(exc)
    where = ", ".join(f"{Path(f).relative_to(ROOT)}:{n}" for f, n in frames[:4])
    if code is None:
        if isinstance(exc, fx.EffectError) and any(f in limits for f in frames):
            f = next(f for f in frames if f in limits)
            limit_hits.append((f[0], f[1], type(exc).__name__))
            return
        other_errors.append(f"{type(exc).__name__} at {where}: {str(exc)[:160]}")
        return
    for f in frames:
        if code in marks.get(f, set()):
            confirmed[f].add(code)
            return
    for f in frames:
        if f in limits:
            limit_hits.append((f[0], f[1], type(exc).__name__))
            return
    if code == "effax-handler-type":
        fname, lo, hi = stmt_span
        for line in range(lo, hi + 1):
            if code in marks.get((fname, line), set()):
                confirmed[(fname, line)].add(code)
                return
    unexpected.append(f"{type(exc).__name__} ({code}) at {where}: {str(exc)[:160]}")


def module_name(path: Path) -> tuple[str, str | None]:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    pkg = ".".join(parts[:-1]) if len(parts) > 1 else None
    return ".".join(parts), pkg


def run_file(path: Path) -> int:
    source = path.read_text()
    tree = ast.parse(source, str(path))
    case_lines = [i for i, l in enumerate(source.splitlines(), 1) if CASE.match(l)]
    name, pkg = module_name(path)
    ns: dict[str, object] = {
        "__name__": "__main__",
        "__file__": str(path),
        "__package__": pkg,
        "__builtins__": __builtins__,
    }
    for stmt in tree.body:
        end = stmt.end_lineno or stmt.lineno
        code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(code, ns)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            record(exc, (str(path), stmt.lineno, end))
    return len(case_lines)


def main() -> int:
    start = time.time()
    errors_in_threads: list[BaseException] = []

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            errors_in_threads.append(args.exc_value)

    threading.excepthook = hook
    threading.settrace(_global)  # type: ignore[arg-type]
    sys.settrace(_global)  # type: ignore[arg-type]
    n_cases = 0
    try:
        for p in corpus_files:
            if p.name == "__init__.py":
                continue
            t0 = time.time()
            n_cases += run_file(p)
            print(f"  ran {p.relative_to(ROOT)} in {time.time() - t0:.1f}s", flush=True)
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    for exc in errors_in_threads:
        code = code_of(exc)
        frames = corpus_frames(exc)
        if any(f in limits for f in frames):
            f = next(f for f in frames if f in limits)
            limit_hits.append((f[0], f[1], type(exc).__name__ + " (thread)"))
        else:
            unexpected.append(f"thread: {type(exc).__name__} ({code}) at {frames[:3]}")

    total_codes = sum(len(c) for c in marks.values())
    conf_codes = sum(len(confirmed.get(k, set()) & v) for k, v in marks.items())
    not_reached = [k for k in marks if k not in executed]
    unconfirmed = [
        (k, sorted(v - confirmed.get(k, set()))) for k, v in marks.items() if v - confirmed.get(k, set())
    ]
    rel = lambda k: f"{Path(k[0]).relative_to(ROOT)}:{k[1]}"  # noqa: E731
    print(f"\nfiles: {len(corpus_files)}, cases: {n_cases}")
    print(f"marked lines: {len(marks)}, mark codes: {total_codes}, confirmed at run time: {conf_codes}")
    print(f"limit lines: {len(limits)}, limit lines that raised an effax error: {len({(a, b) for a, b, _ in limit_hits})}")
    silent_limits = sorted(k for k in limits if k not in {(a, b) for a, b, _ in limit_hits})
    if silent_limits:
        print("\nlimit lines that raised no effax error:")
        for k in silent_limits:
            print("  ", rel(k), "(executed)" if k in executed else "(never executed)")
    if not_reached:
        print("\nmarked lines never executed:")
        for k in sorted(not_reached):
            print("  ", rel(k), sorted(marks[k]))
    if unconfirmed:
        print("\nmarks not confirmed by an effax error:")
        for k, codes in sorted(unconfirmed):
            print("  ", rel(k), codes)
    if unexpected:
        print("\neffax errors at unmarked lines:")
        for u in unexpected:
            print("  ", u)
    if other_errors:
        print("\nother exceptions (corpus bugs):")
        for o in other_errors:
            print("  ", o)
    print(f"\ndone in {time.time() - start:.1f}s")
    return 0 if not (unconfirmed or unexpected or other_errors) else 1


if __name__ == "__main__":
    sys.exit(main())
