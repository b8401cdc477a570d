"""The `kafka_log` data source against Parquet, and its compacted state against Kafka 0.9's cleaner.

    flock /tmp/bench.lock .venv/bin/python bench/dataframe.py [--log-dir DIR] [--pairs 3] [--floor] [--kafka09 w2g]
        [--jvm] [--scratch DIR]

1. `df.count()` and `df.agg(sum(length(value)))` over a v2 log dir (default the 2 GiB, one
   partition dir of `bench/kafka_workload.py --gb 2 --partitions 1` under /work/benchdata) with
   `spark.read.format("kafka_log")`, and over the same rows written once as uncompressed Parquet
   by pyarrow (same columns, one file per segment), in one local[2] SparkSession, alternating
   query by query; the ratio kafka_log / Parquet per pair. Then the same two queries with a
   schema of the one column each needs (`.schema("offset long")`, `.schema("value binary")`:
   only that column built and handed to Spark), against the same Parquet queries.
   With `--floor`, a third source in each pair: Spark's Python data source fed Arrow batches
   built once per worker (one decoded batch of the log, yielded as many times per input
   partition as fill its bytes), so the time left is Spark's alone: the Python worker writing
   Arrow to the JVM, the JVM reading it into rows. What kafka_log costs above it is ours.
2. With `--kafka09 NAME`: `compacted=true` counted over the bytes Kafka 0.9.0.1 was produced to by
   ../shared/anchors/kafka09 (`anchor.py --name NAME produce` first), Python workers started
   and the page cache dropped before it, against Kafka 0.9's cleaner on the same bytes
   (`anchor.py measure --repeats 1 --drop-caches`, as bench/vs_kafka.py runs it), pair by pair.
   Checked: the state below the active segment holds as many records as the cleaner keeps in
   the segments it cleans (its count leaves the active segment out, as its cleaning does), and
   exactly those: the first pair keeps the cleaner's output (`--keep-after`), whose records
   below the active segment must be the state's, offset for offset, with the same keys and
   values (sums of CRC32s). With `--uncut`, also in each pair: the same count with one input
   partition per Kafka partition (`plan_splits` without `cut_compacted`), workers started and
   the page cache dropped before it too.
3. With `--jvm`: the JVM reader `kafka_log_jvm` (compaction/jvm, its jar from
   `compaction.jvm.reader_jar()` on `spark.jars`; docs/jvm-source.md) in place
   of the queries of 1: `count()` (pushed down as COUNT(*): one count per input partition from
   the v2 batch headers, every batch's CRC checked, or with `checkCrc=false` only the headers read) and
   the sum (only `value` built, columnar), each against the same Parquet query, then kafka_log
   with the one-column schemas of 1 for comparison.
Not a test; prints the figures and the checks, exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

MiB = 1 << 20


def write_parquet(log_dir: str, out: Path) -> int:
    """The log dir's rows as uncompressed Parquet, one file per split (pyarrow); returns rows."""
    import pyarrow.parquet as pq

    from compaction.steps.log_table import ReadOptions, arrow_schema, plan_splits, read_split

    opts = ReadOptions.parse({"path": log_dir})
    rows = 0
    for n, split in enumerate(plan_splits(opts)):
        with pq.ParquetWriter(out / f"part-{n:05d}.parquet", arrow_schema(False), compression="none") as w:
            for batch in read_split(split, opts):
                w.write_batch(batch)
                rows += batch.num_rows
    return rows


def floor_source():
    """A Python data source of kafka_log's schema and input partitions whose rows cost no decode:
    each worker decodes one record batch once and yields it until a partition's bytes are filled."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from compaction.steps.log_table import ReadOptions, plan_splits, read_split, schema_ddl

    class FloorReader(DataSourceReader):
        def __init__(self, path: str) -> None:
            self.opts = ReadOptions.parse({"path": path})

        def partitions(self):
            splits = plan_splits(self.opts)
            return [InputPartition((splits[0], s.size)) for s in splits]

        def read(self, partition):
            # Kept in the worker process's main module: this class is unpickled anew for every
            # task, the worker process is reused across them.
            cache = sys.modules["__main__"].__dict__.setdefault("_kafka_log_floor", {})
            first, size = partition.value
            if "batch" not in cache:
                cache["batch"] = next(iter(read_split(first, self.opts)))
            batch = cache["batch"]
            for _ in range(max(1, round(size / batch.nbytes))):
                yield batch

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_log_floor"

        def schema(self) -> str:
            return schema_ddl(False)

        def reader(self, schema) -> DataSourceReader:
            return FloorReader(self.options["path"])

    return Floor


def fingerprint(df) -> tuple:
    """A DataFrame's offsets in order, and sums of its keys' and values' CRC32s."""
    from pyspark.sql import functions as F

    offsets = [r.offset for r in df.select("offset").orderBy("offset").collect()]
    sums = df.agg(F.sum(F.crc32("key")), F.sum(F.crc32("value"))).collect()[0]
    return offsets, tuple(sums)


def uncut_source():
    """`kafka_log` with the compacted state read by one input partition per Kafka partition."""
    from compaction.spark.datasource import KafkaLogDataSource, KafkaLogReader, SplitPartition
    from compaction.steps.log_table import ReadOptions, plan_splits

    class UncutReader(KafkaLogReader):
        def partitions(self):
            return [SplitPartition(split) for split in plan_splits(self.opts, self.bounds)]

    class Uncut(KafkaLogDataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka_log_uncut"

        def reader(self, schema):
            return UncutReader(ReadOptions.parse(dict(self.options)))

    return Uncut


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log-dir", default="/work/benchdata/v2-2g-1p")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument(
        "--kafka09", metavar="NAME", help="also compacted=true against Kafka 0.9's cleaner on NAME"
    )
    ap.add_argument("--floor", action="store_true", help="also Spark's transfer alone (no decode)")
    ap.add_argument("--uncut", action="store_true", help="--kafka09: also one task per Kafka partition")
    ap.add_argument("--skip-parquet", action="store_true", help="only the Kafka 0.9 comparison")
    ap.add_argument(
        "--jvm",
        action="store_true",
        help="the JVM reader kafka_log_jvm (compaction.jvm.reader_jar()) against Parquet, beside "
        "kafka_log with one-column schemas, instead of the kafka_log queries alone",
    )
    ap.add_argument("--scratch", help="where the Parquet copy is written (default: beside the log dir)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import compaction

    builder = SparkSession.builder
    if args.jvm:
        from compaction.jvm import reader_jar

        builder = builder.config("spark.jars", reader_jar())
    spark = (
        builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(compaction.KafkaLogDataSource)
    if args.floor:
        spark.dataSource.register(floor_source())
    if args.uncut:
        spark.dataSource.register(uncut_source())
    bad = 0

    if not args.skip_parquet:
        with tempfile.TemporaryDirectory(dir=args.scratch or str(Path(args.log_dir).parent)) as tmp:
            t, rows = timed(lambda: write_parquet(args.log_dir, Path(tmp)))
            size = sum(f.stat().st_size for f in Path(tmp).iterdir())
            print(
                f"Parquet: {rows:,} rows, {size / MiB:,.0f} MiB uncompressed, written by pyarrow in {t:.1f} s"
            )
            log = lambda: spark.read.format("kafka_log").load(args.log_dir)  # noqa: E731
            narrow = lambda ddl: spark.read.format("kafka_log").schema(ddl).load(args.log_dir)  # noqa: E731
            parquet = lambda: spark.read.parquet(tmp)  # noqa: E731
            count = lambda df: df.count()  # noqa: E731
            total = lambda df: df.agg(F.sum(F.length("value"))).collect()[0][0]  # noqa: E731
            # (kafka_log's DataFrame, the query); with a schema of one column only that column
            # is built and handed to Spark (the source's manual column pruning)
            queries = {
                "count": (log, count),
                "sum(length(value))": (log, total),
                'count, .schema("offset long")': (lambda: narrow("offset long"), count),
                'sum(length(value)), .schema("value binary")': (lambda: narrow("value binary"), total),
            }
            if args.jvm:
                jvm = lambda crc="true": (  # noqa: E731
                    lambda: spark.read.format("kafka_log_jvm").option("checkCrc", crc).load(args.log_dir)
                )
                queries = {
                    "count, JVM source": (jvm(), count),
                    "count, JVM source, checkCrc=false": (jvm("false"), count),
                    "sum(length(value)), JVM source": (jvm(), total),
                    'count, kafka_log .schema("offset long")': queries['count, .schema("offset long")'],
                    'sum(length(value)), kafka_log .schema("value binary")': queries[
                        'sum(length(value)), .schema("value binary")'
                    ],
                }
                plan = jvm()().groupBy().count()._jdf.queryExecution().executedPlan().toString()
                print("JVM count() plan:", "COUNT(*) pushed down" if "COUNT(*)" in plan else plan)
            floor = lambda: spark.read.format("kafka_log_floor").load(args.log_dir)  # noqa: E731
            for name, (
                source,
                query,
            ) in queries.items():  # warm-up: kernels compiled, JIT and page cache warm
                assert query(source()) == query(parquet()), name
            if args.floor:
                print(f"floor: {floor().count():,} rows of the same batch, {rows:,} in the log")
            ratios: dict[str, list[float]] = {name: [] for name in queries}
            floor_ratios: dict[str, list[float]] = {name: [] for name in queries}
            for i in range(args.pairs):
                for name, (source, query) in queries.items():
                    t_log, v_log = timed(lambda s=source, q=query: q(s()))
                    t_pq, v_pq = timed(lambda q=query: q(parquet()))
                    same = v_log == v_pq
                    bad += not same
                    ratios[name].append(t_log / t_pq)
                    extra = ""
                    if args.floor and "schema" not in name:
                        t_floor, _ = timed(lambda q=query: q(floor()))
                        floor_ratios[name].append(t_floor / t_pq)
                        extra = f", floor {t_floor:.2f} s ({t_floor / t_pq:.2f}x Parquet)"
                    print(
                        f"pair {i + 1} {name}: {t_log:.2f} s, Parquet {t_pq:.2f} s{extra}, "
                        f"ratio {t_log / t_pq:.2f}x {'same result' if same else 'DIFFERENT RESULT'}, "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
            for name, r in ratios.items():
                print(
                    f"median {name}: / Parquet {statistics.median(r):.2f}x "
                    f"(min {min(r):.2f}, max {max(r):.2f})"
                )
                if floor_ratios[name]:
                    print(f"median {name}: floor / Parquet {statistics.median(floor_ratios[name]):.2f}x")

    if args.kafka09:
        from vs_kafka import ANCHOR_DATA, kafka

        source = str(ANCHOR_DATA / args.kafka09 / "before" / "kafka-logs")
        part = next(p for p in sorted(os.listdir(source)) if os.path.isdir(os.path.join(source, p)))
        topic, partition = part.rsplit("-", 1)
        active = max(int(n[:20]) for n in os.listdir(os.path.join(source, part)) if n.endswith(".log"))
        below = json.dumps({topic: {partition: active}})
        state = (
            spark.read.format("kafka_log").options(compacted="true", endingOffsets=below).load(source).count()
        )
        tail = (
            spark.read.format("kafka_log")
            .options(startingOffsets=json.dumps({topic: {partition: active}}))
            .load(source)
            .count()
        )
        compacted = lambda: spark.read.format("kafka_log").option("compacted", "true").load(source).count()  # noqa: E731
        first = json.dumps({topic: {partition: 1000}})

        def cold(fmt: str) -> None:
            """Python workers started for both cores (Spark ends idle ones after a minute, and
            the cleaner's run takes longer; its time leaves its JVM's start out), then the page
            cache dropped."""
            opts = {"compacted": "true", "endingOffsets": first, "minPartitions": "2"}
            spark.read.format(fmt).options(**opts).load(source).count()
            drop_caches()

        ratios, uncut_ratios = [], []
        for i in range(args.pairs):
            cold("kafka_log")
            t_ours, _ = timed(compacted)
            k = kafka(args.kafka09, "vs-dataframe", keep_after=i == 0)
            same = state == k["kept"]
            bad += not same
            ratios.append(k["seconds"] / t_ours)
            uncut = ""
            if args.uncut:
                cold("kafka_log_uncut")
                t_uncut, _ = timed(
                    lambda: (
                        spark.read.format("kafka_log_uncut").option("compacted", "true").load(source).count()
                    )
                )
                uncut_ratios.append(k["seconds"] / t_uncut)
                uncut = f" | one task per partition {t_uncut:.2f} s, Kafka/that {k['seconds'] / t_uncut:.2f}x"
            print(
                f"pair {i + 1}: compacted=true count {t_ours:.2f} s (cold cache) | "
                f"Kafka 0.9 cleaner {k['seconds']:.2f} s "
                f"in {k['rounds']} round(s) | Kafka/ours {k['seconds'] / t_ours:.2f}x | state below the active "
                f"segment {state:,} (active segment: {tail:,} more), Kafka kept {k['kept']:,} "
                f"{'OK' if same else 'MISMATCH'}{uncut}, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(f"median Kafka 0.9 / compacted=true time: {statistics.median(ratios):.2f}x")
        if uncut_ratios:
            print(f"median Kafka 0.9 / one task per partition: {statistics.median(uncut_ratios):.2f}x")
        after = str(ANCHOR_DATA / args.kafka09 / "after" / "kafka-logs")
        ours = spark.read.format("kafka_log").options(compacted="true", endingOffsets=below).load(source)
        theirs = spark.read.format("kafka_log").options(endingOffsets=below).load(after)
        same = fingerprint(ours) == fingerprint(theirs)
        bad += not same
        print(
            f"records: the state below the active segment {'IS' if same else 'IS NOT'} what the cleaner kept"
        )
    spark.stop()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
