"""A generated partition whose log ends inside transactions, as a broker stopped mid-transaction
leaves it: the active segment cut after a batch where some producer's transaction has data and
no marker, while committed and aborted transactions are held before it. The oracles here read
the generator's manifest only (not the reader under test)."""

from __future__ import annotations

import os

from structkit import bases, columns, seg_path, truncate_at_batch

from compaction.format.txnindex import AbortedTxn, read_txn_index, write_txn_index
from compaction.tools.generator import generate_log_dir
from compaction.tools.generator_plan import TXN_ABORTED, TXN_COMMITTED


def _held(m, cut: int) -> range:
    return range(min(cut, m.log_end_offset))


def open_offsets(m, cut: int) -> set[int]:
    """Offsets of the transactional data records held below `cut` whose producer has no marker
    after them below `cut`: the transactions open when the log ends there."""
    ended: set[int] = set()  # producers with a marker later in the held log
    out = set()
    for o in reversed(_held(m, cut)):
        pid = int(m.producer_id[o])
        if m.is_control[o]:
            ended.add(pid)
        elif m.txn[o] and pid not in ended:
            out.add(o)
    return out


def last_stable_offset(m, cut: int) -> int:
    """Kafka's LSO of the log ended at `cut`: the first offset of its earliest open transaction."""
    return min(open_offsets(m, cut), default=cut)


def _latest_of_its_key(m, cut: int) -> set[int]:
    latest = {m.key(o): o for o in _held(m, cut) if not m.is_control[o]}
    return set(latest.values())


def end_inside_transactions(root: str, manifest, topic: str, partition: int) -> int:
    """Cut the partition's active segment after the last of its batches where a transaction is
    open, one of its records the latest of its key, while a committed and an aborted one are
    held (their markers too); its `.txnindex` keeps
    the aborts whose markers remain. Returns the new log end offset."""
    m = manifest.partitions[(topic, partition)]
    part = os.path.join(root, f"{topic}-{partition}")
    active = bases(part)[-1]
    cols = columns(part, active)
    for k in range(len(cols.base_offset) - 1, 0, -1):
        cut = int(cols.last_offset[k - 1]) + 1
        outcomes = {int(m.txn[o]) for o in range(last_stable_offset(m, cut)) if m.is_control[o]}
        if {TXN_COMMITTED, TXN_ABORTED} <= outcomes and _latest_of_its_key(m, cut) & open_offsets(m, cut):
            break
    else:
        raise AssertionError(f"{part}: no batch of the active segment ends inside a transaction")
    truncate_at_batch(part, active, k)
    txnindex = seg_path(part, active, ".txnindex")
    if os.path.exists(txnindex):
        kept = [t for t in read_txn_index(open(txnindex, "rb").read()) if t.last_offset < cut]
        open(txnindex, "wb").write(write_txn_index(AbortedTxn(*t) for t in kept))
    return cut


def open_txn_log_dir(root: str, topics=(("orders", 1),)):
    """A generated log dir whose orders-0 ends inside transactions (committed and aborted ones
    before); (orders-0's manifest, its log end offset)."""
    manifest = generate_log_dir(
        root,
        topics=topics,
        records=1500,
        keys=400,
        codec="mixed",
        segment_bytes=12_000,
        tombstone_ratio=0.1,
        transactions=0.5,
        abort_ratio=0.4,
        seed=13,
    )
    cut = end_inside_transactions(root, manifest, "orders", 0)
    return manifest.partitions[("orders", 0)], cut
