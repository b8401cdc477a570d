"""One compaction round: recover -> discover -> plan -> Spark stages -> commit -> checkpoint -> report.

The driver does the cheap metadata work and the commits; executors do the byte work. Every
partition succeeds or fails on its own: a damaged partition is reported `failed` with the file
and byte position, its files untouched, while the others are cleaned.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import time

from compaction import archive
from compaction.cli import logs, metrics, report_html
from compaction.cli.options import parse_args
from compaction.cli.preflight import check_round
from compaction.cli.progress import Reporter
from compaction.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_ROUND_FAILED,
    EXIT_USAGE,
    PARTITION_ERRORS,
    CheckpointError,
    CompactionError,
    TaskFailed,
)
from compaction.runtime.driver import map_threads, unfreeze_gc, use_threads
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage
from compaction.settings import JobOptions, Settings
from compaction.spark.failure import one_line, task_traceback
from compaction.spark.jobs import scan_and_rewrite
from compaction.spark.session import SparkStarter
from compaction.steps import report as rpt
from compaction.steps.commit import (
    advance_checkpoints,
    commit,
    purge_replaced_versions,
    remove_replaced_segments,
)
from compaction.steps.outcome import dry_outcome
from compaction.steps.plan_round import Planned, discover_and_plan, selected, to_clean
from compaction.steps.recover import lock_log_dirs, recover

log = logging.getLogger("compaction")


def run(opts: JobOptions, progress: Reporter | None = None) -> tuple[int, dict]:
    """One round over `opts.log_dirs`: (exit code, the run report). Whatever fails once the log
    dirs are locked (a Spark job aborted, Spark not starting, an error while committing) still
    gives a report: the round's `failure`, and every partition it did not commit `failed`."""
    started_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    settings = Settings.resolve(opts, None, os.environ)  # the Spark conf's knobs: once the session is up
    use_threads(settings.threads)
    progress = progress or Reporter(interval=settings.progress_seconds)
    if opts.output_dir:
        check_round(opts)  # a copy elsewhere, the sources only read (archive.py)
        return archive.run(opts, progress, run, settings.archive_copy_threads)
    for warning in check_round(opts):  # a usage error (not a log dir, no report dir) before any lock or write
        log.warning(warning)
    locks = lock_log_dirs(opts)
    # A dry run starts Spark only once it knows it has partitions to size (no start-up to hide).
    starter = None if opts.dry_run or opts.recover_only else SparkStarter(settings)
    planned: list[Planned] = []
    failure = None
    app_id = None
    try:
        try:
            planned, dirs, todo = _recover_and_plan(opts, progress, timings, t0)
        except CompactionError:
            raise  # a malformed checkpoint: main() stops the run, nothing written
        except Exception as exc:
            failure = _failure("planning", "recovery or planning failed", exc)
        else:
            if opts.recover_only or opts.plan_only:
                pass  # the report says what a round would take (`to_clean`)
            elif todo:
                starter = starter or SparkStarter(settings)
                failure = _clean(starter, todo, planned, dirs, opts, progress, timings)
            elif not opts.dry_run:
                failure = _advance_checkpoints(planned, dirs)
            if opts.purge_noncurrent_versions and not opts.dry_run:
                _purge_noncurrent_versions(planned, timings)
    finally:
        if starter is not None:
            starter.join()  # a round with nothing to clean still lets the session come up whole
            app_id = starter.app_id
            if failure is not None:
                starter.stop_when_done()
        for lock in locks:
            lock.release()
    timings["totalSeconds"] = time.monotonic() - t0
    results = [p.result for p in planned]
    where = {"host": socket.gethostname(), "sparkAppId": app_id, "finishedAtMs": int(time.time() * 1000)}
    report = rpt.build_report(results, _args_echo(opts), timings, started_ms, failure, where)
    unfreeze_gc()
    if failure is not None:
        return EXIT_ROUND_FAILED, report
    code = EXIT_FAILED if any(r.status == rpt.FAILED for r in results) else EXIT_OK
    return code, report


def _recover_and_plan(opts: JobOptions, progress: Reporter, timings: dict[str, float], t0: float):
    """Recovery, listing and the plan: (every partition, the log dirs' states, those to clean)."""
    listed: dict = {}
    progress.phase(
        "%s and listing %d log dir(s)", "checking" if opts.dry_run else "recovering", len(opts.log_dirs)
    )
    recovered = {} if opts.dry_run else recover(opts, listed, timings)
    timings["recoverySeconds"] = time.monotonic() - t0
    planned, dirs = discover_and_plan(opts, listed, timings)
    timings["planSeconds"] = time.monotonic() - t0 - timings["recoverySeconds"]
    todo = to_clean(planned, recovered, opts)
    _say_planned(
        progress,
        planned,
        todo,
        timings,
        "eligible" if opts.plan_only or opts.recover_only else "to scan" if opts.dry_run else "to clean",
    )
    return planned, dirs, todo


def _clean(
    starter: SparkStarter,
    todo: list[Planned],
    planned: list[Planned],
    dirs: list,
    opts: JobOptions,
    progress: Reporter,
    timings: dict[str, float],
) -> rpt.RoundFailure | None:
    """The Spark stages, then the commit (a dry run: each partition's verdict). Stages that fail
    (a job Spark aborted, Spark not starting) fail every partition the round took: the commit
    comes after the stages, so none of them was committed, and their segments are unchanged."""
    try:
        todo, results = scan_and_rewrite(starter, todo, planned, opts, progress, timings)
    except Exception as exc:
        starter.join()
        what = "the round's Spark job failed" if starter.up else "Spark did not start"
        failure = _failure("stages", what, exc)
        for p in planned:  # as re-planned, if an open transaction had the stages run again
            if selected(p, opts):  # (not one already failed: it keeps its own reason)
                p.result.status, p.result.reason = rpt.FAILED, failure.reason
        return failure
    if opts.dry_run:
        for p in todo:
            dry_outcome(p, results)
        return None
    return _commit(todo, planned, dirs, results, progress, timings)


def _failure(phase: str, what: str, exc: BaseException) -> rpt.RoundFailure:
    spark = type(exc).__module__.startswith(("py4j", "pyspark"))
    trace = task_traceback(exc) if spark or isinstance(exc, TaskFailed) else None
    # Not Spark's, the storage's nor ours, on the driver or in a task: a bug, whose traceback the
    # log must show (errors.py: only expected errors fail a partition alone).
    if trace is not None:
        log.error("a task stopped on an unexpected error (%s), a bug to report:\n%s", phase, trace)
    elif not spark and not isinstance(exc, PARTITION_ERRORS):
        log.error("an unexpected error (%s), a bug to report:", phase, exc_info=exc)
    return rpt.RoundFailure(phase, f"{what}: {one_line(exc)}")


def _commit(
    todo: list[Planned],
    planned: list[Planned],
    dirs: list,
    results: dict[int, dict],
    progress,
    timings: dict[str, float],
) -> rpt.RoundFailure | None:
    """Each partition's swap, then the checkpoints, then the replaced files' removal. A partition
    whose commit fails is `failed` (the next run's recovery completes or rolls back its swap) and
    fails the round; the others are committed and their checkpoints advanced all the same."""
    progress.phase("committing %d partitions", len(todo))
    t = time.monotonic()
    # Partitions commit independently (each its own intent file and swap,
    # docs/kafka-rules.md#swap-protocol), so their
    # renames and fsyncs overlap on a thread pool; the checkpoint waits for all.
    errors = [(p, exc) for p, exc in zip(todo, map_threads(lambda p: _commit_one(p, results), todo)) if exc]
    failure = None
    if errors:
        failure = _failure("commit", f"the commit of {errors[0][0].result.name} failed", errors[0][1])
    checkpoint_failure = _advance_checkpoints(planned, dirs)
    failure = failure or checkpoint_failure
    timings["commitSeconds"] = time.monotonic() - t
    t = time.monotonic()
    map_threads(remove_replaced_segments, [p for p in todo if p.result.status == rpt.CLEANED])
    timings["deleteSeconds"] = time.monotonic() - t
    return failure


def _purge_noncurrent_versions(planned: list[Planned], timings: dict[str, float]) -> None:
    """--purge-noncurrent-versions: in each selected S3 partition the round did not fail, the old
    versions of its segment objects: what this round's swap replaced (and its `.cleaned`, `.swap`
    and `.deleted` objects), and what earlier rounds replaced, which may hold records an erasing
    pass now finds in no current segment. A failure is a WARN naming the partition: the round's
    data stands, and the next run with the option purges them."""
    t = time.monotonic()
    touched = [p for p in planned if p.log_dir.storage.is_s3 and p.result.status != rpt.FAILED]
    for p, out in zip(touched, map_threads(purge_replaced_versions, touched)):
        if isinstance(out, OSError):
            log.warning(
                "%s: the noncurrent versions of its replaced segments were not deleted (the next run with "
                "--purge-noncurrent-versions will): %s",
                p.result.name,
                out,
            )
        else:
            log.info(
                "%s: deleted %d noncurrent versions (%d bytes) of its replaced segments", p.result.name, *out
            )
    timings["purgeSeconds"] = time.monotonic() - t


def _commit_one(p: Planned, results: dict[int, dict]) -> Exception | None:
    before = dataclasses.replace(p.result)
    try:
        commit(p, results)
    except Exception as exc:
        # As a partition whose rewrite failed: no sizes (the round reclaimed nothing of it).
        p.result = dataclasses.replace(
            before,
            status=rpt.FAILED,
            reason=(
                f"its commit failed: {one_line(exc)} (the next run's recovery completes or rolls back its swap)"
            ),
        )
        return exc
    return None


def _advance_checkpoints(planned: list[Planned], dirs: list) -> rpt.RoundFailure | None:
    try:
        advance_checkpoints(planned, dirs)
    except Exception as exc:
        return _failure("commit", "cleaner-offset-checkpoint was not written", exc)
    return None


def _say_planned(
    progress: Reporter, planned: list[Planned], todo: list[Planned], timings: dict, taken: str = "to clean"
) -> None:
    failed = sum(p.result.status == rpt.FAILED for p in planned)
    progress.phase(
        "planned %d partitions in %.1f s: %d %s, %d skipped, %d failed",
        len(planned),
        timings.get("recoverySeconds", 0.0) + timings.get("planSeconds", 0.0),
        len(todo),
        taken,
        len(planned) - len(todo) - failed,
        failed,
    )


def _args_echo(opts: JobOptions) -> dict:
    args = dataclasses.asdict(opts)
    # Absolute, so that a report or a metric read on another host still says which dirs; and
    # s3://KEY:SECRET@... stays out.
    args["log_dirs"] = [redact_uri(uri if "://" in uri else os.path.abspath(uri)) for uri in opts.log_dirs]
    for name in ("report", "report_html", "metrics_file", "erase_keys"):
        args[name] = getattr(opts, name) and redact_uri(getattr(opts, name))
    return args


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    logs.setup(opts.log_format)
    try:
        code, report = run(opts)
    except CheckpointError as exc:
        # Like a broker taking the log dir offline: nothing is written until the file is fixed.
        print(
            f"error: {exc}\nNothing was written. Fix the file (format: version line, entry count "
            "line, then '<topic> <partition> <offset>' lines) or move it away: without it every "
            "partition is treated as fully dirty, which is safe but cleans everything again.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except CompactionError as exc:
        # A held lock (broker or another run) stops the run before anything is written.
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _write_outputs(opts, report, code)
    return code


def _write_outputs(opts: JobOptions, report: dict, code: int) -> None:
    """The report (JSON, HTML), its log lines, the dry run's table and the metrics file."""
    if opts.report:
        storage, path = Storage.for_uri(opts.report)
        storage.write_atomic(path, rpt.dumps(report).encode())
    if opts.report_html:
        storage, path = Storage.for_uri(opts.report_html)
        storage.write_atomic(path, report_html.render(report).encode())
    for entry in report["partitions"]:
        logs.log_partition(entry)
    print(rpt.reclaim_table(report), flush=True)
    logs.log_totals(report["totals"], report["timings"].get("totalSeconds"), logs.mode_of(report["args"]))
    if opts.metrics_file:
        metrics.write(opts.metrics_file, report, code, time.time())
    if report["failure"]:
        logs.log_round_failure(report["failure"], report["totals"])
