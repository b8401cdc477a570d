"""`kafka-compaction export`'s Spark job: one task per Kafka partition, or per bucket of its keys
for a big one (`log_table.cut_compacted`, as the `kafka_log` source cuts `compacted=true`, so
that one big partition keeps every core busy), computes its compacted state (`steps/log_table.py`
`read_split`) and writes it as one Parquet file under `<out>/topic=<t>/partition=<p>/`
through the job's storage layer (`runtime/storage.py`: local disks, S3, GCS, HDFS via pyarrow,
so no Hadoop S3 connector is needed). Spark's own `partitionBy` layout: readers that know Hive
partitioning (Spark, pyarrow.dataset, DuckDB) get `topic` and `partition` back from the path."""

from __future__ import annotations

import os
import sys

from compaction.steps.log_table import ReadOptions, Split, cut_compacted, plan_splits
from compaction.steps.parquet_out import write_split


def run_export(
    opts: ReadOptions, out_uri: str, master: str | None, min_partitions: int | None = None
) -> list[dict]:
    """Plan on the driver, write on the executors; one row per file written. `master`: Spark's
    (None: spark-submit's or the environment's). `min_partitions`: at least this many tasks
    (`cut_compacted`; None: Spark's default parallelism, its cores)."""
    from pyspark import SparkConf, SparkContext

    # The workers' Python: this one unless told otherwise, as the job's launcher does (the
    # interpreter on PATH may lack the project's packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    splits = plan_splits(opts)
    if not splits:
        return []
    conf = SparkConf().setIfMissing("spark.app.name", "kafka-compaction-export")
    conf.set("spark.ui.enabled", "false")
    # Two attempts of one task would write the same file: no speculative copies.
    conf.set("spark.speculation", "false")
    if master:
        conf.setMaster(master)
    sc = SparkContext.getOrCreate(conf)

    splits = cut_compacted(splits, min_partitions or sc.defaultParallelism)

    def task(split: Split) -> dict:
        return write_split(split, opts, out_uri)

    return sc.parallelize(splits, len(splits)).map(task).collect()
