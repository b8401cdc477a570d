"""A pytest plugin (`-p fewer_examples`) for a mutant's test run: each hypothesis test runs at most
`MUTATION_MAX_EXAMPLES` examples, derandomized (the same examples for every mutant, so a run's
result does not depend on luck).

A property test's hundreds of examples are what a mutant's run spends most on (keep.py's took
~70 s a mutant); a mutant that changes a decision fails on the first few examples that reach it.
The baseline (`linemap.py`) runs every example, so the tests chosen for a line are all that run it.
A mutant that survives with the cap is worth one run of its tests without it.
"""

from __future__ import annotations

import os

from hypothesis import settings


def pytest_collection_modifyitems(items) -> None:
    cap = int(os.environ["MUTATION_MAX_EXAMPLES"])
    for item in items:
        test = getattr(item, "obj", None)
        # Hypothesis reads a test's settings from this attribute each time the test runs.
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if current is not None and current.max_examples > cap:
            test._hypothesis_internal_use_settings = settings(current, max_examples=cap, derandomize=True)
