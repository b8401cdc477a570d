"""One split's rows (a Kafka partition's, or one bucket of its keys) written as one Parquet file
(pyarrow), for `export`.

The file is `<out>/topic=<topic>/partition=<partition>/part-<bucket>.parquet`, without the `topic`
and `partition` columns (the path holds them, as Spark's `partitionBy` writes). It appears whole: on
a local disk it is written beside under a temporary name and renamed; on an object store a
single upload is complete or absent."""

from __future__ import annotations

from dataclasses import replace

import pyarrow.parquet as pq

from compaction.runtime.storage import TMP_SUFFIX, Storage
from compaction.steps.log_table import ReadOptions, Split, arrow_schema, read_split

PATH_COLUMNS = ("topic", "partition")


def partition_path(root: str, topic: str, partition: int, bucket: int = 0) -> str:
    return f"{root.rstrip('/')}/topic={topic}/partition={partition}/part-{bucket}.parquet"


def write_split(split: Split, opts: ReadOptions, out_uri: str) -> dict:
    storage, root = Storage.for_uri(out_uri)
    path = partition_path(root, split.topic, split.partition, split.bucket)
    columns = tuple(n for n in arrow_schema(opts.include_headers).names if n not in PATH_COLUMNS)
    file_schema = arrow_schema(opts.include_headers, columns)
    target = path + TMP_SUFFIX if storage.is_local else path
    if storage.is_local:  # an object store needs no directory, and gets no marker object
        storage.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    rows = 0
    with storage.fs.open_output_stream(target) as sink, pq.ParquetWriter(sink, file_schema) as writer:
        for batch in read_split(split, replace(opts, columns=columns)):
            writer.write_batch(batch)
            rows += batch.num_rows
    if storage.is_local:
        storage.rename(target, path)
    return {"topic": split.topic, "partition": split.partition, "rows": rows, "path": path}
