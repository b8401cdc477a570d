"""`python -m compaction.jvm`: the reader's jar path (built if need be), for `--jars` or `spark.jars`."""

from __future__ import annotations

import sys

from compaction.errors import UsageError
from compaction.jvm import reader_jar

if __name__ == "__main__":
    try:
        print(reader_jar())
    except UsageError as exc:
        sys.exit(str(exc))
