"""Erasing keys (`--erase-keys FILE`, the file format in format/erase_keys.py): the listed keys in their
compact shipped form, and the map that makes the rewrite drop every record of a listed key.

How erasing decides: a record whose key is listed gets the offset-map answer `ERASED` (no offset
is >= it), so `keep.keep_records` drops it, tombstones included, and every batch rule that
follows (empty batches kept for producer state, transactions, control batches, `.txnindex`)
applies unchanged. `ErasingMap` wraps whatever `OffsetMap` the path uses (whole-partition or
ranges), so both paths erase alike. Records of control batches are never erased (their key is
the marker's, not data).
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from compaction.format import batch as fb
from compaction.format.erase_keys import parse_key_file, read_key_file
from compaction.kernels.keyindex import KeyIndex, max_by_key
from compaction.runtime.s3 import redact_uri
from compaction.runtime.storage import Storage

ERASED = np.iinfo(np.int64).max  # the map's answer for a listed key: no record offset reaches it


@dataclass(frozen=True)
class EraseSet:
    """The listed keys in their shipped form: every key's bytes joined (`data`, `offsets`), the
    topic each is limited to (`scope`: an index into `topics`, -1 for every topic). It pickles as
    these few arrays, so the specs of a Spark job (one pickle per broadcast) carry it once.
    `digest` names it for the per-process cache of compiled lookups."""

    data: bytes
    offsets: np.ndarray  # int64, len(keys) + 1
    scope: np.ndarray  # int32 per key
    topics: tuple[str, ...]
    digest: str = field(default="")
    every_topic: bool = False  # some key is listed without a topic

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def keys_array(self, topic: str) -> pa.Array:
        """The distinct keys that apply to `topic`, in file order (their positions are the bits of
        `ErasingMap.found_bits`), as one Arrow array over the key bytes: no Python object per key."""
        t = self.topics.index(topic) if topic in self.topics else -2
        rows = np.flatnonzero((self.scope == -1) | (self.scope == t))
        buffers = [None, pa.py_buffer(self.offsets), pa.py_buffer(self.data)]
        keys = pa.Array.from_buffers(pa.large_binary(), len(self), buffers)
        if len(rows) < len(self):  # some keys are another topic's
            keys = keys.take(pa.array(rows))
        return max_by_key(keys)[0]

    def keys_for(self, topic: str) -> list[bytes]:
        """`keys_array` as Python bytes (tests, small lists)."""
        return self.keys_array(topic).to_pylist()

    def applies_to(self, topic: str) -> bool:
        return self.every_topic or topic in self.topics


def build_erase_set(entries: list[tuple[str | None, bytes]]) -> EraseSet:
    topics = tuple(dict.fromkeys(t for t, _ in entries if t is not None))
    at = {t: i for i, t in enumerate(topics)}
    offsets = np.zeros(len(entries) + 1, np.int64)
    np.cumsum([len(k) for _, k in entries], out=offsets[1:])
    data = b"".join(k for _, k in entries)
    scope = np.array([at[t] if t is not None else -1 for t, _ in entries], np.int32)
    names = "\0".join(topics).encode()
    digest = hashlib.sha256(data + offsets.tobytes() + scope.tobytes() + names).hexdigest()
    return EraseSet(data, offsets, scope, topics, digest, bool((scope == -1).any()))


def read_uri(uri: str) -> bytes:
    """A key file's bytes from a local path or a URI the job reads log dirs from (s3://, ...):
    with a cluster deploy mode the driver runs on another host than the launcher."""
    storage, path = Storage.for_uri(uri)
    return storage.read_bytes(path)


# The last key file parsed in this process, by its content's digest: the driver checks the file
# with the options and uses it in the round, and parsing a million keys takes seconds.
_LOADED: dict[str, EraseSet] = {}


def load_erase_set(uri: str) -> EraseSet:
    """The key file at `uri` (format/erase_keys.py), in its shipped form."""
    shown = redact_uri(uri)
    data = read_key_file(uri, read_uri, shown)
    digest = hashlib.sha256(data).hexdigest()
    if digest not in _LOADED:
        _LOADED.clear()
        _LOADED[digest] = build_erase_set(parse_key_file(data, shown))
    return _LOADED[digest]


# --- executor side ---------------------------------------------------------------------------------

# Compiled lookups per (digest, topic), kept by a Python worker from task to task of a run.
_COMPILED: dict[tuple[str, str], tuple[KeyIndex, int]] = {}


def compiled(erase: EraseSet, topic: str) -> tuple[KeyIndex, int]:
    """(lookup over the keys that apply to `topic`, how many there are), built once per worker."""
    key = (erase.digest, topic)
    if key not in _COMPILED:
        if len(_COMPILED) > 64:  # other runs' sets: a worker outlives a run only in tests
            _COMPILED.clear()
        keys = erase.keys_array(topic)
        _COMPILED[key] = (KeyIndex(keys), len(keys))
    return _COMPILED[key]


_COUNTS: dict[tuple[str, str], int] = {}


def key_count(erase: EraseSet, topic: str) -> int:
    """How many distinct listed keys apply to `topic` (the driver's report; once per topic)."""
    key = (erase.digest, topic)
    if key not in _COUNTS:
        _COUNTS[key] = len(erase.keys_array(topic))
    return _COUNTS[key]


def erased_records(index: KeyIndex, keys: pa.Array, control: np.ndarray) -> np.ndarray:
    """Per record: the position of its key among the listed ones, or -1 (not listed, null key, or a
    control batch's record)."""
    hit = index.lookup(keys)
    return np.where(control, -1, hit)


def erased_records_py(listed: list[bytes], keys: list[bytes | None], control: list[bool]) -> list[int]:
    """`erased_records` in plain Python (the reference the tests hold it to)."""
    at: dict[bytes, int] = {}
    for i, k in enumerate(listed):
        at.setdefault(k, i)
    return [-1 if c or k is None else at.get(k, -1) for k, c in zip(keys, control, strict=True)]


def erase_found(found: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """The offset map's answers with every listed key's record set to `ERASED`."""
    return np.where(hit >= 0, ERASED, found)


def pack_bits(found: np.ndarray) -> str:
    """A key-found bitmap as text for a result row (zlib + base64: millions of keys, few bytes)."""
    return base64.b64encode(zlib.compress(np.packbits(found).tobytes())).decode("ascii")


def unpack_bits(text: str | None, n: int) -> np.ndarray:
    if not text:
        return np.zeros(n, bool)
    packed = np.frombuffer(zlib.decompress(base64.b64decode(text)), np.uint8)
    return np.unpackbits(packed, count=n).astype(bool)


@dataclass
class EraseStats:
    records: int = 0
    bytes: int = 0


class ErasingMap:
    """An `OffsetMap` that answers `ERASED` for the records of listed keys and the wrapped map's
    answer for the others. Counts per group the records it erases and their bytes (key + value),
    and which listed keys it met (`found_bits`): counts only, never the keys."""

    def __init__(self, inner, erase: EraseSet, topic: str) -> None:
        self.inner = inner
        self.hashes_keys = inner.hashes_keys
        self.verified = inner.verified
        self.index, n = compiled(erase, topic)
        self.met = np.zeros(n, bool)
        self.stats: dict[int, EraseStats] = {}

    def found(self, spec, seg, scan) -> np.ndarray:
        found = self.inner.found(spec, seg, scan)
        rec = scan.records
        b = scan.batches
        control = (b.magic >= 2) & ((b.attributes.astype(np.int64) & fb.CONTROL_MASK) != 0)
        hit = erased_records(self.index, scan.keys_arrow(), control[rec.batch_index])
        erased = hit >= 0
        st = self.stats.setdefault(spec.group_id, EraseStats())
        if erased.any():
            self.met[hit[erased]] = True
            st.records += int(erased.sum())
            st.bytes += int(rec.key_len[erased].sum() + np.maximum(rec.value_len[erased], 0).sum())
        return erase_found(found, hit)

    def erased_in(self, group_id: int) -> int:
        return self.stats.get(group_id, EraseStats()).records

    def erase_counts(self, group_id: int) -> dict[str, int]:
        """The erase counts of a group's result (`GroupResult` fields)."""
        st = self.stats.get(group_id, EraseStats())
        return {"erased_records": st.records, "erased_bytes": st.bytes}

    def found_bits(self) -> str:
        """Which listed keys the unit met so far (`pack_bits`), for its first row once it is done."""
        return pack_bits(self.met)
