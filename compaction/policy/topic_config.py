"""Topic configs the cleaner reads: Kafka's names and defaults, ``TopicConfig``, and
``resolve_topic_config`` (``LogConfig.fromProps``: per-topic override > job-wide option > Kafka
default, validated against ConfigDef's bounds; docs/kafka-rules.md#configs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from compaction.format.layout import DEFAULT_INDEX_INTERVAL_BYTES, DEFAULT_MAX_INDEX_SIZE, RECORD_OVERHEAD_V0

LONG_MAX = 2**63 - 1  # Long.MAX_VALUE

# --- Kafka topic config names (TopicConfig) -----------------------------------------------------
CLEANUP_POLICY = "cleanup.policy"
MIN_CLEANABLE_DIRTY_RATIO = "min.cleanable.dirty.ratio"
DELETE_RETENTION_MS = "delete.retention.ms"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
MAX_COMPACTION_LAG_MS = "max.compaction.lag.ms"
SEGMENT_BYTES = "segment.bytes"
SEGMENT_INDEX_BYTES = "segment.index.bytes"
INDEX_INTERVAL_BYTES = "index.interval.bytes"
MAX_MESSAGE_BYTES = "max.message.bytes"
POLICY_COMPACT = "compact"
POLICY_DELETE = "delete"

# --- Kafka defaults at the snapshot (docs/kafka-rules.md#configs) ---------------------------------
DEFAULT_CLEANUP_POLICY = (POLICY_DELETE,)
DEFAULT_MIN_CLEANABLE_DIRTY_RATIO = 0.5
DEFAULT_DELETE_RETENTION_MS = 86_400_000
DEFAULT_MIN_COMPACTION_LAG_MS = 0
DEFAULT_MAX_COMPACTION_LAG_MS = LONG_MAX
DEFAULT_SEGMENT_BYTES = 1_073_741_824
DEFAULT_SEGMENT_INDEX_BYTES = DEFAULT_MAX_INDEX_SIZE
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588

# Lower bounds Kafka's ConfigDef enforces (docs/kafka-rules.md#configs); a value below is a config error, not
# a plan.
MIN_SEGMENT_BYTES = RECORD_OVERHEAD_V0
MIN_SEGMENT_INDEX_BYTES = 4
MIN_MAX_COMPACTION_LAG_MS = 1


@dataclass(frozen=True)
class TopicConfig:
    """The topic configs the cleaner reads (docs/kafka-rules.md#configs), already resolved and validated."""

    cleanup_policy: tuple[str, ...] = DEFAULT_CLEANUP_POLICY
    min_cleanable_dirty_ratio: float = DEFAULT_MIN_CLEANABLE_DIRTY_RATIO
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    min_compaction_lag_ms: int = DEFAULT_MIN_COMPACTION_LAG_MS
    max_compaction_lag_ms: int = DEFAULT_MAX_COMPACTION_LAG_MS
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    @property
    def compact(self) -> bool:
        """``LogConfig.compact``: the (lower-cased) policy list contains ``compact``."""
        return POLICY_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """``LogConfig.delete``: the policy list contains ``delete``."""
        return POLICY_DELETE in self.cleanup_policy


def _parse_policy(value: object) -> tuple[str, ...]:
    # Kafka's LIST type: comma separated, trimmed; LogConfig lower-cases before matching.
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[arg-type]
    return tuple(str(item).strip().lower() for item in items if str(item).strip())


def _parse_int(name: str, value: object, minimum: int) -> int:
    parsed = int(str(value).strip()) if isinstance(value, str) else int(value)  # type: ignore[arg-type]
    if parsed < minimum:
        raise ValueError(f"{name}={parsed} is below its minimum {minimum}")
    return parsed


def _parse_ratio(value: object) -> float:
    ratio = float(str(value).strip()) if isinstance(value, str) else float(value)  # type: ignore[arg-type]
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{MIN_CLEANABLE_DIRTY_RATIO}={ratio} is outside [0, 1]")
    return ratio


# Kafka config name -> (TopicConfig field, parser). Integer minimums follow ConfigDef
# (docs/kafka-rules.md#configs).
_INT_CONFIGS = {
    DELETE_RETENTION_MS: ("delete_retention_ms", 0),
    MIN_COMPACTION_LAG_MS: ("min_compaction_lag_ms", 0),
    MAX_COMPACTION_LAG_MS: ("max_compaction_lag_ms", MIN_MAX_COMPACTION_LAG_MS),
    SEGMENT_BYTES: ("segment_bytes", MIN_SEGMENT_BYTES),
    SEGMENT_INDEX_BYTES: ("segment_index_bytes", MIN_SEGMENT_INDEX_BYTES),
    INDEX_INTERVAL_BYTES: ("index_interval_bytes", 0),
    MAX_MESSAGE_BYTES: ("max_message_bytes", 0),
}


def resolve_topic_config(
    topic_overrides: Mapping[str, object] | None = None,
    job_options: Mapping[str, object] | None = None,
) -> TopicConfig:
    """``LogConfig.fromProps``: per-topic override > job-wide option > Kafka default.

    Both mappings use Kafka's topic config names; values may be strings (as read from a config
    file) or numbers. Names the cleaner does not read are ignored.
    """
    merged: dict[str, object] = {**(job_options or {}), **(topic_overrides or {})}
    values: dict[str, object] = {}
    if CLEANUP_POLICY in merged:
        values["cleanup_policy"] = _parse_policy(merged[CLEANUP_POLICY])
    if MIN_CLEANABLE_DIRTY_RATIO in merged:
        values["min_cleanable_dirty_ratio"] = _parse_ratio(merged[MIN_CLEANABLE_DIRTY_RATIO])
    for name, (attr, minimum) in _INT_CONFIGS.items():
        if name in merged:
            values[attr] = _parse_int(name, merged[name], minimum)
    return TopicConfig(**values)  # type: ignore[arg-type]
