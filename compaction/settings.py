"""Every tunable of a round, resolved once on the driver.

A tunable comes from up to three places, looked at in this order, the first one set winning:

1. the command line (`compaction/cli/options.py`, named after Kafka's configs; held as parsed in
   `Settings.options`);
2. a Spark conf (`--conf spark.kafka.compaction.NAME=...`, or `spark.executorEnv.NAME` for the
   knobs that describe the executors' hosts);
3. the driver's environment (`NAME=...` exported before the launcher);

else its default. An empty value counts as unset. `Settings.resolve(args, spark_conf, environ)`
is the only place that reads them: the round resolves its settings from the options and the
environment when it starts (the driver's own knobs: listing threads, progress interval, the
master) and once more with the session's conf when Spark is up (`with_spark_conf`). Executors
never read the environment for a tunable: what their tasks need (`WorkerSettings`) travels inside
the stage's task function, and `runtime.worker.prepare_worker` applies it to the worker process.

The launcher's own environment (`cli/launcher.py` `ENVIRONMENT`, and `KAFKA_COMPACTION_PYTHON` of
the Airflow operator) configures the process that starts spark-submit, not the round: it stays in
the environment and is listed with these in the "Settings" table of docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from compaction.errors import UsageError

CONF_PREFIX = "spark.kafka.compaction."
EXECUTOR_ENV = "spark.executorEnv."

# Bytes of a task's scans (decompressed records + columns) kept for its rewrite, so that each
# segment is decompressed and walked once; beyond it segments are scanned again. One default
# segment group per task.
SCAN_REUSE_MAX_BYTES = 1 << 30
# The codecs whose decompressed records a kept scan holds; the rewrite decompresses the other
# compressed segments again. Held records are fresh memory, touched once: where page faults are
# dear, that costs more than decompressing lz4 or snappy again, and less than zstd again (gzip
# decompresses slower still); where they are cheap, holding wins on every codec (BENCHMARKS.md,
# "Slow windows": `lz4` 1.15x faster not held in one window, 0.89x in another; `zstd` 0.86x).
# Hence all of them by default, lz4 and snappy left out by the operator of such a host.
# Uncompressed segments' scans are kept by their columns either way.
# the names Kafka gives its codecs (format/compression.py's CODEC_NAMES, which this layer cannot import)
COMPRESSION_CODECS = ("gzip", "snappy", "lz4", "zstd")
SCAN_REUSE_CODECS = frozenset(COMPRESSION_CODECS)
# A partition is compacted whole in one task (scan, offset map, producer state and rewrite in one
# process: spark/stages.py `compact_partition`) unless it has more than one output group and is
# bigger than this, or bigger than its share of the cores: then it is cut into ranges, one per
# group, scanned and rewritten in parallel (steps/ranges.py). 1 GiB (one default segment group)
# bounds what a whole-partition task holds by its keys.
PARTITION_TASK_MAX_BYTES = 1 << 30
PROGRESS_SECONDS = 5.0
# How often a running task rewrites its progress file (runtime/task_progress.py): the driver's
# progress line is as fresh as this. On a local or mounted disk a beat is a rename; on an object
# store it is one PUT per task, so there the beat is slower (a round of 200 tasks: 20 PUTs a second
# instead of 200).
PROGRESS_BEAT_SECONDS = 1.0
PROGRESS_BEAT_OBJECT_STORE_SECONDS = 10.0
# The compiled kernels' store by default: beside the first log dir, on the store every executor
# reads and writes already, and that outlives the executors (runtime/kernel_store.py).
KERNEL_CACHE_NAME = ".kafka-compaction-kernels"
# An archive of another key (an older release, numba, Python, or a CPU type gone from the cluster)
# untouched this long is removed when a new key is published: a store kept for years holds the
# keys in use, and a key still in use but removed costs one compile before it is published again.
KERNEL_CACHE_KEEP_SECONDS = 30 * 24 * 3600
# The most bytes one compressed batch's records may inflate to (`--max-inflated-batch-bytes`);
# a batch beyond it fails its partition. Kafka's readers stream a batch's records and never hold
# them; the scan holds a batch inflated, so what a batch may claim is bounded here. 1 GiB is
# 1024 times the default `max.message.bytes` (a batch's compressed size): more than deflate can
# reach at all (1032:1 at best, and only on a run of one byte), ~50 times what zstd makes of
# JSON or logs, and 50 times a 20 MiB `max.message.bytes` at that ratio.
MAX_INFLATED_BATCH_BYTES = 1 << 30
# Kafka's producer.id.expiration.ms default (one day): a broker that loads a log expires producers
# idle that long, so the round does too unless `--producer-id-expiration-ms` or `--config` says
# otherwise (docs/kafka-rules.md#producer-state).
PRODUCER_ID_EXPIRATION_MS = 86_400_000
# A range cleaned by another task than its group's rewriter (steps/range_task.py) is copied into
# the group's `.cleaned` file this many bytes at a time (whole batches): what the rewriter holds of
# a part at once.
PART_CHUNK_BYTES = 32 << 20
# How a task reads its source segments and writes its cleaned ones (`--read-mode`, `--write-mode`;
# runtime/segment_io.py).
ReadMode = Literal["buffered", "direct", "mmap"]
WriteMode = Literal["direct", "buffered"]
READ_MODES: tuple[ReadMode, ...] = get_args(ReadMode)
WRITE_MODES: tuple[WriteMode, ...] = get_args(WriteMode)
# The driver's log lines (`--log-format`; cli/logs.py): text, or one JSON object a line.
LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
# With `--read-mode direct`, smaller segments are mapped: one syscall, nothing to flush.
DIRECT_MIN_BYTES = 8 << 20
# Segments a task keeps in the page cache from scan to rewrite (`--read-mode buffered`).
CACHE_MAX_BYTES = 1 << 30
# Threads a task compresses its rewritten batches on (kernels/codec_threads.py). The codec
# libraries release the GIL, so a task whose round leaves a core idle (one big partition) uses a
# second one for its compression; on a busy executor the extra thread only shares its task's core.
# Decompression stays on the task's thread: the scan walks each batch's records right after
# decompressing them, while they are in that core's cache.
CODEC_THREADS = 2
# A task of the ranges stage that waits gives up on a peer whose heart has not beaten for this
# long (runtime/exchange.py): long enough for a kernel call that holds the GIL (the heartbeat
# thread needs it) and for a retried task's new executor to start; short against a round that
# would otherwise never end.
PEER_WAIT_SECONDS = 60.0
# The retries of a `DeleteObject` on S3 (runtime/s3.py: a replaced segment's removal, a rename's
# delete) that the store answered `503 SlowDown` or another transient error: botocore's standard
# mode, these after the first request, with its exponential backoff (up to ~7 s in all), so that a
# store shedding load for a moment does not fail the round's commit.
S3_DELETE_RETRIES = 3


# Partitions `--output-dir` copies at once on the driver: each thread holds one source segment
# (up to segment.bytes, 1 GiB by default), so the driver's memory bounds it, not its cores.
ARCHIVE_COPY_THREADS = 4


@dataclass
class JobOptions:
    """What the command line asks of a round, as `cli/options.py` parsed and checked it: the
    selection, the Kafka configs (job-wide, per topic, the broker's defaults) and the run's modes.
    The steps read it; `Settings.resolve` takes the tunables among it."""

    log_dirs: list[str]
    topics: str | None = None
    now_ms: int = 0
    now_ms_given: bool = False  # --now-ms given (else now_ms is the wall clock)
    dry_run: bool = False
    plan_only: bool = False
    recover_only: bool = False
    report: str | None = None
    report_html: str | None = None
    ignore_broker_lock: bool = False
    master: str | None = None
    kafka_config: dict[str, object] = field(default_factory=dict)
    topic_config: dict[str, dict[str, object]] = field(default_factory=dict)
    tasks_per_core: int = 2
    read_mode: ReadMode = "buffered"
    write_mode: WriteMode = "direct"
    # Broker-level defaults (server.properties names, keyed by their topic-level synonym): below the
    # job-wide flags and the per-topic overrides, as a broker's own config is below a topic's.
    broker_config: dict[str, object] = field(default_factory=dict)
    io_max_bytes_per_second: float | None = None  # read + written bytes/s of the job's tasks on a host
    log_format: LogFormat = "text"
    metrics_file: str | None = None
    erase_keys: str | None = None  # a key file (compaction/steps/erase.py); only its path is kept here
    erase_only: bool = False  # erase, without the round's compaction decisions
    max_inflated_batch_bytes: int = MAX_INFLATED_BATCH_BYTES  # a batch inflating past it fails its partition
    # --producer-id-expiration-ms, else the --config broker's producer.id.expiration.ms, else Kafka's
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    # --output-dir (compaction/archive.py): the compacted copy's log dir; the log dirs are then only read.
    output_dir: str | None = None
    as_of_time_ms: int | None = None  # --as-of-time, epoch ms (policy/cut.py)
    as_of_offsets: dict[str, int] = field(default_factory=dict)  # --as-of-offset: "topic:partition" -> offset
    purge_noncurrent_versions: bool = False  # S3: delete the old versions of the objects a round replaces
    partitions: tuple[str, ...] | None = None  # --partitions: `<topic>-<n>` names, with --topics' match
    allow_empty: bool = False  # a selection of no partition is not a usage error
    metrics_name: str | None = None  # the `round` label of --metrics-file's series (default: the log dirs)

    def wants(self, topic: str, partition: int) -> bool:
        """Whether the selection (--topics and --partitions) takes the partition."""
        if self.topics is not None and not re.fullmatch(self.topics, topic):
            return False
        return self.partitions is None or f"{topic}-{partition}" in self.partitions

    def config_for(self, topic: str) -> dict[str, object]:
        """Kafka's topic > broker > default, with the job-wide flags between topic and broker."""
        return {**self.broker_config, **self.kafka_config, **self.topic_config.get(topic, {})}


def default_discovery_threads() -> int:
    """Listing and planning are I/O (os and pyarrow calls release the GIL): 4 threads a core, at most 16."""
    return min(16, 4 * (os.cpu_count() or 1))


def _knob(
    default: Any,
    parse: Callable[[str], Any] | None,
    doc: str,
    *,
    option: str = "",
    conf: str = "",
    env: str = "",
) -> Any:
    """A tunable: its default, how its text parses (None: never given as text), its docstring line
    and its source names (the option's flag, the Spark conf, the environment variable; "" where it
    has none)."""
    return field(
        default=default, metadata={"doc": doc, "parse": parse, "option": option, "conf": conf, "env": env}
    )


def _threads(text: str) -> int:
    return max(1, int(text))


def _flag(text: str) -> bool:
    return text.lower() != "false"


def _codecs(text: str) -> frozenset[str]:
    """A comma-separated list of codec names ("none": no codec)."""
    names = frozenset(n.strip().lower() for n in text.split(",") if n.strip()) - {"none"}
    if not names <= set(COMPRESSION_CODECS):
        raise ValueError(text)
    return names


@dataclass(frozen=True)
class WorkerSettings:
    """What a task's Python worker runs with: carried inside the stage's task function, applied to
    the process by `runtime.worker.prepare_worker` when the task starts."""

    scan_reuse_max_bytes: int = _knob(
        SCAN_REUSE_MAX_BYTES,
        int,
        "bytes of segment scans a task keeps for its rewrite instead of scanning again (0: none)",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_SCAN_REUSE_MAX_BYTES",
        env="KAFKA_COMPACTION_SCAN_REUSE_MAX_BYTES",
    )
    scan_reuse_codecs: frozenset[str] = _knob(
        SCAN_REUSE_CODECS,
        _codecs,
        "the codecs whose decompressed records a kept scan holds (comma-separated names of "
        f"{', '.join(COMPRESSION_CODECS)}, or none); the rewrite decompresses the other "
        "compressed segments again",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_SCAN_REUSE_CODECS",
        env="KAFKA_COMPACTION_SCAN_REUSE_CODECS",
    )
    cache_max_bytes: int = _knob(
        CACHE_MAX_BYTES,
        int,
        "bytes of segments a task keeps in the page cache from their scan to their "
        "rewrite (`--read-mode buffered`); the others are read from the disk twice, with O_DIRECT",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_CACHE_MAX_BYTES",
        env="KAFKA_COMPACTION_CACHE_MAX_BYTES",
    )
    direct_min_bytes: int = _knob(
        DIRECT_MIN_BYTES,
        int,
        "local segments from this size on are read with O_DIRECT (`--read-mode "
        "direct`); smaller ones are mapped",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_DIRECT_MIN_BYTES",
        env="KAFKA_COMPACTION_DIRECT_MIN_BYTES",
    )
    io_max_bytes_per_second: float | None = _knob(
        None,
        float,
        "bytes read + written per second by the job's tasks on one host (None: unthrottled)",
        option="--io-max-bytes-per-second",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_IO_MAX_BYTES_PER_SECOND",
        env="KAFKA_COMPACTION_IO_MAX_BYTES_PER_SECOND",
    )
    io_throttle_file: str | None = _knob(
        None,
        str,
        "the file through which the tasks of a host share their I/O budget (None: one per "
        "user in /dev/shm, else /tmp)",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_IO_THROTTLE_FILE",
        env="KAFKA_COMPACTION_IO_THROTTLE_FILE",
    )
    kernel_cache_dir: str | None = _knob(
        None,
        str,
        "where the compiled kernels are kept between runs for executors that start with an "
        "empty temp dir (a directory URI; None: `.kafka-compaction-kernels` beside the first log dir; "
        "`off`: none)",
        conf=CONF_PREFIX + "kernelCacheDir",
        env="KAFKA_COMPACTION_KERNEL_CACHE_DIR",
    )
    codec_threads: int = _knob(
        CODEC_THREADS,
        int,
        "threads a task compresses its rewritten batches on (1: the task's own thread only)",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_CODEC_THREADS",
        env="KAFKA_COMPACTION_CODEC_THREADS",
    )
    part_chunk_bytes: int = _knob(
        PART_CHUNK_BYTES,
        int,
        "bytes of another task's cleaned range that a ranges task copies into a "
        "group's `.cleaned` file at a time (whole batches; at least one)",
        conf=CONF_PREFIX + "partChunkBytes",
    )
    progress_beat_object_store_seconds: float = _knob(
        PROGRESS_BEAT_OBJECT_STORE_SECONDS,
        float,
        "seconds between a task's progress files when the progress directory is on an object store "
        f"(one PUT each; on a disk: every {PROGRESS_BEAT_SECONDS:g} s)",
        conf=CONF_PREFIX + "progressBeatObjectStoreSeconds",
    )
    profile_dir: str | None = _knob(
        None,
        str,
        "a directory on the executor's host where each whole-partition task writes its cProfile",
        conf=EXECUTOR_ENV + "KAFKA_COMPACTION_PROFILE_DIR",
        env="KAFKA_COMPACTION_PROFILE_DIR",
    )


@dataclass(frozen=True)
class Settings:
    """The round's tunables (see the module docstring for where each comes from)."""

    options: JobOptions | None = _knob(
        None,
        None,
        "the parsed command line (`JobOptions`: every option of the Options table)",
        option="every option",
    )
    spark_master: str | None = _knob(
        None,
        str,
        "the master of a round not started by the launcher (which gives spark-submit its own "
        "`--master`); when set, it replaces the master spark-submit was given",
        env="SPARK_MASTER",
    )
    discovery_threads: int | None = _knob(
        None,
        _threads,
        "threads listing, planning and committing partitions on the driver (1: serial; "
        "None: 4 a core, at most 16)",
        env="KAFKA_COMPACTION_DISCOVERY_THREADS",
    )
    archive_copy_threads: int = _knob(
        ARCHIVE_COPY_THREADS,
        _threads,
        "partitions `--output-dir` copies at once into its staging dir on "
        "the driver (each holds one source segment in memory)",
        env="KAFKA_COMPACTION_ARCHIVE_COPY_THREADS",
    )
    progress_seconds: float = _knob(
        PROGRESS_SECONDS,
        float,
        "seconds between progress lines when stderr is not a terminal",
        env="KAFKA_COMPACTION_PROGRESS_SECONDS",
    )
    partition_task_max_bytes: int = _knob(
        PARTITION_TASK_MAX_BYTES,
        int,
        "the largest partition compacted whole in one task; bigger ones are cut into ranges",
        conf=CONF_PREFIX + "partitionTaskMaxBytes",
    )
    exchange_dir: str | None = _knob(
        None,
        str,
        "where the ranges' tasks hand each other their key summaries (None: a temporary dir "
        "in local mode, else beside the first log dir)",
        conf=CONF_PREFIX + "exchangeDir",
    )
    max_inflated_batch_bytes: int = _knob(
        MAX_INFLATED_BATCH_BYTES,
        int,
        "the most bytes one compressed batch's records may inflate to; a batch beyond it fails its partition",
        option="--max-inflated-batch-bytes",
    )
    peer_wait_seconds: float = _knob(
        PEER_WAIT_SECONDS,
        float,
        "how long a ranges task waits for a peer whose heartbeat stopped (lost, "
        "or not started) before it leaves its work to the follow-up stages",
        conf=CONF_PREFIX + "peerWaitSeconds",
    )
    no_executor_seconds: float = _knob(
        600.0,
        float,
        "how long the round's Spark jobs wait with no executor alive before they are "
        "cancelled and the round fails (0: forever)",
        conf=CONF_PREFIX + "noExecutorSeconds",
    )
    warmup: bool = _knob(
        True,
        _flag,
        "warm the Python workers up while the driver plans (`false`: off)",
        conf=CONF_PREFIX + "warmup",
    )
    worker: WorkerSettings = field(default_factory=WorkerSettings)  # what the tasks run with
    # its knobs' variables
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def resolve(
        cls, args: JobOptions | None = None, spark_conf: Any = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """The settings of a round: `args` the parsed options (`JobOptions`, or None), `spark_conf`
        the session's conf (anything with `.get(key, default)`; None before Spark is up: the conf
        knobs keep their defaults), `environ` the driver's environment (default `os.environ`). A
        value that does not parse is a `UsageError` naming where it came from."""
        environ = {k: v for k, v in (os.environ if environ is None else environ).items() if k in _ENV_NAMES}
        given: dict[str, Any] = {
            "io_max_bytes_per_second": getattr(args, "io_max_bytes_per_second", None),
            "max_inflated_batch_bytes": getattr(args, "max_inflated_batch_bytes", None),
        }
        if environ.get("SPARK_HOME_SUBMITTED"):  # the launcher's spark-submit got the master already
            environ = {k: v for k, v in environ.items() if k != "SPARK_MASTER"}
        values: dict[str, Any] = {
            name: given[name] if given.get(name) is not None else _value(f, spark_conf, environ)
            for name, f in knobs()
            if name != "options"
        }
        worker = WorkerSettings(**{f.name: values.pop(f.name) for f in dataclasses.fields(WorkerSettings)})
        log_dirs = getattr(args, "log_dirs", None)
        if worker.kernel_cache_dir is None and log_dirs:
            worker = dataclasses.replace(worker, kernel_cache_dir=beside(log_dirs[0], KERNEL_CACHE_NAME))
        return cls(options=args, worker=worker, environ=environ, **values)

    def with_spark_conf(self, spark_conf: Any) -> Settings:
        """The same round's settings once its SparkContext is up: its conf knobs read too."""
        return Settings.resolve(self.options, spark_conf, self.environ)

    @property
    def threads(self) -> int:
        """`discovery_threads`, or its default for this machine."""
        return self.discovery_threads or default_discovery_threads()


def _value(f: dataclasses.Field, spark_conf: Any, environ: Mapping[str, str]) -> Any:
    """The field's Spark conf, else its environment variable, parsed; else its default."""
    for kind, name in (("conf", f.metadata["conf"]), ("env", f.metadata["env"])):
        if not name or (kind == "conf" and spark_conf is None):
            continue
        raw = spark_conf.get(name, None) if kind == "conf" else environ.get(name)
        if raw is None or str(raw).strip() == "":
            continue
        try:
            return f.metadata["parse"](str(raw).strip())
        except ValueError:
            where = f"--conf {name}" if kind == "conf" else f"environment variable {name}"
            raise UsageError(f"{where}={raw!r}: not a valid value ({f.metadata['doc']})") from None
    return f.default


def beside(log_dir: str, name: str) -> str:
    """The URI of `name` in the directory that holds `log_dir` (a path or a URI, whose scheme and
    query are kept: `s3://bucket/logs?region=r` -> `s3://bucket/NAME?region=r`)."""
    if "://" not in log_dir:
        return os.path.join(os.path.dirname(os.path.abspath(log_dir)), name)
    parts = urllib.parse.urlsplit(log_dir)
    parent = posixpath.dirname(parts.path.rstrip("/")) or "/"
    return urllib.parse.urlunsplit(parts._replace(path=posixpath.join(parent, name)))


def knobs() -> list[tuple[str, dataclasses.Field]]:
    """(name, field) of every tunable, `WorkerSettings`' included (docs/configuration.md's table lists them)."""
    own = [(f.name, f) for f in dataclasses.fields(Settings) if f.name not in ("worker", "environ")]
    return own + [(f.name, f) for f in dataclasses.fields(WorkerSettings)]


_ENV_NAMES = frozenset(
    {f.metadata["env"] for _, f in knobs() if f.metadata.get("env")} | {"SPARK_HOME_SUBMITTED"}
)

# The `kafka_log` data source and `export` (steps/log_table.py): consecutive segments smaller
# than this are read by one input partition (each Spark task costs its scheduling and set-up);
# record batches handed to Spark hold at most this many rows and about this many value bytes
# (Arrow's binary columns have int32 offsets; smaller batches keep a task's memory flat).
FRAME_SPLIT_BYTES = 128 << 20
FRAME_BATCH_ROWS = 1 << 16
FRAME_BATCH_BYTES = 64 << 20
# The `kafka_log` source hands Spark those batches in slices of at most this many rows (no copy
# here): Spark's Python worker and JVM move small Arrow batches to rows faster than big ones
# (`bench/dataframe.py --floor` feeds Spark ready batches). `export` writes the whole batches.
FRAME_SPARK_BATCH_ROWS = 8192
# The compacted state of a Kafka partition over FRAME_COMPACTED_SPLIT_BYTES is read as
# FRAME_COMPACTED_BUCKETS input partitions, each mapping and emitting the keys of one bucket
# (`log_table.cut_compacted`); each scans the whole partition, so a bucket past the cores
# that run them at once only repeats that scan; more on request (`minPartitions`).
FRAME_COMPACTED_SPLIT_BYTES = 1 << 30
FRAME_COMPACTED_BUCKETS = 2
# The JVM reader `kafka_log_jvm` (compaction/jvm): the defaults of its options, written into its
# jar when `compaction.jvm.reader_jar()` builds it. A task holds one batch of at most
# JVM_MAX_BATCH_BYTES (Kafka's `message.max.bytes` is 1 MiB by default; topics raise it rarely past
# a few tens of MiB) and, of a compressed batch, one record (the batch's records together inflate
# to at most MAX_INFLATED_BATCH_BYTES). Columnar batches hold JVM_BATCH_ROWS rows (Spark's own
# columnar readers' default) and about JVM_BATCH_BYTES of keys and values; input partitions group
# consecutive segments up to FRAME_SPLIT_BYTES, as `kafka_log`'s do.
JVM_MAX_BATCH_BYTES = 256 << 20
JVM_BATCH_ROWS = 4096
JVM_BATCH_BYTES = 64 << 20
# Where `reader_jar()` keeps the jars it compiles (a dir; default `~/.cache/kafka-compaction/reader`).
JVM_READER_DIR_ENV = "KAFKA_COMPACTION_READER_DIR"
