"""Mutation testing of the code that decides whether data survives, with cosmic-ray.

    .venv/bin/pip install -e '.[mutation]'
    .venv/bin/python tests/mutation/run.py [MODULE ...] [--out DIR] [--only NAME,...]

For each module (default: all of MODULES) it copies the tracked files of the checkout to a scratch
directory (the checkout is never mutated) and runs the module's targeted test selection once under
coverage.py (`linemap.py`: which tests run each line; the selection must pass). cosmic-ray then
mutates the module there one mutant at a time, and each mutant runs the tests of the selection that
execute the mutated lines, the quickest first (`-x`: the first failure kills the mutant; the whole
selection for a line run at import). A mutant of a line no test runs survives without a test run, said in its output.
It prints the score and every surviving mutant as a diff. The results go to
`DIR/<module>.sqlite` (default `mutation-results/`), which `cr-report` reads too.

The scores of the last run and the mutants judged equivalent are in docs/testing.md.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTEST = "python -m pytest -x -q -p no:cacheprovider -p no:randomly -W ignore"
LINEMAP = ".mutation-linemap.json"  # in the scratch copy: linemap.py's output
ORIGINAL = ".mutation-original.py"  # in the scratch copy: the module before any mutant

# module -> the tests that must kill its mutants (unit tests, no Spark job; the quickest to fail first)
MODULES = {
    "compaction/policy/keep.py": ["tests/unit/test_keep_policy.py", "tests/unit/test_logcleaner_ports.py"],
    "compaction/steps/commit.py": [
        "tests/unit/test_power_loss.py",
        "tests/unit/test_commit.py",
        "tests/unit/test_commit_object_store.py",
    ],
    "compaction/steps/recover.py": [
        "tests/unit/test_power_loss.py",
        "tests/unit/test_commit.py",
        "tests/unit/test_broker_lock.py",
        "tests/unit/test_discover_lazy.py",
    ],
    "compaction/steps/range_task.py": ["tests/unit/test_ranges.py"],
    # a task's ranges scanned into one key table, what each range leaves out of its summary, and the
    # offset map its rewrite reads (held, or handed over in blocks)
    "compaction/steps/ranges.py": ["tests/unit/test_shipped_map.py", "tests/unit/test_ranges.py"],
    # the partition pipeline both tasks call: its re-plan rule and the checks beside the scan
    "compaction/steps/pipeline.py": [
        "tests/unit/test_results.py",
        "tests/unit/test_ranges.py",
        "tests/unit/test_rewrite_unit.py",
    ],
    "compaction/runtime/exchange.py": ["tests/unit/test_exchange.py", "tests/unit/test_ranges.py"],
    "compaction/runtime/storage.py": [
        "tests/unit/test_durability.py",
        "tests/unit/test_storage.py",
        "tests/unit/test_power_loss.py",
        "tests/unit/test_commit_object_store.py",
        "tests/unit/test_broker_lock.py",
        "tests/unit/test_s3_versioning.py",
    ],
    "compaction/runtime/s3.py": ["tests/unit/test_s3_versioning.py", "tests/unit/test_s3_unit.py"],
    "compaction/steps/erase.py": ["tests/unit/test_erase.py"],
}


# The operators run: a sufficient set (each comparison to its boundary and its negation, each
# arithmetic operator to its inverse, constants, conditions, loops, exception handlers) rather than
# every operator to every other one, which multiplies the mutants tenfold and kills no more of them.
OPERATORS = [
    "AddNot",
    "ReplaceTrueWithFalse",
    "ReplaceFalseWithTrue",
    "ReplaceAndWithOr",
    "ReplaceOrWithAnd",
    "NumberReplacer",
    "ZeroIterationForLoop",
    "ExceptionReplacer",
    "ReplaceBreakWithContinue",
    "ReplaceContinueWithBreak",
    "ReplaceUnaryOperator_Not_Delete",
    "ReplaceUnaryOperator_USub_Delete",
    *(
        f"ReplaceComparisonOperator_{a}_{b}"
        for a, b in [
            ("Lt", "LtE"),
            ("LtE", "Lt"),
            ("Gt", "GtE"),
            ("GtE", "Gt"),
            ("Lt", "GtE"),
            ("GtE", "Lt"),
            ("Gt", "LtE"),
            ("LtE", "Gt"),
            ("Eq", "NotEq"),
            ("NotEq", "Eq"),
            ("Is", "IsNot"),
            ("IsNot", "Is"),
            ("In", "NotIn"),
            ("NotIn", "In"),
        ]
    ),
    *(
        f"ReplaceBinaryOperator_{a}_{b}"
        for a, b in [
            ("Add", "Sub"),
            ("Sub", "Add"),
            ("Mul", "Div"),
            ("Div", "Mul"),
            ("FloorDiv", "Mul"),
            ("Mod", "FloorDiv"),
            ("BitAnd", "BitOr"),
            ("BitOr", "BitAnd"),
            ("LShift", "RShift"),
            ("RShift", "LShift"),
        ]
    ),
]


def copy_checkout(dest: Path) -> None:
    """The tracked files as they are in the work tree (uncommitted edits included)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for name in files.decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def changed_lines(original: list[str], mutated: list[str]) -> set[int]:
    """The lines of `original` (1-based) that the mutant rewrote."""
    lines: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, original, mutated, autojunk=False).get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


def statement_lines(source: str, lines: set[int]) -> set[int]:
    """`lines` widened to every line of the innermost statement holding each (a compound one's
    header only): a condition over several lines that stops early never runs its later lines, yet
    a mutant there changes what the first one decides, so the tests of every line of it apply."""
    out = set(lines)
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        end = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno or node.lineno
        span = range(node.lineno, max(end, node.lineno) + 1)
        inner = [
            c
            for c in ast.walk(node)
            if c is not node
            and isinstance(c, ast.stmt)
            and any(c.lineno <= line <= (c.end_lineno or c.lineno) for line in lines)
        ]
        if not inner and any(line in span for line in lines):
            out.update(span)
    return out


def kernel_lines(source: str) -> set[int]:
    """The lines of the module's numba kernels (functions decorated `njit` or `_njit`): compiled,
    they never run as Python lines, so coverage.py records none of them."""
    out: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any(
            (d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")).endswith("njit")
            for d in (x.func if isinstance(x, ast.Call) else x for x in node.decorator_list)
        ):
            out.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return out


def run_mutant(module: str) -> int:
    """cosmic-ray's test command, in the scratch copy holding one mutant: the tests that run the
    mutated lines."""
    here = Path.cwd()
    linemap = json.loads((here / LINEMAP).read_text())
    original = (here / ORIGINAL).read_text().splitlines()
    lines = statement_lines(
        "\n".join(original), changed_lines(original, (here / module).read_text().splitlines())
    )
    chosen: set[int] = set()
    for line in sorted(lines):
        chosen.update(linemap["lines"].get(str(line), []))
    if not chosen and lines & kernel_lines("\n".join(original)):
        chosen = {-1}  # coverage does not see inside a compiled kernel: the whole selection
    if not chosen:
        print(f"no test of the selection runs line(s) {sorted(lines)}: survives untested", flush=True)
        return 0
    if -1 in chosen:
        chosen = set(range(len(linemap["tests"])))
    # The quickest first: a killed mutant's run ends at its first failing test.
    tests = [linemap["tests"][i] for i in sorted(chosen, key=lambda i: linemap["seconds"][i])]
    print(f"line(s) {sorted(lines)}: {len(tests)} test(s)", flush=True)
    fewer = ["-p", "fewer_examples"] if int(os.environ.get("MUTATION_MAX_EXAMPLES", "0")) > 0 else []
    fewer += ["-p", "steady_kernels"] if os.environ.get("MUTATION_KERNEL_DIGEST") else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here / "tests" / "mutation")])}
    code = subprocess.run([sys.executable, "-m", *PYTEST.split()[2:], *fewer, *tests], env=env).returncode
    if code in (3, 4, 5):  # pytest's internal error, usage error, no test: the run, not the mutant, failed
        # unless the mutated module no longer imports (the tests' files then fail to collect, and
        # the test ids given are not found): the baseline imported it, so that is the mutant's doing
        name = module.removesuffix(".py").replace("/", ".")
        probe = subprocess.run(
            [sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True
        )
        if probe.returncode != 0:
            print(f"{probe.stderr[-2000:]}the mutated module does not import: killed", flush=True)
            return 1
        print(f"pytest exited {code}: no test ran, so the mutant is counted surviving", flush=True)
        return 0
    return code


def baseline(module: str, tests: list[str], scratch: Path, env: dict) -> None:
    """The selection once on the unmutated module under coverage: it must pass, and it tells which
    tests run each line."""
    shutil.copy2(scratch / module, scratch / ORIGINAL)
    env = {
        **env,
        "PYTHONPATH": f"{scratch}{os.pathsep}{scratch / 'tests' / 'mutation'}",
        "MUTATION_TARGET": str(scratch / module),
        "MUTATION_LINEMAP": str(scratch / LINEMAP),
    }
    cmd = [sys.executable, "-m", *PYTEST.split()[2:], "-p", "linemap", *tests]
    if subprocess.run(cmd, cwd=scratch, env=env).returncode != 0:
        raise SystemExit(f"{module}: its test selection fails on the unmutated code")


def kernel_digest(scratch: Path, env: dict) -> str:
    """The unmutated kernel sources' digest (`kernels/cache.py`), which the mutants' runs keep
    (`steady_kernels.py`)."""
    code = "from compaction.kernels.cache import sources_digest; print(sources_digest())"
    run = subprocess.run([sys.executable, "-c", code], cwd=scratch, env=env, capture_output=True, text=True)
    return run.stdout.strip()


MODULE_LEVEL = "<module>"  # an --only name: the statements outside every function and class


def spans(source: str, names: list[str]) -> list[tuple[int, int]]:
    """The line spans of the module's top-level functions and classes named in `names`
    (`Class.method` for a method; `<module>` for its top-level statements outside them, such as
    its constants, imports and `if TYPE_CHECKING` blocks)."""
    found: dict[str, tuple[int, int]] = {}
    level: list[tuple[int, int]] = []
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            level.append((node.lineno, node.end_lineno or node.lineno))
        else:
            found[node.name] = (node.lineno, node.end_lineno or node.lineno)
            for sub in node.body if isinstance(node, ast.ClassDef) else ():
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{sub.name}"] = (sub.lineno, sub.end_lineno or sub.lineno)
    missing = [n for n in names if n not in found and n != MODULE_LEVEL]
    if missing:
        raise SystemExit(f"not a top-level function, class or method of the module: {', '.join(missing)}")
    return [span for n in names for span in (level if n == MODULE_LEVEL else [found[n]])]


def skip_outside(session: Path, keep: list[tuple[int, int]]) -> None:
    """Marks the session's mutants outside the spans `keep` skipped (cosmic-ray's own filters do so)."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session)) as db:
        for item in list(db.pending_work_items):
            line = item.mutations[0].start_pos[0]
            if not any(a <= line <= b for a, b in keep):
                db.set_result(
                    item.job_id, WorkResult(output="outside --only", worker_outcome=WorkerOutcome.SKIPPED)
                )


def run_module(
    module: str,
    tests: list[str],
    out: Path,
    timeout: float,
    only: list[str] | None = None,
    max_examples: int = 0,
    resume: Path | None = None,
) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        copy_checkout(scratch)
        env = {**os.environ, "PYTHONPATH": str(scratch), "CI": ""}
        baseline(module, tests, scratch, env)
        env["MUTATION_MAX_EXAMPLES"] = str(max_examples)  # the mutants' runs only (fewer_examples.py)
        env["MUTATION_KERNEL_DIGEST"] = kernel_digest(scratch, env)
        config = scratch / "cosmic-ray.toml"
        # The scratch copy comes first on the path: `python -m pytest` puts the working directory
        # ahead of the checkout that the venv's editable install names.
        config.write_text(
            "[cosmic-ray]\n"
            f'module-path = "{module}"\n'
            f"timeout = {timeout}\n"
            "excluded-modules = []\n"
            f'test-command = "{sys.executable} {scratch / "tests" / "mutation" / "run.py"} --mutant {module}"\n'
            '[cosmic-ray.distributor]\nname = "local"\n'
            "[cosmic-ray.filters.operators-filter]\n"
            f'exclude-operators = ["core/(?!(?:{"|".join(OPERATORS)})$).*"]\n'
        )
        session = out / (module.replace("/", ".").removesuffix(".py") + ".sqlite")
        cr = [sys.executable, "-m", "cosmic_ray.cli"]
        if resume:
            # a stopped run's session: `exec` runs only its mutants without a result
            if resume.resolve() != session.resolve():
                shutil.copy2(resume, session)
        else:
            session.unlink(missing_ok=True)
            subprocess.run([*cr, "init", str(config), str(session)], cwd=scratch, env=env, check=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "cosmic_ray.tools.filters.operators_filter",
                    str(session),
                    str(config),
                ],
                cwd=scratch,
                env=env,
                check=True,
            )
            if only:
                skip_outside(session, spans((scratch / module).read_text(), only))
        t = time.monotonic()
        subprocess.run([*cr, "exec", str(config), str(session)], cwd=scratch, env=env, check=True)
        dump = subprocess.run(
            [*cr, "dump", str(session)], cwd=scratch, env=env, check=True, capture_output=True, text=True
        ).stdout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [json.loads(line) for line in dump.splitlines() if line.strip()]
    tried = [(job, result) for job, result in rows if result and result.get("worker_outcome") != "skipped"]
    done = [(job, result) for job, result in tried if result.get("test_outcome") in ("killed", "survived")]
    survived = [(job, result) for job, result in done if result["test_outcome"] == "survived"]
    killed = len(done) - len(survived)
    timeouts = sum(1 for _, result in done if result.get("output") == "timeout")
    return {
        "timeouts": timeouts,
        "module": module,
        "mutants": len(tried),
        "done": len(done),
        "killed": killed,
        "survived": survived,
        "seconds": round(time.monotonic() - t),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", default=list(MODULES), help="paths as in MODULES")
    parser.add_argument("--out", default="mutation-results", help="where the session files go")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a mutant's tests may take")
    parser.add_argument(
        "--only",
        help="comma-separated top-level functions, classes or Class.method of the module, or <module> for"
        " its statements outside them: mutate only these",
    )
    parser.add_argument(
        "--tests",
        help="comma-separated test files: this selection instead of the module's (a quicker run)",
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=25,
        help="a mutant's hypothesis tests run at most this many examples, derandomized (0: as written)",
    )
    parser.add_argument(
        "--resume",
        help="a stopped run's session file (DIR/<module>.sqlite): run only its mutants without a result"
        " (the module unchanged since; the summary counts the earlier results too)",
    )
    parser.add_argument("--mutant", help=argparse.SUPPRESS)  # cosmic-ray's test command (run_mutant)
    args = parser.parse_args()
    if args.mutant:
        return run_mutant(args.mutant)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    total_survived = 0
    for module in args.modules:
        only = args.only.split(",") if args.only else None
        tests = args.tests.split(",") if args.tests else MODULES[module]
        resume = Path(args.resume) if args.resume else None
        r = run_module(module, tests, out, args.timeout, only, args.max_examples, resume)
        score = r["killed"] / r["done"] if r["done"] else 0.0
        print(
            f"{module}: {r['killed']}/{r['done']} killed ({score:.1%}; {r['timeouts']} by the timeout), "
            f"{len(r['survived'])} survived, "
            f"{r['mutants']} mutants, {r['seconds']} s",
            flush=True,
        )
        for job, result in r["survived"]:
            for m in job["mutations"]:
                print(
                    f"  survived: {m['operator_name']} line {m['start_pos'][0]} occurrence {m['occurrence']}"
                )
            if "survives untested" in (result.get("output") or ""):
                print("    (no test of the selection runs it)")
            print("    " + (result.get("diff") or "").replace("\n", "\n    "))
        total_survived += len(r["survived"])
    return 1 if total_survived else 0


if __name__ == "__main__":
    sys.exit(main())
