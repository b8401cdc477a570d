"""The JVM reader `kafka_log_jvm`: a Spark DataSource V2 whose Java sources ship in this package
(`kafkalog/*.java`), compiled on first use into a jar for `spark.jars`.

    import compaction.jvm
    spark = SparkSession.builder.config("spark.jars", compaction.jvm.reader_jar()).getOrCreate()
    spark.read.format("kafka_log_jvm").load("/path/to/kafka-logs").count()

The jar needs nothing but Spark and the JDK: it is compiled with `javac` against the jars of the
installed pyspark, and decompresses with what Spark ships (snappy-java, lz4-java, zstd-jni). It is
kept in a cache dir (`KAFKA_COMPACTION_READER_DIR`, default `~/.cache/kafka-compaction/reader`),
named by a digest of the sources, the option defaults and the pyspark version, so an upgrade of
either builds a new one and every later session reuses it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from compaction import settings
from compaction.errors import UsageError

SOURCES = Path(__file__).resolve().parent
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
# Java 17 is the oldest Java Spark 4 runs on.
RELEASE = "17"


def defaults() -> str:
    """The defaults of the reader's options, as the jar's `kafkalog/defaults.properties`."""
    values = {
        "maxBatchBytes": settings.JVM_MAX_BATCH_BYTES,
        "maxInflatedBatchBytes": settings.MAX_INFLATED_BATCH_BYTES,
        "batchRows": settings.JVM_BATCH_ROWS,
        "batchBytes": settings.JVM_BATCH_BYTES,
        "splitBytes": settings.FRAME_SPLIT_BYTES,
    }
    return "".join(f"{k}={v}\n" for k, v in values.items())


def cache_dir(env: dict | None = None) -> str:
    env = os.environ if env is None else env
    if env.get(settings.JVM_READER_DIR_ENV):
        return env[settings.JVM_READER_DIR_ENV]
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafka-compaction", "reader")


def _spark_jars() -> Path:
    """The jars of the installed pyspark, found without importing it (only spark/ imports pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("kafka_log_jvm: no pyspark installed, whose jars the reader is compiled against")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "jars"


def _key(java_files: list[Path]) -> str:
    h = hashlib.sha256(f"pyspark {importlib.metadata.version('pyspark')}\nrelease {RELEASE}\n".encode())
    h.update(defaults().encode())
    for path in [*java_files, SOURCES / SERVICE]:
        h.update(f"{path.relative_to(SOURCES)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def javac() -> str:
    """`javac` of JAVA_HOME, else on PATH; UsageError when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    found = shutil.which("javac")
    if found is None:
        raise UsageError(
            "kafka_log_jvm: no javac (neither $JAVA_HOME/bin/javac nor on PATH) to build the reader's jar; "
            "install a JDK 17 or later (a JRE has no javac), or read with the kafka_log data source"
        )
    return found


def reader_jar() -> str:
    """The path of the reader's jar, compiled once per sources, defaults and pyspark version."""
    java_files = sorted(SOURCES.glob("kafkalog/*.java"))
    out_dir = cache_dir()
    jar = os.path.join(out_dir, f"kafka-log-jvm-{_key(java_files)}.jar")
    if os.path.exists(jar):
        return jar
    compiler = javac()
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=out_dir) as tmp:
        classes = os.path.join(tmp, "classes")
        cmd = [compiler, "--release", RELEASE, "-nowarn", "-d", classes, "-cp", f"{_spark_jars()}/*"]
        proc = subprocess.run([*cmd, *map(str, java_files)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(f"kafka_log_jvm: javac failed ({compiler}):\n{proc.stderr[-4000:]}")
        partial = os.path.join(tmp, "reader.jar")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(Path(classes).rglob("*.class")):
                zf.write(path, path.relative_to(classes).as_posix())
            zf.writestr("kafkalog/defaults.properties", defaults())
            zf.write(SOURCES / SERVICE, SERVICE)
        os.replace(partial, jar)  # whole or absent: a concurrent build writes the same bytes
    return jar
