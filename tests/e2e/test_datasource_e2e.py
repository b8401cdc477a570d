"""`spark.read.format("kafka_log")` in a real SparkSession: the source's DataFrame against the
records kafka-python decodes (chispa), the compacted state against the latest record per key,
a user schema's columns against the full read's, pushed-down filters (the segments outside them
never opened) and `export` on moto's S3 read back with pyarrow and DuckDB, cut by key or not."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys

import pytest
from chispa import assert_df_equality
from e2ekit import REPO, decode_partition, latest_per_key, state_offsets_as_of
from e2ekit import decode_log_dir as kafka_python
from open_txn import last_stable_offset, open_txn_log_dir
from test_s3_e2e import (
    KEY,
    REGION,
    SECRET,
    _client,
    _download,
    _upload,
    s3_endpoint,  # noqa: F401 - moto's S3 server, a fixture of that module
)

import compaction
from compaction.tools.generator import generate_log_dir
from compaction.tools.generator_plan import TXN_ABORTED

pytestmark = [pytest.mark.spark]

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("frames"))
    generate_log_dir(
        root,
        topics=(("orders", 2), ("users", 1)),
        records=1500,
        keys=90,
        codec="mixed",
        headers=1,
        segment_bytes=15_000,
        tombstone_ratio=0.1,
        transactions=0.3,
        abort_ratio=0.3,
        seed=8,
    )
    return root


@pytest.fixture(scope="module")
def open_txn_dir(tmp_path_factory):
    """orders-0 ends inside transactions (a broker stopped mid-transaction); users-0 does not."""
    root = str(tmp_path_factory.mktemp("open-txn"))
    return (root, *open_txn_log_dir(root, topics=(("orders", 1), ("users", 1))))


@pytest.fixture(scope="module")
def kafka_log(spark):
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(compaction.KafkaLogDataSource)
    return lambda root, **opts: spark.read.format("kafka_log").options(**opts).load(root)


def expected_df(spark, records):
    schema = (
        "topic string, partition int, offset long, key binary, value binary, timestamp timestamp, "
        "headers array<struct<key:string,value:binary>>"
    )
    return spark.createDataFrame(
        [
            (
                t,
                p,
                o,
                k,
                v,
                None if ts is None else datetime.datetime.fromtimestamp(ts / 1000, UTC),
                [h for h in hs],
            )
            for t, p, o, k, v, ts, hs in records
        ],
        schema,
    )


def test_rows_are_what_kafka_python_decodes(spark, kafka_log, log_dir):
    df = kafka_log(log_dir, includeHeaders="true").select(
        "topic", "partition", "offset", "key", "value", "timestamp", "headers"
    )
    assert_df_equality(
        df, expected_df(spark, kafka_python(log_dir)), ignore_row_order=True, ignore_nullable=True
    )


def test_compacted_is_latest_per_key_of_committed_records(spark, kafka_log, log_dir):
    committed = {
        (r["partition"], r["offset"])
        for r in kafka_log(log_dir, subscribe="orders", **{"kafka.isolation.level": "read_committed"})
        .select("partition", "offset")
        .collect()
    }
    want = []
    for p in (0, 1):
        records = [
            r for r in decode_partition(os.path.join(log_dir, f"orders-{p}")) if (p, r.offset) in committed
        ]
        want += [
            ("orders", p, r.offset, r.key, r.value)
            for r in latest_per_key(records, 2**62).values()
            if r.value is not None
        ]
    got = kafka_log(log_dir, subscribe="orders", compacted="true").select(
        "topic", "partition", "offset", "key", "value"
    )
    schema = "topic string, partition int, offset long, key binary, value binary"
    assert_df_equality(got, spark.createDataFrame(want, schema), ignore_row_order=True, ignore_nullable=True)


def test_compacted_cut_by_key_is_the_single_split_state(spark, kafka_log, log_dir, open_txn_dir):
    """minPartitions cuts each partition's compacted state by key, one input partition per
    bucket: the same rows as one input partition per Kafka partition (transactions, aborts,
    tombstones; a transaction open at the log end)."""
    for root in (log_dir, open_txn_dir[0]):
        whole = kafka_log(root, compacted="true", includeHeaders="true")
        cut = kafka_log(root, compacted="true", includeHeaders="true", minPartitions="9")
        assert cut.rdd.getNumPartitions() >= 9 > whole.rdd.getNumPartitions()
        assert_df_equality(cut, whole, ignore_row_order=True)


@pytest.mark.parametrize("compacted", ["false", "true"])
def test_a_user_schema_reads_only_its_columns(spark, kafka_log, log_dir, compacted):
    """`.schema(...)` with some of the source's columns: the rows of the full read in those
    columns, and the batches handed to Spark hold those columns alone."""
    full = kafka_log(log_dir, compacted=compacted, includeHeaders="true")
    for ddl, columns in [
        ("offset long", ["offset"]),
        ("key binary, OFFSET long, timestamp timestamp", ["key", "OFFSET", "timestamp"]),
        ("headers array<struct<key:string,value:binary>>, value binary, partition int", None),
    ]:
        narrow = spark.read.format("kafka_log").schema(ddl).options(compacted=compacted).load(log_dir)
        columns = columns or [f.name for f in narrow.schema.fields]
        assert narrow.columns == columns
        assert_df_equality(narrow, full.select(*columns), ignore_row_order=True, ignore_nullable=True)
    assert (
        spark.read.format("kafka_log").schema("offset long").load(log_dir).count()
        == kafka_log(log_dir).count()
    )

    from pyspark.sql.types import StructType

    source = compaction.KafkaLogDataSource({"path": log_dir, "compacted": compacted})
    reader = source.reader(StructType.fromDDL("value binary, Offset long"))
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    assert batches and {tuple(b.schema.names) for b in batches} == {("value", "Offset")}


def test_a_user_schema_spark_would_misread_fails_naming_the_column(spark, kafka_log, log_dir):
    for ddl, message in [
        ("offst long", r"kafka_log has no column 'offst'; its columns: key binary, value binary"),
        ("offset int", r"column offset is bigint in kafka_log, not int; its columns: key binary"),
        # Trusted by Spark, `value IS NULL` would count no tombstone.
        ("value binary not null", r"column value is declared NOT NULL"),
        ("headers array<struct<key:string not null,value:binary>>", r"column headers is declared NOT NULL"),
    ]:
        with pytest.raises(Exception, match=message):
            spark.read.format("kafka_log").schema(ddl).load(log_dir).count()


def test_a_read_of_no_partition_is_empty(spark, kafka_log, log_dir):
    assert kafka_log(log_dir, subscribePattern="no-such-topic").count() == 0
    assert kafka_log(log_dir, subscribePattern="no-such-topic", compacted="true").count() == 0


def test_pushed_filters_read_only_matching_segments(spark, kafka_log, log_dir):
    df = kafka_log(log_dir).where("topic = 'orders' and partition = 1 and offset >= 1000 and offset < 1010")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(1000, 1010))
    from compaction.spark.datasource import PushdownKafkaLogReader
    from compaction.steps.log_table import ReadOptions

    pushed = kafka_log(log_dir, pushFilters="true")
    assert pushed.where("topic = 'orders' and partition = 0 and offset < 10").count() == 10
    reader = PushdownKafkaLogReader(ReadOptions.parse({"path": log_dir}))
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

    filters = [
        EqualTo(("topic",), "orders"),
        EqualTo(("partition",), 1),
        GreaterThanOrEqual(("offset",), 1000),
        LessThan(("offset",), 1010),
    ]
    assert list(reader.pushFilters(filters)) == filters  # Spark still applies them to the rows
    parts = reader.partitions()
    assert [(p.value.topic, p.value.partition) for p in parts] == [("orders", 1)]
    assert len(parts[0].value.segments) == 1


def test_timestamp_filter_then_count_per_key_on_the_same_dataframe(spark, kafka_log, log_dir):
    """The default reader pushes nothing down: a DataFrame queried with a filter, then without
    one, counts every row the second time (Spark 4.1 reuses the reader of a query's pushdown for a
    later query of the same DataFrame that has no filter)."""
    df = kafka_log(log_dir)
    ts = sorted(r.timestamp for r in df.select("timestamp").collect())
    middle = ts[len(ts) // 2]
    assert df.where(df.timestamp >= middle).count() == sum(t >= middle for t in ts)
    per_key = {r.key: r["count"] for r in df.groupBy("key").count().collect()}
    assert sum(per_key.values()) == len(ts)


def test_spark_reuses_a_pushed_reader_so_pushdown_stays_opt_in(spark, kafka_log, log_dir):
    """Why `pushFilters` is not the default: with it, Spark 4.1 reuses the reader of a query whose
    filters were pushed for a later query of the same DataFrame that has none, and that query
    misses rows. When a Spark release stops doing so this fails: pushdown can then be the default."""
    total = kafka_log(log_dir).count()
    df = kafka_log(log_dir, pushFilters="true")
    assert df.where("topic = 'orders' and partition = 0 and offset < 10").count() == 10
    assert df.count() < total


def test_a_transaction_open_at_the_end(spark, kafka_log, open_txn_dir):
    """read_committed stops at the last stable offset, as Spark's Kafka source's consumer does;
    the compacted state leaves the open transaction's records out, keeps what follows it."""
    root, m, cut = open_txn_dir
    decoded = decode_partition(os.path.join(root, "orders-0"))
    lso = last_stable_offset(m, cut)
    assert lso < max(r.offset for r in decoded)
    schema = "offset long, key binary, value binary"
    committed = kafka_log(root, subscribe="orders", **{"kafka.isolation.level": "read_committed"})
    want = [(r.offset, r.key, r.value) for r in decoded if r.offset < lso and m.txn[r.offset] != TXN_ABORTED]
    assert_df_equality(
        committed.select("offset", "key", "value"),
        spark.createDataFrame(want, schema),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    state = state_offsets_as_of(m, cut)
    by_offset = {r.offset: r for r in decoded}
    want = [(o, k, by_offset[o].value) for k, o in state.items()]
    assert_df_equality(
        kafka_log(root, subscribe="orders", compacted="true").select("offset", "key", "value"),
        spark.createDataFrame(want, schema),
        ignore_row_order=True,
        ignore_nullable=True,
    )


@pytest.mark.slow
def test_export_on_s3_reads_back_in_pyarrow_and_duckdb(tmp_path, s3_endpoint):  # noqa: F811
    """`export` from a bucket to a bucket (moto's S3 server), as of an offset: the Parquet read
    back with pyarrow straight from S3 and with DuckDB from a download, both equal to the latest
    committed record per key that kafka-python decodes below the cut."""
    duckdb = pytest.importorskip("duckdb")
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    local = str(tmp_path / "logs")
    manifest = generate_log_dir(
        local,
        topics=(("orders", 2),),
        records=1200,
        keys=70,
        codec="mixed",
        segment_bytes=12_000,
        tombstone_ratio=0.1,
        transactions=0.3,
        abort_ratio=0.4,
        seed=21,
    )
    client = _client(s3_endpoint)
    _upload(client, "src", local)
    client.create_bucket(Bucket="dst")
    cut = {0: 700, 1: manifest.partitions[("orders", 1)].log_end_offset}
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYSPARK_PYTHON": sys.executable,
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction",
            "export",
            "--log-dir",
            f"s3://{KEY}:{SECRET}@src/logs",
            "--out",
            f"s3://{KEY}:{SECRET}@dst/state",
            "--as-of-offset",
            "orders:0=700",
            "--master",
            "local[2]",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    want = set()
    for p in (0, 1):
        decoded = {r.offset: r for r in decode_partition(os.path.join(local, f"orders-{p}"))}
        state = state_offsets_as_of(manifest.partitions[("orders", p)], cut[p])
        want |= {(p, o, k, decoded[o].value) for k, o in state.items() if decoded[o].key == k}
        assert len(want) == sum(1 for w in want if w[0] < p) + len(state)

    fs = pafs.S3FileSystem(
        access_key=KEY, secret_key=SECRET, endpoint_override=s3_endpoint, scheme="http", region=REGION
    )
    table = ds.dataset("dst/state", filesystem=fs, partitioning="hive").to_table()
    got = {(r["partition"], r["offset"], r["key"], r["value"]) for r in table.to_pylist()}
    assert got == want
    assert set(table.column("topic").to_pylist()) == {"orders"}

    down = str(tmp_path / "down")
    _download(client, "dst", down)
    rows = duckdb.sql(
        f"SELECT partition, \"offset\", key, value FROM read_parquet('{down}/state/**/*.parquet', "
        "hive_partitioning = true)"
    ).fetchall()
    assert {(int(p), o, bytes(k), bytes(v)) for p, o, k, v in rows} == want


def test_export_cli_locally(tmp_path, open_txn_dir):
    """`export` of the state as of the log end, where a transaction is still open: the latest
    committed record of each key, the open transaction's records left out."""
    root, m, cut = open_txn_dir
    out = str(tmp_path / "state")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "compaction",
            "export",
            "--log-dir",
            root,
            "--out",
            out,
            "--topics",
            "orders",
            "--min-partitions",
            "3",
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import pyarrow.dataset as ds

    table = ds.dataset(out, partitioning="hive").to_table()
    assert set(table.column("topic").to_pylist()) == {"orders"}
    assert sorted(os.listdir(os.path.join(out, "topic=orders", "partition=0"))) == [
        f"part-{k}.parquet" for k in range(3)
    ]
    decoded = {r.offset: r for r in decode_partition(os.path.join(root, "orders-0"))}
    want = {(o, k, decoded[o].value) for k, o in state_offsets_as_of(m, cut).items()}
    assert {(r["offset"], r["key"], r["value"]) for r in table.to_pylist()} == want


def test_export_cut_by_key_is_the_uncut_export(spark, kafka_log, tmp_path, log_dir):
    """`export` of a partition as several tasks (one bucket of its keys each, one file each):
    read back with pyarrow and DuckDB, the same rows as one task per partition writes."""
    duckdb = pytest.importorskip("duckdb")
    import pyarrow.dataset as ds

    from compaction.spark.export import run_export
    from compaction.steps.log_table import ReadOptions

    opts = ReadOptions.parse({"path": log_dir, "compacted": "true", "includeHeaders": "true"})
    got = {}
    for tasks in (1, 7):
        out = str(tmp_path / f"state-{tasks}")
        files = run_export(opts, out, None, tasks)
        per_partition = {(f["topic"], f["partition"]) for f in files}
        assert len(per_partition) == 3 and (len(files) > 3) == (tasks > 1)
        table = ds.dataset(out, partitioning="hive").to_table()
        rows = sorted(
            (r["topic"], r["partition"], r["offset"], r["key"], r["value"], str(r["headers"]))
            for r in table.to_pylist()
        )
        assert len(rows) == sum(f["rows"] for f in files) > 0
        duck = duckdb.sql(
            f"SELECT topic, partition, \"offset\", key, value FROM read_parquet('{out}/**/*.parquet', "
            "hive_partitioning = true)"
        ).fetchall()
        assert sorted(
            (t, int(p), o, bytes(k), None if v is None else bytes(v)) for t, p, o, k, v in duck
        ) == [r[:5] for r in rows]
        got[tasks] = rows
    assert got[7] == got[1]
    whole = kafka_log(log_dir, compacted="true", includeHeaders="true").count()
    assert len(got[1]) == whole
