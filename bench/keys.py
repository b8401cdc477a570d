"""Keys without bound: one partition with N distinct keys, cleaned in one round with little memory.

    .venv/bin/python bench/keys.py [--keys 10000000] [--driver-memory 512m] [--out bench/out/keys]
    .venv/bin/python bench/keys.py --keys 100000000   # the issue's 100M: long on 2 cores, see BENCHMARKS.md

1. Generates one partition (`python -m compaction generate`'s code, in process) in which every one of
   the N keys occurs, in random order, followed by `--dup` x N uniform updates of the same keys, so the
   section below the active segment holds exactly N distinct keys (keys of `--key-size` bytes, values
   of `--value-size` bytes, no compression). No checkpoint: the whole log is dirty.
2. Scans the input for the check, one segment at a time before the job rewrites it: the latest offset
   of every key id below the active segment (8 bytes per key; ids parsed from the key bytes), and
   digests of the active segment.
3. Runs ./spark-submit.sh on it with `--driver-memory` and `spark.executor.memory` set well below the
   size of the key set (local mode: the driver JVM is the executor), a Spark event log, and samples
   the memory of the spark-submit process tree every 0.2 s (/proc/<pid>/status VmHWM and VmRSS of the
   driver JVM, the Python daemon and its workers).
4. Verifies the output one segment at a time: records kept below the bound == distinct keys, each the
   latest of its key (all keys), the tail from the bound up unchanged, a sample re-decoded; prints the
   verification's time and peak RSS.
5. Prints the key-set size, the memory high-water marks, Spark's spill metrics, the time, and how
   many rounds Kafka's cleaner would need with its default offset map (docs/kafka-rules.md#offset-map: 128 MiB
   dedupe buffer, 24-byte entries, load factor 0.9 = 5,033,164 keys per round).

Not a test. Exits non-zero when the job or the verification fails.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tree_memory import TreeMemory, kb  # noqa: E402

MB, MIB = 1e6, 1 << 20
NOW_MS = 1_795_305_600_000  # 2026-11-22T00:00:00Z
# Kafka's default offset map (LogCleaner, docs/kafka-rules.md#offset-map): log.cleaner.dedupe.buffer.size 128
# MiB, one thread; SkimpyOffsetMap entries are a 16-byte MD5 + an 8-byte offset;
# log.cleaner.io.buffer.load.factor 0.9.
KAFKA_MAP_KEYS = int(128 * MIB / 24 * 0.9)  # 5,033,164


def generate(out: Path, args) -> float:
    """The generator with its key draw replaced: a permutation of all N key ids, then dup x N uniform ones."""
    from compaction.__main__ import main as cli
    from compaction.tools import generator_plan

    n = args.keys
    records = n + round(args.dup * n)

    def draw_key_ids(rng, count, keys, skew):
        assert count == records and keys == n, (count, keys)
        return np.concatenate([rng.permutation(keys).astype(np.int64), rng.integers(0, keys, count - keys)])

    original = generator_plan.draw_key_ids
    generator_plan.draw_key_ids = draw_key_ids
    t = time.perf_counter()
    try:
        code = cli(
            [
                "generate",
                str(out),
                "--topics",
                "keys:1",
                "--records",
                str(records),
                "--keys",
                str(n),
                "--key-size",
                str(args.key_size),
                "--value-size",
                args.value_size,
                "--codec",
                "none",
                "--segment-bytes",
                str(args.segment_bytes),
                "--seed",
                str(args.seed),
            ]
        )
    finally:
        generator_plan.draw_key_ids = original
    if code:
        raise SystemExit(f"generator failed ({code})")
    return time.perf_counter() - t


# ----------------------------------------------------------------------------------------------------
# Spark event log: spills and executor memory peaks
# ----------------------------------------------------------------------------------------------------


def event_metrics(event_dir: Path) -> dict[str, int]:
    from e2e import _event_lines

    logs = sorted(
        p for p in event_dir.rglob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))
    )
    out = {
        "Memory Bytes Spilled": 0,
        "Disk Bytes Spilled": 0,
        "Peak Execution Memory": 0,
        "JVMHeapMemory": 0,
        "ProcessTreeJVMRSSMemory": 0,
        "ProcessTreePythonRSSMemory": 0,
    }
    for line in _event_lines(logs):
        ev = json.loads(line)
        kind = ev.get("Event")
        if kind == "SparkListenerTaskEnd":
            tm = ev.get("Task Metrics") or {}
            out["Memory Bytes Spilled"] += tm.get("Memory Bytes Spilled", 0)
            out["Disk Bytes Spilled"] += tm.get("Disk Bytes Spilled", 0)
            out["Peak Execution Memory"] = max(
                out["Peak Execution Memory"], tm.get("Peak Execution Memory", 0)
            )
        elif kind == "SparkListenerStageExecutorMetrics":
            em = ev.get("Executor Metrics") or {}
            for k in ("JVMHeapMemory", "ProcessTreeJVMRSSMemory", "ProcessTreePythonRSSMemory"):
                out[k] = max(out[k], em.get(k, 0))
    return out


class KeyFormError(ValueError):
    """A key that is not the generator's b"key-" + zero-padded decimal id of --key-size bytes."""


def _peak_rss() -> int:
    """ru_maxrss of this process, in bytes (reset by `_reset_peak_rss`)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_rss() -> int:
    """Reset the process's RSS high-water mark (Linux >= 4.0), so that the verification's peak is not
    the in-process generator's; returns the RSS at that point (bytes)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return kb(Path("/proc/self/status").read_text(), "VmRSS")


def key_ids(scan, key_size: int, keys: int) -> np.ndarray:
    """The key id of every record of `scan`, parsed from the key bytes column by column (vectorized)."""
    from compaction.tools.generator_plan import KEY_PREFIX

    r = scan.records
    n = len(r.offset)
    prefix = np.frombuffer(KEY_PREFIX, np.uint8)
    bad_len = np.flatnonzero(r.key_len != key_size)
    if len(bad_len):
        i = int(bad_len[0])
        raise KeyFormError(
            f"{scan.path}: {len(bad_len)} keys not of {key_size} bytes, e.g. offset "
            f"{int(r.offset[i])}: {scan.key(i)!r}"
        )
    data, _ = scan.gather_keys(large=True)
    mat = data.reshape(n, key_size)
    bad = (mat[:, : len(prefix)] != prefix).any(axis=1)
    ids = np.zeros(n, np.int64)
    for j in range(len(prefix), key_size):
        digit = mat[:, j] - np.uint8(ord("0"))  # wraps for bytes below '0'
        bad |= digit > 9
        if key_size - j > 18:  # more digits than int64 holds: the generator's zero padding
            bad |= digit != 0
        else:
            ids *= 10
            ids += digit
    bad |= ids >= keys
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise KeyFormError(
            f"{scan.path}: {int(bad.sum())} keys not b'key-' + a decimal id < {keys:,}, "
            f"e.g. offset {int(r.offset[i])}: {scan.key(i)!r}"
        )
    return ids


def _increasing(offsets: np.ndarray, previous: int) -> bool:
    return not len(offsets) or (offsets[0] > previous and bool((np.diff(offsets) > 0).all()))


class Expected:
    """Pass 1, over the input before the job rewrites it, one segment at a time: the latest offset of
    every key id below the active segment (8 bytes per key), and digests of the active segment (the
    tail: a job never cleans it) — its bytes and its record offsets."""

    def __init__(self, part_dir: Path, keys: int, key_size: int) -> None:
        from compaction.kernels.scan import scan_segment

        self.part_dir, self.keys, self.key_size = part_dir, keys, key_size
        files = sorted(part_dir.glob("*.log"))
        self.active = files[-1].name
        self.active_base = int(files[-1].stem)
        self.latest = np.full(keys, -1, np.int64)
        self.records_below = 0
        previous = -1
        for f in files[:-1]:
            s = scan_segment(np.fromfile(f, np.uint8), str(f))
            offsets = s.records.offset
            ids = key_ids(s, key_size, keys)
            del s
            if not _increasing(offsets, previous) or offsets[-1] >= self.active_base:
                raise SystemExit(f"verification: input offsets of {f} do not increase through the log")
            previous = int(offsets[-1]) if len(offsets) else previous
            np.maximum.at(self.latest, ids, offsets)  # no reliance on fancy assignment's write order
            self.records_below += len(offsets)
        buf = np.fromfile(files[-1], np.uint8)
        self.active_sha = hashlib.sha256(buf).hexdigest()
        s = scan_segment(buf, str(files[-1]))
        key_ids(s, key_size, keys)  # the form of the tail's keys too
        offsets = s.records.offset
        if not _increasing(offsets, previous) or (len(offsets) and offsets[0] < self.active_base):
            raise SystemExit(f"verification: input offsets of {files[-1]} out of order")
        self.tail_records = len(offsets)
        self.tail_offsets_sha = hashlib.sha256(offsets.tobytes()).hexdigest()
        self.distinct = int(np.count_nonzero(self.latest >= 0))


def verify(expected: Expected, report: dict, sample_batches: int) -> tuple[list[str], float]:
    """Pass 2, over the output one segment at a time: below the bound every record is its key's latest
    input record (offset == latest[id]) and offsets strictly increase, so no key is kept twice; as many
    records as distinct keys, so none is missing; from the bound up the records (offsets) and the
    active segment's bytes are the input's; `sample_batches` batches re-decoded with the pure-Python
    reader (iter_batches) against the same expectation. Returns the problems and the peak RSS."""
    from compaction.errors import CompactionError
    from compaction.format.segment import iter_batches
    from compaction.kernels.scan import scan_segment
    from compaction.tools.generator_plan import KEY_PREFIX as prefix

    e, name = expected, expected.part_dir.name
    problems: list[str] = []
    p = next((p for p in report.get("partitions", []) if f"{p['topic']}-{p['partition']}" == name), None)
    if p is None or p["status"] != "cleaned":
        return [f"{name}: not cleaned ({p and p['status']}: {p and p['reason']})"], _peak_rss()
    bound = p["firstUncleanableOffset"]
    if bound != e.active_base:
        return [
            f"{name}: bound {bound} is not the active segment's base {e.active_base}: the "
            f"expectation only covers the records below the active segment"
        ], _peak_rss()
    kept = wrong = 0
    examples: list[str] = []
    previous = -1
    tail_records, tail_sha, active_sha = 0, hashlib.sha256(), None
    files = sorted(e.part_dir.glob("*.log"))
    for f in files:
        buf = np.fromfile(f, np.uint8)
        if f.name == e.active:
            active_sha = hashlib.sha256(buf).hexdigest()
        try:
            s = scan_segment(buf, str(f))
            ids = key_ids(s, e.key_size, e.keys)
        except (CompactionError, KeyFormError) as err:  # both name the file
            problems.append(str(err))
            continue
        offsets = s.records.offset
        del s, buf
        if not _increasing(offsets, previous):
            problems.append(f"{f}: offsets do not strictly increase (from {previous})")
        previous = int(offsets[-1]) if len(offsets) else previous
        below = offsets < bound
        tail = offsets[~below]
        tail_records += len(tail)
        tail_sha.update(tail.tobytes())
        offsets, ids = offsets[below], ids[below]
        kept += len(offsets)
        bad = np.flatnonzero(e.latest[ids] != offsets)
        wrong += len(bad)
        examples += [
            f"key {int(ids[i])} @ {int(offsets[i])}, latest {int(e.latest[ids[i]])}"
            for i in bad[: max(0, 3 - len(examples))]
        ]
    if kept != e.distinct:
        problems.append(f"{name}: {kept:,} records kept below {bound:,}, {e.distinct:,} distinct keys")
    if wrong:
        problems.append(
            f"{name}: {wrong:,} records kept below {bound:,} are not their key's latest, "
            f"e.g. {'; '.join(examples)}"
        )
    tail = (tail_records, tail_sha.hexdigest(), active_sha)
    tail_same = tail == (e.tail_records, e.tail_offsets_sha, e.active_sha)
    if not tail_same:
        problems.append(f"{name}: records from the bound {bound} up changed")
    # An independent decode of a sample: the pure-Python reader against the same expectation.
    seen = 0
    for f in files:
        if seen >= sample_batches:
            break
        try:
            batches = list(itertools.islice(iter_batches(f.read_bytes(), str(f)), sample_batches - seen))
        except CompactionError as err:
            problems.append(f"iter_batches: {err}")
            continue
        for batch in batches:
            for r in batch.records():
                k, digits = r.key or b"", (r.key or b"")[len(prefix) :]
                well_formed = len(k) == e.key_size and k.startswith(prefix) and digits.isdigit()
                kid = int(digits) if well_formed else -1
                if not 0 <= kid < e.keys:
                    problems.append(f"{name}: iter_batches finds the key {k!r} @ {r.offset}")
                elif r.offset < bound and e.latest[kid] != r.offset:
                    problems.append(f"{name}: iter_batches finds {k!r} @ {r.offset}, latest {e.latest[kid]}")
            seen += 1
    print(
        f"verify: {kept:,} records kept below {bound:,} == {e.distinct:,} distinct keys: "
        f"{'yes' if kept == e.distinct else 'NO'}; latest-per-key for all keys: "
        f"{'yes' if not wrong else 'NO'}; tail unchanged: {'yes' if tail_same else 'NO'}; "
        f"{seen} batches re-decoded with iter_batches",
        flush=True,
    )
    return problems, _peak_rss()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000_000, help="distinct keys N")
    ap.add_argument(
        "--dup", type=float, default=0.5, help="extra records, as a multiple of N, updating random keys"
    )
    ap.add_argument("--key-size", type=int, default=32, help="key bytes (b'key-' + zero-padded id)")
    ap.add_argument("--value-size", default="8")
    ap.add_argument("--segment-bytes", type=int, default=128 * MIB, help="generator roll size")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="512m")
    ap.add_argument("--executor-memory", default="512m", help="spark.executor.memory (used off local mode)")
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="K=V",
        help="extra Spark conf, e.g. spark.kafka.compaction.partitionTaskMaxBytes=268435456",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--sample-batches",
        type=int,
        default=50,
        help="output batches re-decoded with the pure-Python reader (iter_batches); 0: none",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "keys")
    ap.add_argument("--keep", action="store_true", help="keep the log dir afterwards")
    ap.add_argument(
        "--repo",
        type=Path,
        default=REPO,
        help="checkout whose spark-submit.sh and compaction/ run (e.g. a `git archive HEAD` copy)",
    )
    args = ap.parse_args()
    args.repo = args.repo.resolve()
    sys.path.insert(0, str(REPO / "bench"))
    import e2e  # bench/e2e.py: log_files, print_spark_stages, finish

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    log_dir, event_dir, report_path = args.out / "kafka-logs", args.out / "eventlog", args.out / "report.json"
    event_dir.mkdir()
    gen_s = generate(log_dir, args)
    files = e2e.log_files(log_dir)
    size = sum(f.stat().st_size for f in files)
    print(
        f"generated {log_dir}: 1 partition, {args.keys:,} keys x (1 + {args.dup}) = "
        f"{args.keys + round(args.dup * args.keys):,} records, keys {args.key_size} B, "
        f"values {args.value_size} B, "
        f"{len(files)} segments, {size / MB:,.1f} MB in {gen_s:.1f} s",
        flush=True,
    )

    t = time.perf_counter()
    scan_base = _reset_peak_rss()
    (part_dir,) = (d for d in sorted(log_dir.iterdir()) if d.is_dir())
    expected = Expected(part_dir, args.keys, args.key_size)
    scan_s, scan_rss = time.perf_counter() - t, _peak_rss()
    print(
        f"scanned the input for the check in {scan_s:.1f} s (latest offset of {args.keys:,} key ids: "
        f"{expected.latest.nbytes / MB:,.1f} MB; peak RSS {scan_rss / MB:,.0f} MB, "
        f"from {scan_base / MB:,.0f} MB)",
        flush=True,
    )

    cmd = [
        str(args.repo / "spark-submit.sh"),
        "--master",
        args.master,
        "--driver-memory",
        args.driver_memory,
        "--conf",
        f"spark.executor.memory={args.executor_memory}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir=file://{event_dir}",
        "--conf",
        "spark.eventLog.compress=false",
        "--conf",
        "spark.eventLog.logStageExecutorMetrics=true",
        "--conf",
        "spark.executor.processTreeMetrics.enabled=true",
        *(a for kv in args.conf for a in ("--conf", kv)),
        "--log-dir",
        str(log_dir),
        "--report",
        str(report_path),
        "--now-ms",
        str(NOW_MS),
    ]
    print("job:", shlex.join(cmd), flush=True)
    t = time.perf_counter()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        cmd, cwd=args.repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    mem = TreeMemory(proc.pid).start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    mem.stop()
    (args.out / "job.stdout").write_text(out)
    (args.out / "job.stderr").write_text(err)
    if proc.returncode != 0 or not report_path.exists():
        print(f"job failed (exit {proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}", file=sys.stderr)
        return 1
    report = json.loads(report_path.read_text())
    tm, tot = report["timings"], report["totals"]
    part = report["partitions"][0]
    t = time.perf_counter()
    verify_base = _reset_peak_rss()
    problems, verify_rss = verify(expected, report, args.sample_batches)
    verify_s = time.perf_counter() - t
    print(
        f"verified the output in {verify_s:.1f} s; verification peak RSS (ru_maxrss, reset before each "
        f"pass): input pass {scan_rss / MB:,.0f} MB (from {scan_base / MB:,.0f} MB), output pass "
        f"{verify_rss / MB:,.0f} MB (from {verify_base / MB:,.0f} MB)",
        flush=True,
    )

    bound = part["firstUncleanableOffset"]
    distinct = expected.distinct
    key_bytes = distinct * args.key_size  # every key is --key-size bytes (checked)
    ev = event_metrics(event_dir)
    rounds = math.ceil(distinct / KAFKA_MAP_KEYS)
    no_start = tm.get("planSeconds", 0) + tm.get("stagesSeconds", 0) + tm.get("commitSeconds", 0)

    print()
    print(
        f"partition: {part['topic']}-{part['partition']} {part['status']}, "
        f"dirty [{part['firstDirtyOffset']}, "
        f"{bound}), {part['groups']} group(s), {part['recordsRead']:,} records read, "
        f"{part['recordsWritten']:,} written"
    )
    print(f"distinct keys below the bound: {distinct:,}")
    print(
        f"key-set size: {key_bytes / MB:,.1f} MB of key bytes; {(key_bytes + 8 * distinct) / MB:,.1f} MB "
        f"with an 8-byte offset each; Kafka's map would need {24 * distinct / 0.9 / MB:,.1f} MB"
    )
    print(
        f"memory given: --driver-memory {args.driver_memory}, spark.executor.memory {args.executor_memory} "
        f"(master {args.master})"
    )
    print(
        f"high-water marks: driver JVM VmHWM {mem.max_hwm('java') / MB:,.0f} MB; "
        f"largest Python process VmHWM {mem.max_hwm('python') / MB:,.0f} MB "
        f"({mem.count('python')} Python processes seen); peak sampled RssAnon (without mapped "
        f"segment pages): JVM {mem.max_anon('java') / MB:,.0f} MB, "
        f"largest Python {mem.max_anon('python') / MB:,.0f} MB"
    )
    print(
        f"peak summed RSS: whole tree {mem.peak_sum['all'] / MB:,.0f} MB "
        f"(JVM {mem.peak_sum['java'] / MB:,.0f} MB, "
        f"Python {mem.peak_sum['python'] / MB:,.0f} MB), sampled every {mem.interval} s"
    )
    print(
        f"spark (event log): Memory Bytes Spilled {ev['Memory Bytes Spilled'] / MB:,.1f} MB, "
        f"Disk Bytes Spilled {ev['Disk Bytes Spilled'] / MB:,.1f} MB, max task Peak Execution Memory "
        f"{ev['Peak Execution Memory'] / MB:,.1f} MB, peak JVMHeapMemory {ev['JVMHeapMemory'] / MB:,.0f} MB, "
        f"ProcessTreePythonRSSMemory {ev['ProcessTreePythonRSSMemory'] / MB:,.0f} MB"
    )
    print(
        f"time: spark-submit wall {wall:.1f} s; excl. start-up {no_start:.1f} s "
        f"({size / MB / max(no_start, 1e-9):,.1f} MB/s, "
        f"{tot['recordsRead'] / max(no_start, 1e-9) / 1e6:,.2f} M records/s); "
        + ", ".join(f"{k.removesuffix('Seconds')} {v:.1f}" for k, v in tm.items())
    )
    print(
        f"rounds: this job 1 (checkpoint -> {bound:,}); Kafka's default map holds {KAFKA_MAP_KEYS:,} keys "
        f"per round -> at least {rounds} round(s) for {distinct:,} keys"
    )
    e2e.print_spark_stages(event_dir)
    if part["status"] != "cleaned" or part["recordsWritten"] < distinct:
        problems.append(f"partition {part['status']}: {part['reason']}")
    ok = "verification: OK (records kept below the bound == distinct keys, each the latest of its key)"
    return e2e.finish(problems, log_dir, args.keep, ok)


if __name__ == "__main__":
    sys.exit(main())
