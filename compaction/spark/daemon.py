"""PySpark's worker daemon, with this package's imports and compiled kernels loaded before it
forks the first worker.

An executor runs one daemon (`python -m <spark.python.daemon.module> <worker module>`) that forks a
Python worker for each task slot. Each worker then imported numpy, pyarrow, numba and this package
and loaded every compiled kernel from numba's cache itself: the same work once per core, all at
the same time, while the executor's JVM is busy starting. The launcher names this module as the
daemon instead (`spark.python.daemon.module`): it does that work once, here (a tiny round in a
temporary directory, `warmup.warm`), then runs PySpark's own daemon, whose forked workers find it
done. The job's warm-up tasks (compaction/spark/warmup.py) still run in every worker: they only
set the worker up and find the tiny round run already.

A best effort: if the preload fails, the daemon starts as PySpark's would and the workers load
what they need themselves. Nothing of it may reach the daemon's stdout, which carries its port
to the JVM.
"""

from __future__ import annotations

import os
import sys


def preload() -> float:
    """The warm-up's tiny round in this process, with fd 1 pointed at stderr meanwhile; the
    seconds it took (0.0 when it failed or was left to the workers).

    Only where this host has the compiled kernels of the package's cache key already (in local
    mode the driver brought them from the job's store before the first worker started): the
    daemon does not know the round's store, and compiling here on an executor that starts empty
    would cost more than each worker fetching and loading them itself."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        # Imported only now, with fd 1 on stderr: whatever an import prints must not reach the
        # daemon's stdout, which the JVM reads.
        from compaction.kernels.cache import count_compiles, local_dir
        from compaction.runtime.worker import pyarrow_without_pandas
        from compaction.settings import WorkerSettings
        from compaction.spark.warmup import warm_best_effort

        count_compiles()
        if not os.path.isdir(local_dir()):
            return 0.0
        pyarrow_without_pandas()
        return warm_best_effort(WorkerSettings())
    except Exception:
        return 0.0
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main() -> None:
    from pyspark import daemon  # reads the worker module from argv, as under `python -m pyspark.daemon`

    preload()
    daemon.manager()


if __name__ == "__main__":
    main()
