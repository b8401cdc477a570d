"""Parse throughput of compaction.kernels.scan against the disk's sequential read speed.

    .venv/bin/python bench/parse.py [--mib 512] [--codec-mib 128] [--file SEGMENT.log] [--out bench/out]

Generates (or takes) a .log of uncompressed v2 batches of ~16 KiB (Kafka's default batch.size) with
126-byte records (16-byte keys, 10% distinct keys), plus one smaller file per codec holding the same
records, then prints for each:

  * cold-ish sequential read speed (`cat FILE > /dev/null` after dropping the page cache when we may;
    otherwise it is a warm read and says so),
  * kernels only: scan_batches + walk_records (no CRC, no copies),
  * scan_segment: the above plus CRC-32C of every batch (and decompression for codecs),
  * scan stage: scan_segment + gather_keys + pyarrow group_by(key).max(offset),

in MB/s of file bytes (and of uncompressed record bytes for codecs), records/s and the ratio to the
read speed. The numba warm-up (compile, or cache load) is timed separately. Not a test.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e import drop_caches

from compaction.format.layout import ATTRIBUTES_OFFSET, MAGIC_V2, RECORD_BATCH_OVERHEAD

RECORD_SIZE = 126  # bytes on the wire, length varint included
KEY_SIZE = 16
BATCH_BYTES = 16384  # Kafka producer batch.size default
DISTINCT_KEY_RATIO = 0.10
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
MB = 1e6


def _template_batch():
    """One batch of 126-byte records; returns (bytes, key positions inside it, record count)."""
    from compaction.format.batch import Record
    from compaction.format.batch_build import build_batch
    from compaction.kernels.scan import scan_segment

    records, size = [], RECORD_BATCH_OVERHEAD
    i = 0
    while size + RECORD_SIZE <= BATCH_BYTES:
        # offsetDelta needs 2 varint bytes from 64 on: shrink the value to keep 126 bytes per record
        value_len = RECORD_SIZE - 25 - (1 if i >= 64 else 0)  # 2+1+1+1+1+16+2 (+value) +1
        records.append(Record(i, 1_700_000_000_000, b"k" * KEY_SIZE, b"v" * value_len))
        size += RECORD_SIZE
        i += 1
    raw = build_batch(records, base_offset=0)
    s = scan_segment(np.frombuffer(raw, np.uint8))
    assert len(raw) == RECORD_BATCH_OVERHEAD + RECORD_SIZE * len(records), "record layout drifted from 126 B"
    return raw, s.records.key_pos.copy(), len(records)


def generate_plain(path: Path, mib: int, seed: int = 1) -> int:
    """Tile the template batch, give each record a random key and each batch its offsets and CRC."""
    import crc32c

    raw, key_pos, per_batch = _template_batch()
    n_batches = max(1, (mib << 20) // len(raw))
    n_records = n_batches * per_batch
    rng = np.random.default_rng(seed)
    key_ids = rng.integers(0, max(1, int(n_records * DISTINCT_KEY_RATIO)), n_records)
    digits = np.char.zfill(key_ids.astype("U16"), KEY_SIZE).astype("S16")  # 16 ASCII digits per key
    key_bytes = np.frombuffer(digits.tobytes(), np.uint8).reshape(n_batches, per_batch, KEY_SIZE)
    block = np.tile(np.frombuffer(raw, np.uint8), (n_batches, 1))
    cols = (key_pos[:, None] + np.arange(KEY_SIZE)[None, :]).ravel()
    block[:, cols] = key_bytes.reshape(n_batches, -1)
    base = (np.arange(n_batches, dtype=">i8") * per_batch).view(np.uint8).reshape(n_batches, 8)
    block[:, 0:8] = base
    for b in range(n_batches):  # the CRC does not cover baseOffset, only the keys changed
        row = block[b]
        row[17:21] = np.frombuffer(struct.pack(">I", crc32c.crc32c(row[21:].data)), np.uint8)
    block.tofile(path)
    return n_records


def generate_codec(src: Path, dst: Path, codec: int, mib: int) -> None:
    """Re-encode the first `mib` MiB of batches of `src` with `codec` (same records, new CRCs)."""
    from compaction.kernels.scan import scan_batches
    from compaction.tools.generator_segments import compress_batch

    data = np.fromfile(src, np.uint8, count=mib << 20)
    b = scan_batches(data)
    with open(dst, "wb") as out:
        for pos, size in zip(b.position.tolist(), b.size.tolist()):
            plain = bytearray(data[pos : pos + size].tobytes())
            struct.pack_into(">h", plain, ATTRIBUTES_OFFSET, codec)
            out.write(compress_batch(memoryview(plain), codec))


def read_speed(path: Path) -> tuple[float, bool]:
    dropped = drop_caches()
    t = time.perf_counter()
    subprocess.run(f"cat '{path}' > /dev/null", shell=True, check=True)
    return path.stat().st_size / (time.perf_counter() - t), dropped


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure(path: Path, label: str, repeat: int) -> None:
    import pyarrow as pa

    from compaction.kernels.scan import scan_batches, scan_segment, walk_records

    speed, cold = read_speed(path)
    buf = np.fromfile(path, np.uint8)
    s = scan_segment(buf, str(path))
    n = len(s.records)
    # the uncompressed equivalent
    raw_bytes = (RECORD_BATCH_OVERHEAD * len(s.batches) + len(s.side)) if len(s.side) else len(buf)

    def kernels():
        b = scan_batches(buf)
        plain = b.magic == MAGIC_V2
        walk_records(
            buf,
            b.position[plain] + RECORD_BATCH_OVERHEAD,
            b.position[plain] + b.size[plain],
            b.base_offset[plain],
            b.base_timestamp[plain],
            b.timestamp_type[plain],
            b.max_timestamp[plain],
            b.records_count[plain],
        )

    def stage():
        seg = scan_segment(buf, str(path))
        t = pa.table({"key": seg.keys_arrow(), "offset": seg.records.offset})
        t.group_by("key").aggregate([("offset", "max")])

    size = len(buf)
    print(
        f"\n== {label}: {path.name}, {size / MB:.1f} MB on disk, {n:,} records "
        f"({'uncompressed ' + format(raw_bytes / MB, '.1f') + ' MB' if len(s.side) else 'uncompressed'})"
    )
    print(
        f"  sequential read (cat > /dev/null, {'cold: page cache dropped' if cold else 'WARM: could not drop caches'}):"
        f" {speed / MB:,.0f} MB/s"
    )
    rows = []
    if not len(s.side):
        rows.append(("kernels only (scan_batches + walk_records)", best_of(kernels, repeat)))
    rows.append(
        (
            "scan_segment (+ CRC-32C" + (", decompress)" if len(s.side) else ")"),
            best_of(lambda: scan_segment(buf, str(path)), repeat),
        )
    )
    rows.append(("scan stage (+ gather_keys, arrow group_by max)", best_of(stage, repeat)))
    for what, secs in rows:
        extra = f", {raw_bytes / secs / MB:,.0f} MB/s uncompressed" if len(s.side) else ""
        print(
            f"  {what:<48} {size / secs / MB:>8,.0f} MB/s{extra}, {n / secs / 1e6:6.1f} M records/s,"
            f" {size / secs / speed:5.2f}x read speed"
        )


def warm_up() -> float:
    t = time.perf_counter()
    from compaction.format.batch import Record
    from compaction.format.batch_build import build_batch
    from compaction.kernels import scan  # decorating is cheap; compilation is lazy

    raw = build_batch([Record(0, 0, b"k", b"v")])
    s = scan.scan_segment(np.frombuffer(raw, np.uint8))
    s.gather_keys()
    scan.walk_records(np.frombuffer(raw, np.uint8), [RECORD_BATCH_OVERHEAD], [len(raw)], [0], [0], [0], [0])
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512, help="size of the generated uncompressed file")
    ap.add_argument("--codec-mib", type=int, default=128, help="uncompressed MiB re-encoded per codec")
    ap.add_argument("--file", type=Path, help="measure this segment instead of generating one")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    cache = os.environ.get("NUMBA_CACHE_DIR", "next to the sources (__pycache__)")
    print(f"numba warm-up (first calls: compile, or load from the cache at {cache}): {warm_up():.2f} s")
    if args.file:
        measure(args.file, "given file", args.repeat)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    plain = args.out / f"plain-{args.mib}MiB.log"
    if not plain.exists():
        t = time.perf_counter()
        n = generate_plain(plain, args.mib)
        print(f"generated {plain} ({n:,} records) in {time.perf_counter() - t:.1f} s")
    measure(plain, "uncompressed", args.repeat)
    for codec, name in CODECS.items():
        path = args.out / f"{name}-{args.codec_mib}MiB.log"
        if not path.exists():
            t = time.perf_counter()
            generate_codec(plain, path, codec, args.codec_mib)
            print(f"\ngenerated {path} in {time.perf_counter() - t:.1f} s")
        measure(path, name, args.repeat)


if __name__ == "__main__":
    main()
