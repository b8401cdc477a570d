"""spark-submit entry point of a checkout: `spark-submit ... jobs/compact.py --log-dir DIR [options]`.

The application file of the installed package is `compaction/job.py`; this one stays for
existing spark-submit command lines and schedulers that name it.
"""

import sys

from compaction.round import main

if __name__ == "__main__":
    sys.exit(main())
