"""Checks that run before Spark starts and before anything is written: is each `--log-dir` a Kafka
log dir (and not one of its partition dirs), can its report go where asked, is there a Java, and
is a bucket versioned (where replaced segments, and erased records, would stay as old versions).

Each check raises `UsageError` with one line saying what is wrong and how to fix it. The shape
rules are a pure function of a directory listing (`classify_listing`), testable without files.
"""

from __future__ import annotations

import os
import re
import shutil

from compaction.errors import UsageError
from compaction.format.checkpoint import LEADER_EPOCH_CHECKPOINT
from compaction.format.naming import (
    INTERNAL_TOPICS_NOT_CLEANED,
    PARTITION_METADATA,
    SEGMENT_SUFFIXES,
    parse_partition_dir_name,
)

LOG_DIR, PARTITION_DIR, EMPTY, OTHER = "log dir", "partition dir", "empty", "other"

# Files a broker keeps at the top of a log dir (LogManager, ReplicaManager, KafkaRaftServer).
LOG_DIR_FILES = frozenset(
    {
        "meta.properties",
        "cleaner-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
        "log-start-offset-checkpoint",
        ".kafka_cleanshutdown",
    }
)
# Files only a partition dir holds (UnifiedLog, LeaderEpochFileCache, PartitionMetadataFile).
PARTITION_FILE_SUFFIXES = SEGMENT_SUFFIXES
PARTITION_FILES = frozenset({LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA})


def classify_listing(name: str, entries: list[tuple[str, bool]]) -> str:
    """What a directory called `name` holding `entries` ((entry name, is a dir)) is to Kafka.

    A log dir has a partition-named sub-directory or a broker's top-level file; a partition dir
    is named `<topic>-<n>` and holds segment files or a partition's metadata files."""
    if not entries:
        return EMPTY
    if any(is_dir and parse_partition_dir_name(n) is not None for n, is_dir in entries):
        return LOG_DIR
    if any(not is_dir and n in LOG_DIR_FILES for n, is_dir in entries):
        return LOG_DIR
    files = [n for n, is_dir in entries if not is_dir]
    partition_like = any(n.endswith(PARTITION_FILE_SUFFIXES) or n in PARTITION_FILES for n in files)
    if partition_like and parse_partition_dir_name(name) is not None:
        return PARTITION_DIR
    return OTHER


def shown(uri: str) -> str:
    """`uri` as an error message may show it: credentials in it (`s3://KEY:SECRET@bucket/...`,
    which pyarrow accepts) replaced."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", uri)


def check_log_dir(uri: str, *, writable: bool = True) -> list[tuple[str, bool]]:
    """Raise `UsageError` unless `uri` is a readable (and, with `writable`, writable) Kafka log dir;
    returns its entries ((name, is a dir))."""
    from compaction.runtime.storage import Storage  # pyarrow: imported only when a dir is checked

    try:
        storage, path = Storage.for_uri(uri)
    except (ValueError, OSError) as exc:
        raise UsageError(f"--log-dir {shown(uri)}: cannot open it: {exc}") from None
    uri = shown(uri)
    if storage.is_local:
        if not os.path.exists(path):
            raise UsageError(
                f"--log-dir {uri}: no such directory; give the path of a Kafka log dir "
                "(the broker's log.dirs entry)"
            )
        if not os.path.isdir(path):
            raise UsageError(
                f"--log-dir {uri}: not a directory; give the directory a broker's log.dirs names"
            )
        if not os.access(path, os.R_OK | os.X_OK):
            raise UsageError(f"--log-dir {uri}: permission denied; run as a user who can read it")
        if writable and not os.access(path, os.W_OK):
            raise UsageError(
                f"--log-dir {uri}: not writable; compaction rewrites segments in place "
                "(use --dry-run to only plan)"
            )
    try:
        entries = [(i.name, i.is_dir) for i in storage.list_dir(path)]
    except FileNotFoundError:
        raise UsageError(f"--log-dir {uri}: nothing there; check the bucket and prefix") from None
    except OSError as exc:
        raise UsageError(f"--log-dir {uri}: cannot list it: {exc}") from None
    name = os.path.basename(path.rstrip("/"))
    kind = classify_listing(name, entries)
    if kind == PARTITION_DIR:
        parent = uri.rstrip("/").rsplit("/", 1)[0] if "/" in uri.rstrip("/") else "."
        raise UsageError(
            f"--log-dir {uri}: this is a partition dir, not a log dir; give its parent: "
            f"--log-dir {parent} (add --topics '{parse_partition_dir_name(name)[0]}' for "
            "that topic only)"
        )
    if kind == EMPTY:
        raise UsageError(f"--log-dir {uri}: the directory is empty, not a Kafka log dir; check the path")
    if kind == OTHER:
        raise UsageError(
            f"--log-dir {uri}: not a Kafka log dir (no <topic>-<partition> directories, no "
            "meta.properties or checkpoint files); give the directory a broker's log.dirs "
            "names"
        )
    return entries


# Topics an error lists before it says how many more there are.
SHOWN_TOPICS = 20


def check_selection(opts, partitions: list[tuple[str, int]]) -> None:
    """`UsageError` when --topics or --partitions select none of the log dirs' `partitions`, or name
    a partition that is not there (a typo in a scheduled job would otherwise "succeed" every day,
    cleaning nothing), unless --allow-empty says that is fine."""
    if opts.allow_empty or (opts.topics is None and opts.partitions is None):
        return
    chosen = {f"{t}-{n}" for t, n in partitions if opts.wants(t, n)}
    found = sorted({t for t, _ in partitions})
    listed = ", ".join(found[:SHOWN_TOPICS]) + (
        f" and {len(found) - SHOWN_TOPICS} more" if len(found) > SHOWN_TOPICS else ""
    )
    topics = f"the log dirs hold the topics {listed}" if found else "the log dirs hold no topic"
    fix = "; or pass --allow-empty if an empty selection is fine"
    missing = sorted(set(opts.partitions or ()) - chosen)
    if missing:
        raise UsageError(
            f"--partitions: {', '.join(missing)} not found"
            f"{' under --topics ' + repr(opts.topics) if opts.topics else ''}"
            f" in any --log-dir; {topics}{fix}"
        )
    if not chosen:
        raise UsageError(
            f"--topics {opts.topics!r} matches no topic (full match of a regular expression); {topics}{fix}"
        )


def check_output_path(flag: str, uri: str) -> None:
    """A local output file's directory must exist and be writable (checked before the round, not
    after it)."""
    from compaction.runtime.storage import Storage  # pyarrow: imported only when a path is checked

    storage, path = Storage.for_uri(uri)
    if not storage.is_local:
        return
    uri = shown(uri)
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{flag} {uri}: is a directory; give a file path")
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {uri}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {uri}: directory {parent} is not writable")


def _one_holder(holder: dict, key: tuple[str, int], name: str, uri: str) -> None:
    """`UsageError` where a second log dir holds a partition: one --output-dir holds each once."""
    if key in holder:
        raise UsageError(
            f"{name} is in both --log-dir {shown(holder[key])} and --log-dir {shown(uri)}: one "
            "--output-dir holds each partition once; write them to separate output dirs or narrow "
            "--topics / --partitions"
        )
    holder[key] = uri


def find_java(env: dict[str, str]) -> str:
    """The `java` spark-submit will run (`$JAVA_HOME/bin/java`, else the PATH's), or `UsageError`."""
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.access(java, os.X_OK):
            return java
        raise UsageError(
            f"JAVA_HOME={home} has no bin/java; point JAVA_HOME at a Java 17+ install or unset it"
        )
    java = shutil.which("java", path=env.get("PATH"))
    if java is None:
        raise UsageError(
            "no Java found: Spark needs Java 17 or newer; install it (e.g. apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME"
        )
    return java


def check_round(opts) -> list[str]:
    """Every check a round's options need before anything runs (`JobOptions`); returns what the
    round should say at WARN (a versioned bucket)."""
    archive = getattr(opts, "output_dir", None)
    partitions, holder = [], {}
    for uri in opts.log_dirs:
        # --output-dir: only read
        for name, is_dir in check_log_dir(uri, writable=not opts.dry_run and not archive):
            parsed = parse_partition_dir_name(name) if is_dir else None
            if parsed is not None and parsed[0] not in INTERNAL_TOPICS_NOT_CLEANED:
                partitions.append(parsed)
                if archive and opts.wants(*parsed):
                    _one_holder(holder, parsed, name, uri)
    check_selection(opts, partitions)
    outputs = (
        ("--report", opts.report),
        ("--report-html", opts.report_html),
        ("--metrics-file", opts.metrics_file),
    )
    for flag, uri in outputs:
        if uri:
            check_output_path(flag, uri)
    return [] if archive else check_versioning(opts)  # --output-dir: the round over its staging dir checks


def check_versioning(opts) -> list[str]:
    """A versioned bucket keeps every object a round replaces as a noncurrent version: the space
    is not freed, and records `--erase-keys` removes stay readable there. Said at WARN; an erasing
    pass that would write there is refused unless `--purge-noncurrent-versions` deletes those
    versions. A bucket whose versioning cannot be read counts as versioned for erasing."""
    # pyarrow: imported only when a bucket is checked (the launcher imports this module)
    from compaction.runtime.s3 import VERSIONED
    from compaction.runtime.storage import Storage

    purge = getattr(opts, "purge_noncurrent_versions", False)
    writes = not opts.dry_run and not opts.recover_only
    warnings, on_s3 = [], False
    for uri in opts.log_dirs:
        storage, path = Storage.for_uri(uri)
        if not storage.is_s3:
            continue
        on_s3 = True
        bucket = path.partition("/")[0]
        try:
            status = storage.bucket_versioning(path)
        except OSError as exc:
            if opts.erase_keys and writes and not purge:
                raise UsageError(
                    f"--log-dir {shown(uri)}: cannot tell whether bucket {bucket} is versioned ({exc}); "
                    "erased records would stay in old versions of a versioned bucket: grant "
                    "s3:GetBucketVersioning, or add --purge-noncurrent-versions"
                ) from None
            warnings.append(
                f"--log-dir {shown(uri)}: cannot tell whether bucket {bucket} is versioned: {exc}"
            )
            continue
        if status not in VERSIONED:
            continue
        if opts.erase_keys and writes and not purge:
            raise UsageError(
                f"--log-dir {shown(uri)}: bucket {bucket} is versioned ({status}): the erased records "
                "would stay readable in the noncurrent versions of the segments this pass replaces; "
                "add --purge-noncurrent-versions to delete those versions (s3:ListBucketVersions, "
                "s3:DeleteObjectVersion), or erase in an unversioned bucket"
            )
        then = (
            "this round deletes the noncurrent versions of the objects it replaces (--purge-noncurrent-versions)"
            if purge and writes
            else "the segments a round replaces stay as noncurrent versions and keep "
            "their space until deleted (a lifecycle rule's NoncurrentVersionExpiration, or "
            "--purge-noncurrent-versions)"
        )
        warnings.append(f"--log-dir {shown(uri)}: bucket {bucket} is versioned ({status}): {then}")
    if purge and not on_s3:
        raise UsageError(
            "--purge-noncurrent-versions: no --log-dir is on S3 (it deletes old versions of S3 objects)"
        )
    return warnings
