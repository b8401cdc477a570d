"""spark-submit entry point: `spark-submit ... jobs/compact.py --log-dir DIR [options]`.

Kept thin on purpose: everything lives in the `compaction` package, shipped to executors as a zip
(`--py-files`) by `spark-submit.sh`.
"""

import sys

from compaction.run import main

if __name__ == "__main__":
    sys.exit(main())
