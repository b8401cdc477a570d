"""`kafka_log`: Kafka log dirs (segment files, no broker) as a Spark data source.

    spark.dataSource.register(compaction.KafkaLogDataSource)
    spark.read.format("kafka_log").option("subscribePattern", "orders.*").load("s3://bucket/kafka-logs")

Spark's Python Data Source API (4.0+); the rows are built by `steps/log_table.py` as Arrow
record batches. The options (`subscribe`, `startingOffsets`, ...) choose the segments read; a
schema given with `.schema("offset long")` chooses the columns built and handed to Spark.

With `pushFilters=true` (and `spark.sql.python.filterPushdown.enabled=true`), filters on `topic`,
`partition`, `offset` and `timestamp` choose them too (`pushFilters`, Spark 4.1); Spark still
applies each filter to the rows. Not by default: Spark 4.1 keeps the reader and partitions of the
last query whose filters it pushed (`PythonDataSourceV2.setReadInfo`) and reuses them for a later
query of the same DataFrame that has no filter to push (`getOrCreateReadInfo` returns the kept
one and no Python runs), which then sees only the earlier query's segments. Nothing reaches the
source in that later query, so no workaround on this side can tell the two apart.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import ArrayType, MapType, StructType

from compaction.runtime.worker import keep_zip_directories
from compaction.settings import FRAME_SPARK_BATCH_ROWS
from compaction.steps.log_table import (
    Bounds,
    ReadOptions,
    chosen_columns,
    cut_compacted,
    fields,
    plan_splits,
    read_split,
    schema_ddl,
)

_COLUMNS = {"topic", "partition", "offset", "timestamp"}


class KafkaLogDataSource(DataSource):
    """Kafka log dirs as rows with the columns of Spark's Kafka source (see steps/log_table.py)."""

    @classmethod
    def name(cls) -> str:
        return "kafka_log"

    def schema(self) -> str:
        return schema_ddl(ReadOptions.parse({"path": "-", **self.options}).include_headers)

    def reader(self, schema) -> DataSourceReader:
        opts = ReadOptions.parse(dict(self.options))
        # Spark passes a schema the user gave (`.schema("offset long")`) here instead of asking
        # `schema()`, and takes rows of exactly its columns: only those are built and handed
        # over (Spark's Python sources get no column pruning of their own).
        columns = chosen_columns(
            [(f.name, f.dataType.simpleString(), f.nullable and _nullable(f.dataType)) for f in schema.fields]
        )
        if columns != tuple(name for name, _ in fields(opts.include_headers)):
            opts = replace(opts, columns=columns)
        names = tuple(f.name for f in schema.fields)
        names = names if opts.columns and names != opts.columns else None
        kind = PushdownKafkaLogReader if _bool_option(self.options, "pushFilters") else KafkaLogReader
        return kind(opts, names)


def _nullable(dtype) -> bool:
    """Whether nothing inside `dtype` is declared NOT NULL (`array<struct<key:string not null>>`)."""
    if isinstance(dtype, StructType):
        return all(f.nullable and _nullable(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return dtype.containsNull and _nullable(dtype.elementType)
    if isinstance(dtype, MapType):
        return dtype.valueContainsNull and _nullable(dtype.keyType) and _nullable(dtype.valueType)
    return True


class SplitPartition(InputPartition):
    """One input partition: a `log_table.Split` (pickled to the executor)."""


def _bool_option(options, name: str) -> bool:
    return str(options.get(name, "false")).lower() == "true"


class KafkaLogReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, names: tuple[str, ...] | None = None) -> None:
        self.opts = opts
        self.bounds = Bounds()
        # The user schema's spelling of the columns where it differs from ours (Spark 4.1 checks
        # a batch's column names against the schema's, as spelt)
        self.names = names

    def partitions(self):
        splits = plan_splits(self.opts, self.bounds)
        if self.opts.compacted:
            splits = cut_compacted(splits, self.opts.min_partitions)
        return [SplitPartition(split) for split in splits]

    def read(self, partition):
        if partition is None:  # `partitions()` found none: Spark reads one partition of nothing
            return
        keep_zip_directories()
        for batch in read_split(partition.value, self.opts):
            if self.names:
                batch = pa.RecordBatch.from_arrays(batch.columns, names=list(self.names))
            for start in range(0, batch.num_rows, FRAME_SPARK_BATCH_ROWS):
                yield batch.slice(start, FRAME_SPARK_BATCH_ROWS)


class PushdownKafkaLogReader(KafkaLogReader):
    def pushFilters(self, filters):
        """Every filter goes back to Spark (still applied to the rows); those on the columns
        the log's layout answers narrow the segments read."""
        for f in filters:
            narrowed = _bounds_of(f)
            if narrowed is not None:
                self.bounds = self.bounds.narrowed(**narrowed)
            yield f


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)
# A naive datetime is wall time in a zone this process may not know (the session's): its bounds
# are widened by the widest UTC offset, so that a bound only ever keeps more rows.
_NAIVE_SLACK_MS = 15 * 3600 * 1000


def _millis(value) -> tuple[int, int] | None:
    """(earliest, latest) milliseconds since the epoch that a filter's timestamp may stand for."""
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:
        ms = (value.replace(tzinfo=datetime.timezone.utc) - _EPOCH) // _MS
        return ms - _NAIVE_SLACK_MS, ms + _NAIVE_SLACK_MS
    ms = (value - _EPOCH) // _MS  # floor: a row's millisecond at or before the filter's microsecond
    return ms, ms


def _bounds_of(f) -> dict | None:
    """What one filter says of topic, partition, offset or timestamp (None: nothing usable).
    Offsets are exact; timestamps (microseconds in Spark, milliseconds in Kafka) round outwards."""
    if not isinstance(f, (EqualTo, In, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
        return None
    column = f.attribute[0] if len(f.attribute) == 1 else None
    if column not in _COLUMNS:
        return None
    if column in ("topic", "partition"):
        name = "topics" if column == "topic" else "partitions"
        if isinstance(f, EqualTo):
            return {name: frozenset([f.value])}
        if isinstance(f, In):
            return {name: frozenset(f.value)}
        return None
    if column == "offset":
        if not isinstance(f.value, int) or isinstance(f.value, bool):
            return None
        early = late = f.value
        after = 1  # offset > v starts at v + 1
    else:
        got = _millis(f.value)
        if got is None:
            return None
        early, late = got
        after = 0  # timestamp > v: the row's millisecond may be v's
    lo, hi = ("offset_lo", "offset_hi") if column == "offset" else ("ts_lo", "ts_hi")
    if isinstance(f, EqualTo):
        return {lo: early, hi: late + 1}
    if isinstance(f, GreaterThan):
        return {lo: early + after}
    if isinstance(f, GreaterThanOrEqual):
        return {lo: early}
    if isinstance(f, LessThan):
        return {hi: late if column == "offset" else late + 1}
    if isinstance(f, LessThanOrEqual):
        return {hi: late + 1}
    return None
