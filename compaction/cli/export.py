"""`kafka-compaction export`: the compacted state of log dirs (the latest record of every key,
tombstoned keys absent, as a `read_committed` consumer sees the records) written as Parquet,
per topic and partitioned by Kafka partition, optionally as of a time or offsets (`policy/cut.py`).
The same computation as the `kafka_log` data source with `compacted=true`."""

from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = __doc__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-dir", required=True, help="Kafka log dir: a path or a URI (s3://bucket/logs)")
    parser.add_argument("--out", required=True, help="where the Parquet goes: a path or a URI (empty)")
    parser.add_argument("--format", default="parquet", choices=["parquet"], help="output format (parquet)")
    parser.add_argument("--topics", help="regex of the topics to export (whole names; default all)")
    cut = parser.add_mutually_exclusive_group()
    cut.add_argument("--as-of-time", metavar="T", help="the state as of T: epoch ms or ISO-8601 with a zone")
    cut.add_argument(
        "--as-of-offset",
        metavar="TOPIC:PARTITION=OFFSET,...",
        help="the state as of these log end offsets (exclusive)",
    )
    parser.add_argument("--include-headers", action="store_true", help="add the records' headers column")
    parser.add_argument(
        "--min-partitions",
        type=int,
        metavar="N",
        help="at least N tasks: a big partition's keys cut into buckets by its share of the bytes "
        "(default: Spark's default parallelism)",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")


def run(args: argparse.Namespace) -> int:
    # pyspark and pyarrow when the command runs: `kafka-compaction --help` and the other commands
    # import this module to build their parser.
    from compaction.errors import UsageError
    from compaction.runtime.storage import Storage
    from compaction.spark.export import run_export
    from compaction.steps.log_table import ReadOptions

    options = {"path": args.log_dir, "compacted": "true", "includeHeaders": str(args.include_headers).lower()}
    if args.topics:
        options["subscribePattern"] = args.topics
    if args.as_of_time:
        options["asOfTime"] = args.as_of_time
    if args.as_of_offset:
        options["asOfOffsets"] = args.as_of_offset
    try:
        if args.min_partitions is not None and args.min_partitions < 1:
            raise UsageError(f"--min-partitions: expected a positive integer, got {args.min_partitions}")
        opts = ReadOptions.parse(options)
        storage, root = Storage.for_uri(args.out)
        info = storage.info(root)
        if info is not None and (not info.is_dir or storage.list_dir(root)):
            raise UsageError(f"--out {args.out}: exists and is not an empty directory")
    except UsageError as exc:
        print(f"kafka-compaction export: {exc}", file=sys.stderr)
        return 2
    files = run_export(opts, args.out, args.master, args.min_partitions)
    print(
        json.dumps({"files": sorted(files, key=lambda r: (r["topic"], r["partition"], r["path"]))}, indent=1)
    )
    return 0
