import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "helpers"))  # the shared helpers, importable by name

import kafka_python_shims  # noqa: E402

kafka_python_shims.install()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the DataFrame-step tests (JVM start dominates: keep them few)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["SPARK_TESTING"] = "1"
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("compaction-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
        .getOrCreate()
    )
    yield session
    session.stop()
