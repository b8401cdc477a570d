"""The application file spark-submit runs on the driver (`kafka-compaction compact` and
`./spark-submit.sh` pass it; so can a `SparkSubmitOperator`): one compaction round."""

import os
import sys

# Run as a script, this file's directory (the package itself) would be first on sys.path, and its
# modules would shadow top-level ones of the same name.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from compaction.round import main

if __name__ == "__main__":
    sys.exit(main())
