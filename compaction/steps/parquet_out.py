"""One Kafka partition's rows written as one Parquet file (pyarrow), for `export`.

The file is `<out>/topic=<topic>/partition=<partition>/part-0.parquet`, without the `topic` and
`partition` columns (the path holds them, as Spark's `partitionBy` writes). It appears whole: on
a local disk it is written beside under a temporary name and renamed; on an object store a
single upload is complete or absent."""

from __future__ import annotations

import pyarrow.parquet as pq

from compaction.runtime.storage import TMP_SUFFIX, Storage
from compaction.steps.log_table import ReadOptions, Split, arrow_schema, read_split

PATH_COLUMNS = ("topic", "partition")


def partition_path(root: str, topic: str, partition: int) -> str:
    return f"{root.rstrip('/')}/topic={topic}/partition={partition}/part-0.parquet"


def write_split(split: Split, opts: ReadOptions, out_uri: str) -> dict:
    storage, root = Storage.for_uri(out_uri)
    path = partition_path(root, split.topic, split.partition)
    schema = arrow_schema(opts.include_headers)
    file_schema = schema.remove(schema.get_field_index("partition")).remove(schema.get_field_index("topic"))
    target = path + TMP_SUFFIX if storage.is_local else path
    if storage.is_local:  # an object store needs no directory, and gets no marker object
        storage.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    rows = 0
    with storage.fs.open_output_stream(target) as sink, pq.ParquetWriter(sink, file_schema) as writer:
        for batch in read_split(split, opts):
            writer.write_batch(batch.drop_columns(list(PATH_COLUMNS)))
            rows += batch.num_rows
    if storage.is_local:
        storage.rename(target, path)
    return {"topic": split.topic, "partition": split.partition, "rows": rows, "path": path}
