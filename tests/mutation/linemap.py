"""A pytest plugin (`-p linemap`) that records which tests run each line of one module, with
coverage.py's contexts: `MUTATION_TARGET` names the module's file, `MUTATION_LINEMAP` the JSON
written at the end, `{"tests": [node ids in run order], "seconds": [each one's setup + call],
"lines": {line: [indexes into tests]}}`.
Lines run outside any test (at import) are under the index -1.

run.py uses it to run, for a mutant, only the tests of the module's selection that execute the
mutated line: most mutants then cost a few tests instead of the whole selection.
"""

from __future__ import annotations

import json
import os

import coverage

# Started on import (pytest imports `-p` plugins before conftest files and test modules), so the
# module's import-time lines are recorded too.
_TARGET = os.path.abspath(os.environ["MUTATION_TARGET"])
_cov = coverage.Coverage(data_file=None, include=[_TARGET], branch=False, config_file=False)
_cov.start()
_tests: list[str] = []
_seconds: dict[str, float] = {}


def pytest_runtest_setup(item) -> None:
    _tests.append(item.nodeid)
    _cov.switch_context(item.nodeid)


def pytest_runtest_logreport(report) -> None:
    if report.when in ("setup", "call"):
        _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration


def pytest_unconfigure(config) -> None:
    _cov.stop()
    data = _cov.get_data()
    index = {nodeid: i for i, nodeid in enumerate(_tests)}
    lines: dict[int, list[int]] = {}
    for path in data.measured_files():
        if os.path.abspath(path) != _TARGET:
            continue
        for line, contexts in data.contexts_by_lineno(path).items():
            lines[line] = sorted({index.get(c, -1) for c in contexts})
    with open(os.environ["MUTATION_LINEMAP"], "w") as f:
        json.dump({"tests": _tests, "seconds": [_seconds.get(t, 0.0) for t in _tests], "lines": lines}, f)
