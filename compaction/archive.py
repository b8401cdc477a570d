"""A compacted copy of log dirs in a new place, as of a point in time if asked (`--output-dir`).

The sources (`--log-dir`) are only read: no byte, lock, checkpoint or recovery file is written
there, so an immutable backup or a bucket behind read-only credentials can be the source.

1. The output's markers say which partitions an earlier run finished: those are left as they
   are (a rerun finishes the job).
2. Every other selected partition is copied up to its cut (policy/cut.py) into the staging log
   dir `<output>.kafka-compaction-staging`, beside the output (steps/snapshot.py
   `stage_partition`); a partition that cannot be read fails alone.
3. One ordinary round (round.run) cleans the staging log dir in place with its own crash
   safety: min.cleanable.dirty.ratio 0, no compaction lag, and the cut's clock (the as-of time,
   else the newest timestamp the cut partitions hold, else the wall clock; `--now-ms`
   overrides). The empty segment each copy ends with is its active segment, so every segment
   holding data is cleaned. The clock is kept in the staging dir, so a rerun decides the
   partitions it still has to do as the first run would have.
4. Each partition the round did not fail is promoted into `<output>/<topic>-<partition>` and its
   marker written last (`promote`).
5. The output's log dir files are written from every marker: recovery-point, log-start and
   cleaner offset checkpoints, and meta.properties from the first source holding one. The
   staging dir is removed once no partition failed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

from compaction.errors import EXIT_FAILED, EXIT_OK, EXIT_ROUND_FAILED, CompactionError, UsageError, error_text
from compaction.format import checkpoint as ckpt
from compaction.format import naming
from compaction.runtime import checkpoint_files
from compaction.runtime.driver import map_threads
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage, acquire_run_lock
from compaction.steps import report as rpt
from compaction.steps.discover import LogDirState, PartitionDir, read_log_dir
from compaction.steps.snapshot import (
    Staged,
    delete_tree,
    make_dir,
    marker_for,
    promote,
    read_markers,
    stage_partition,
)

STAGING_SUFFIX = ".kafka-compaction-staging"
PLAN_FILE = "archive-plan.json"
META_PROPERTIES = "meta.properties"
# What a full compaction of a copy needs whatever the topic configs say: every dirty byte taken,
# no segment held back by its age.
FULL_COMPACTION = {"min.cleanable.dirty.ratio": 0.0, "min.compaction.lag.ms": 0}

log = logging.getLogger("compaction")


def staging_uri(output_dir: str) -> str:
    return output_dir.rstrip("/") + STAGING_SUFFIX


def sources(opts) -> list[LogDirState]:
    """The selected partitions of every source (preflight's `check_no_collision` found no
    partition in two of them), or `UsageError` where an `--as-of-offset` names a partition no
    source holds."""
    dirs = [read_log_dir(uri, opts.topics, opts.partitions) for uri in opts.log_dirs]
    held = {p.key for d in dirs for p in d.partitions}
    for name in opts.as_of_offsets:
        topic, _, partition = name.rpartition(":")
        if (topic, int(partition)) not in held:
            raise UsageError(
                f"--as-of-offset {name}: no --log-dir holds {topic}-{partition}"
                + (" (or --topics leaves it out)" if opts.topics else "")
            )
    return dirs


def run(opts, progress, round_run, copy_threads: int) -> tuple[int, dict]:
    """The archive of `opts.log_dirs` into `opts.output_dir`: (exit code, report). `round_run`
    is `round.run`, the round that cleans the staging dir; `copy_threads` partitions are copied
    at once (settings.py `archive_copy_threads`)."""
    started_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    dirs = sources(opts)
    out, out_root = Storage.for_uri(opts.output_dir)
    stage_uri = staging_uri(opts.output_dir)
    st, st_root = Storage.for_uri(stage_uri)
    make_dir(out, out_root)
    lock = acquire_run_lock(out_root) if out.is_local else None  # one archive run per output dir
    try:
        return _run(
            opts,
            progress,
            round_run,
            copy_threads,
            dirs,
            out,
            out_root,
            st,
            st_root,
            stage_uri,
            started_ms,
            t0,
        )
    finally:
        if lock is not None:
            lock.release()


def _run(
    opts, progress, round_run, copy_threads, dirs, out, out_root, st, st_root, stage_uri, started_ms, t0
):
    done = read_markers(out, out_root)
    for d in dirs:
        for p in d.partitions:
            if p.key in done and done[p.key]["asOf"] != _as_of(opts, p.topic, p.partition):
                raise UsageError(
                    f"--output-dir {redact_uri(opts.output_dir)} holds {p.topic}-{p.partition} as of "
                    f"{done[p.key]['asOf']}, not as this run asks: give a new output dir"
                )
    resuming = st.info(st_root) is not None
    todo = [(d, p) for d in dirs for p in d.partitions if p.key not in done]
    if not resuming:
        for _, p in todo:
            if out.info(f"{out_root}/{p.topic}-{p.partition}") is not None:
                raise UsageError(
                    f"--output-dir {redact_uri(opts.output_dir)} already holds {p.topic}-{p.partition}, "
                    "not written by an archive run: give an empty or new output dir"
                )
    # What an interrupted run staged is copied again (the same bytes); only its clock is kept.
    kept_clock = _kept_clock(st, st_root) if resuming else None
    delete_tree(st, st_root)
    make_dir(st, st_root)
    progress.phase("copying %d partition(s) up to their cut into %s", len(todo), redact_uri(stage_uri))
    staged_or_error = map_threads(lambda dp: _stage(opts, dp[0], dp[1], st, st_root), todo, copy_threads)
    timings = {"stageSeconds": time.monotonic() - t0}
    staged = {(s.topic, s.partition): s for s in staged_or_error if isinstance(s, Staged)}
    results: list[rpt.PartitionResult] = []
    for (d, p), s in zip(todo, staged_or_error):
        if not isinstance(s, Staged):
            results.append(
                rpt.PartitionResult(
                    p.topic, p.partition, redact_uri(d.uri), status=rpt.FAILED, reason=f"its copy failed: {s}"
                )
            )
    clock = _clock(opts, st, st_root, list(staged.values()), kept_clock)
    failure = None
    if staged:
        _, inner = round_run(_staging_options(opts, stage_uri, clock), progress)
        failure = inner["failure"]
        results += [rpt.PartitionResult(**e) for e in inner["partitions"]]
        timings.update(inner["timings"])
    source_of = {p.key: d.uri for d, p in todo}
    cleaner = (
        checkpoint_files.read_checkpoint(st, f"{st_root}/{ckpt.CLEANER_OFFSET_CHECKPOINT}") if staged else {}
    )
    outputs: dict[tuple[str, int], str] = {}
    for r in results:
        key = (r.topic, r.partition)
        if key in staged:
            r.logDir = redact_uri(source_of[key])
        if key in staged and r.status != rpt.FAILED:
            try:
                outputs[key] = _promote(
                    opts, staged[key], source_of[key], cleaner.get(key), st, st_root, out, out_root
                )
            except Exception as exc:
                r.status, r.reason = rpt.FAILED, f"its promotion into the output failed: {error_text(exc)}"
    for key, marker in sorted(done.items()):
        results.append(
            rpt.PartitionResult(
                key[0],
                key[1],
                marker["source"],
                status=rpt.SKIPPED,
                reason="in the output already (an earlier run)",
            )
        )
        outputs[key] = marker["output"]
    _write_log_dir_files(dirs, out, out_root)
    failed = any(r.status == rpt.FAILED for r in results)
    if not failed and failure is None:
        delete_tree(st, st_root)
    timings["totalSeconds"] = time.monotonic() - t0
    results.sort(key=lambda r: (r.topic, r.partition))
    args = dataclasses.asdict(opts)
    args["log_dirs"] = [redact_uri(u) for u in opts.log_dirs]
    args["output_dir"] = redact_uri(opts.output_dir)
    report = rpt.build_report(
        results, args, timings, started_ms, rpt.RoundFailure(**failure) if failure else None
    )
    report["archive"] = {
        "outputDir": redact_uri(opts.output_dir),
        "clockMs": clock,
        "asOfTimeMs": opts.as_of_time_ms,
        "asOfOffsets": opts.as_of_offsets,
    }
    for entry in report["partitions"]:
        key = (entry["topic"], entry["partition"])
        entry["output"] = outputs.get(key) and redact_uri(outputs[key])
        s = staged.get(key) or (done[key] if key in done else None)
        entry["cut"] = _cut_entry(s)
    if failure is not None:
        return EXIT_ROUND_FAILED, report
    return (EXIT_FAILED if failed else EXIT_OK), report


def _stage(opts, d: LogDirState, p: PartitionDir, st: Storage, st_root: str):
    if p.transient or p.has_commit_intent:
        # Finishing the swap would write to the source; copying around it could lose data.
        what = p.transient[0] if p.transient else naming.COMMIT_INTENT_FILE
        return (
            f"{p.path} holds an interrupted swap ({what}): let a broker load it, or run --recover-only on "
            "it, before copying it"
        )
    as_of_offset = opts.as_of_offsets.get(f"{p.topic}:{p.partition}")
    start = d.log_start_offsets.get(p.key, p.segments[0].base_offset if p.segments else 0)
    try:
        return stage_partition(d.storage, p, start, st, st_root, opts.as_of_time_ms, as_of_offset)
    except (CompactionError, OSError) as exc:
        delete_tree(st, f"{st_root}/{p.topic}-{p.partition}")  # not for the round to find
        return error_text(exc)


def _kept_clock(st: Storage, st_root: str) -> int | None:
    plan = f"{st_root}/{PLAN_FILE}"
    return json.loads(st.read_bytes(plan))["clockMs"] if st.exists(plan) else None


def _clock(opts, st: Storage, st_root: str, staged: list[Staged], kept: int | None) -> int:
    """The round's clock (module docstring, step 3), kept in the staging dir for a rerun."""
    if kept is not None:
        clock = kept
    elif opts.now_ms_given or (opts.as_of_time_ms is None and not opts.as_of_offsets):
        clock = opts.now_ms
    elif opts.as_of_time_ms is not None:
        clock = opts.as_of_time_ms
    else:
        cut = {tuple(name.rsplit(":", 1)) for name in opts.as_of_offsets}
        clocks = [
            s.cut.clock_ms
            for s in staged
            if s.cut.clock_ms is not None and (s.topic, str(s.partition)) in cut
        ]
        clock = max(clocks, default=opts.now_ms)
    st.write_atomic(f"{st_root}/{PLAN_FILE}", json.dumps({"clockMs": clock}).encode())
    return clock


def _staging_options(opts, stage_uri: str, clock: int):
    return dataclasses.replace(
        opts,
        log_dirs=[stage_uri],
        output_dir=None,
        as_of_time_ms=None,
        as_of_offsets={},
        topics=None,
        partitions=None,
        now_ms=clock,
        kafka_config={**opts.kafka_config, **FULL_COMPACTION},
        topic_config={t: {**c, **FULL_COMPACTION} for t, c in opts.topic_config.items()},
    )


def _as_of(opts, topic: str, partition: int) -> dict:
    """What a partition's copy was asked to be (its marker keeps it): a rerun must ask the same."""
    return {
        "timeMs": opts.as_of_time_ms,
        "offset": opts.as_of_offsets.get(f"{topic}:{partition}"),
        "eraseKeys": opts.erase_keys and redact_uri(opts.erase_keys),
    }


def _promote(opts, s: Staged, source: str, cleaner_offset, st, st_root, out, out_root) -> str:
    target = f"{opts.output_dir.rstrip('/')}/{s.name}"
    marker = marker_for(s, redact_uri(source), redact_uri(target), cleaner_offset) | {
        "asOf": _as_of(opts, s.topic, s.partition)
    }
    promote(st, f"{st_root}/{s.name}", out, out_root, marker)
    return target


def _cut_entry(s) -> dict | None:
    if s is None:
        return None
    if isinstance(s, dict):  # a marker
        return s["cut"] | {"logEndOffset": s["logEndOffset"]}
    return {
        "endOffset": s.cut.end_offset,
        "endedBy": s.cut.ended_by,
        "held": s.cut.held,
        "firstUnstableOffset": s.cut.first_unstable_offset,
        "clockMs": s.cut.clock_ms,
        "logEndOffset": s.cut.end_offset,
    }


def _write_log_dir_files(dirs: list[LogDirState], out: Storage, out_root: str) -> None:
    """The output's checkpoints from every marker (this run's and earlier ones), and
    meta.properties from the first source holding one."""
    markers = read_markers(out, out_root)
    files = {
        ckpt.RECOVERY_POINT_OFFSET_CHECKPOINT: {k: m["logEndOffset"] for k, m in markers.items()},
        ckpt.LOG_START_OFFSET_CHECKPOINT: {k: m["logStartOffset"] for k, m in markers.items()},
        ckpt.CLEANER_OFFSET_CHECKPOINT: {
            k: m["cleanerOffset"] for k, m in markers.items() if m["cleanerOffset"] is not None
        },
    }
    for name, entries in files.items():
        checkpoint_files.write_checkpoint(out, f"{out_root}/{name}", entries)
    if out.exists(f"{out_root}/{META_PROPERTIES}"):
        return
    for d in dirs:
        meta = f"{d.path}/{META_PROPERTIES}"
        if d.storage.exists(meta):
            out.write_atomic(f"{out_root}/{META_PROPERTIES}", d.storage.read_bytes(meta))
            return
