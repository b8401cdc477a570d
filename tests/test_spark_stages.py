"""The DataFrame steps of compaction/spark_stages.py on hand-made scan rows.

Few, fat tests (the JVM start dominates). Expected frames are worked out by hand below; the
`rewrite` wiring is covered end to end by test_job_e2e.py.

Hand-made scan rows (SCAN_SCHEMA: one row per distinct key per group; dirty_offset -1 = the key
has no record in the dirty section of that group):

    partition t-0: groups 0 (clean tail), 1, 2        partition t-1: group 3      partition u-0: group 4
    gid key   max dirty
    0   a     1   -1     a: clean in 0, updated in 1 and 2 -> latest 25, lookup to groups 0, 1, 2
    1   a     15  15
    2   a     25  25
    0   b     2   -1     b: only in the clean tail -> absent from the map and the lookup
    1   c     12  12     c: same bytes in t-0 and t-1 -> two map entries, kept apart
    3   c     7   7
    1   d     11  -1     d: dirty_offset -1 in group 1 (offset below first dirty), dirty in 2
    2   d     21  21
    3   e     3   -1     e: only non-dirty rows in t-1 -> absent
    4   a     9   9      a in another topic: its own entry
    plus a producer row (key null) and an error row (key null): never map entries.
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql import types as T

from compaction.spark_stages import SCAN_SCHEMA, group_lookup, offset_map

pytestmark = pytest.mark.spark

KEY_ROWS = [
    (0, b"a", 1, -1),
    (1, b"a", 15, 15),
    (2, b"a", 25, 25),
    (0, b"b", 2, -1),
    (1, b"c", 12, 12),
    (3, b"c", 7, 7),
    (1, b"d", 11, -1),
    (2, b"d", 21, 21),
    (3, b"e", 3, -1),
    (4, b"a", 9, 9),
]
GROUP_PARTITION = [(0, "t", 0), (1, "t", 0), (2, "t", 0), (3, "t", 1), (4, "u", 0)]

MAP_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("key", T.BinaryType()),
        T.StructField("latest_offset", T.LongType()),
        T.StructField("groups", T.ArrayType(T.IntegerType())),
    ]
)
EXPECTED_MAP = [
    ("t", 0, b"a", 25, [0, 1, 2]),
    ("t", 0, b"c", 12, [1]),
    ("t", 0, b"d", 21, [1, 2]),
    ("t", 1, b"c", 7, [3]),
    ("u", 0, b"a", 9, [4]),
]
LOOKUP_SCHEMA = T.StructType(
    [
        T.StructField("group_id", T.IntegerType()),
        T.StructField("key", T.BinaryType()),
        T.StructField("latest_offset", T.LongType()),
    ]
)
EXPECTED_LOOKUP = [
    (0, b"a", 25),
    (1, b"a", 25),
    (2, b"a", 25),
    (1, b"c", 12),
    (1, b"d", 21),
    (2, b"d", 21),
    (3, b"c", 7),
    (4, b"a", 9),
]


def _scan_rows(spark):
    names = [f.name for f in SCAN_SCHEMA.fields]

    def row(**values):
        return tuple(values.get(n) for n in names)

    rows = [row(group_id=g, key=k, max_offset=m, dirty_offset=d) for g, k, m, d in KEY_ROWS]
    rows.append(row(group_id=1, producer_id=42, producer_epoch=0, base_offset=10, last_offset=11,
                    attributes=0, records_count=2, max_timestamp=5))  # fmt: skip
    rows.append(row(group_id=2, error="CorruptRecordError: t-0/00000000000000000020.log: byte 0: bad"))
    return spark.createDataFrame(rows, SCAN_SCHEMA)


def test_offset_map_and_group_lookup(spark):
    scan_rows = _scan_rows(spark)
    group_partition = spark.createDataFrame(GROUP_PARTITION, "group_id int, topic string, partition int")

    om = offset_map(scan_rows, group_partition)
    assert om.columns == ["topic", "partition", "key", "latest_offset", "groups"]
    # `groups` comes from collect_set: its order is not defined, compare it sorted.
    actual = om.withColumn("groups", F.array_sort("groups"))
    expected = spark.createDataFrame(EXPECTED_MAP, MAP_SCHEMA)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)

    lookup = group_lookup(om)
    assert lookup.columns == ["group_id", "key", "latest_offset"]
    expected_lookup = spark.createDataFrame(EXPECTED_LOOKUP, LOOKUP_SCHEMA)
    assert_df_equality(lookup, expected_lookup, ignore_row_order=True, ignore_nullable=True)

    # Group 2 of the scan also sent an error row and group 1 a producer row: neither produced a
    # map entry (checked above); a group whose keys are all clean-tail keys gets no lookup row
    # at all (its rewrite task is driven by a sentinel row, see sentinel_rows).
    assert lookup.where("group_id = 0").count() == 1


def test_offset_map_empty_and_all_clean(spark):
    group_partition = spark.createDataFrame(GROUP_PARTITION, "group_id int, topic string, partition int")
    names = [f.name for f in SCAN_SCHEMA.fields]
    values = {"group_id": 0, "key": b"x", "max_offset": 4, "dirty_offset": -1}
    clean_only = [tuple(values.get(n) for n in names)]
    for rows in ([], clean_only):
        om = offset_map(spark.createDataFrame(rows, SCAN_SCHEMA), group_partition)
        expected = spark.createDataFrame([], MAP_SCHEMA)
        assert_df_equality(om, expected, ignore_row_order=True, ignore_nullable=True)
        assert_df_equality(group_lookup(om), spark.createDataFrame([], LOOKUP_SCHEMA),
                           ignore_row_order=True, ignore_nullable=True)  # fmt: skip
