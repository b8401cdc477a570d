"""Topic configs the cleaner reads: Kafka's names and defaults, ``TopicConfig``, and
``resolve_topic_config`` (``LogConfig.fromProps``: per-topic override > job-wide option > Kafka
default, validated against ConfigDef's bounds; docs/kafka-rules.md#configs)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


INT_MAX = 2**31 - 1  # Integer.MAX_VALUE: the top of Kafka's INT configs
EXCERPT_CHARS = 200  # of an offending value quoted in an error


def excerpt(value: object) -> str:
    """`value` as an error quotes it: its repr, at most ~EXCERPT_CHARS characters, on one line."""
    if isinstance(value, str) and len(value) > EXCERPT_CHARS:
        return f"{value[:EXCERPT_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= EXCERPT_CHARS else f"{text[:EXCERPT_CHARS]}... ({len(text)} characters)"


def _parse_policy(value: object, label: str = CLEANUP_POLICY) -> tuple[str, ...]:
    # Kafka's LIST type: comma separated, trimmed; LogConfig lower-cases before matching.
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = value
    else:
        raise ValueError(f"{label}={excerpt(value)} is not a list of policies")
    policy = tuple(item.strip().lower() for item in items if item.strip())
    # Kafka's `ValidList.in("compact", "delete")`
    if not policy or any(p not in (POLICY_COMPACT, POLICY_DELETE) for p in policy):
        raise ValueError(f"{label}={excerpt(value)} is not compact, delete or compact,delete")
    return policy


# Kafka's Long.parseLong / Integer.parseInt after ConfigDef's trim: an optional sign and digits.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_LONG_DIGITS = 19


def parse_int(name: str, value: object, minimum: int, maximum: int) -> int:
    """Kafka's INT/LONG config types: a JSON integer or a decimal string of one (not 1.5, not
    1e3, not true), within [minimum, maximum]."""
    text = value.strip() if isinstance(value, str) else ""
    if text and _INTEGER.fullmatch(text):
        digits = text.lstrip("+-").lstrip("0")
        # Beyond a long's digits it is out of range whatever it says (and never parsed whole).
        parsed = int(text) if len(digits) <= _LONG_DIGITS else (-1 if text[0] == "-" else 1) * (LONG_MAX + 1)
    elif isinstance(value, int) and not isinstance(value, bool):
        parsed = value
    else:
        raise ValueError(f"{name}={excerpt(value)} is not an integer")
    if not minimum <= parsed <= maximum:
        raise ValueError(f"{name}={excerpt(value)} is outside [{minimum}, {maximum}]")
    return parsed


def parse_double(value: object, label: str) -> float:
    """Kafka's DOUBLE type: a JSON number or a decimal string of one (ValueError naming `label`)."""
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError
        return float(value.strip()) if isinstance(value, str) else float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{label}={excerpt(value)} is not a number") from None


def _parse_ratio(value: object, label: str = MIN_CLEANABLE_DIRTY_RATIO) -> float:
    """Kafka's DOUBLE type, in [0, 1] (NaN and infinities are not)."""
    ratio = parse_double(value, label)
    if not 0.0 <= ratio <= 1.0:  # False for NaN too
        raise ValueError(f"{label}={excerpt(value)} is outside [0, 1]")
    return ratio


# Kafka config name -> (TopicConfig field, minimum, maximum). Minimums follow ConfigDef, maximums
# the type: INT or LONG (docs/kafka-rules.md#configs).
_INT_CONFIGS = {
    DELETE_RETENTION_MS: ("delete_retention_ms", 0, LONG_MAX),
    MIN_COMPACTION_LAG_MS: ("min_compaction_lag_ms", 0, LONG_MAX),
    MAX_COMPACTION_LAG_MS: ("max_compaction_lag_ms", MIN_MAX_COMPACTION_LAG_MS, LONG_MAX),
    SEGMENT_BYTES: ("segment_bytes", MIN_SEGMENT_BYTES, INT_MAX),
    SEGMENT_INDEX_BYTES: ("segment_index_bytes", MIN_SEGMENT_INDEX_BYTES, INT_MAX),
    INDEX_INTERVAL_BYTES: ("index_interval_bytes", 0, INT_MAX),
    MAX_MESSAGE_BYTES: ("max_message_bytes", 0, INT_MAX),
}


def parse_config_value(name: str, value: object, key: str | None = None) -> object:
    """A topic-level config's value as the cleaner reads it; ValueError (naming `key`, the name
    as written, by default `name`, and an excerpt of the value) when Kafka would refuse it.
    Configs the cleaner does not read pass as they are."""
    label = key or name
    if name == CLEANUP_POLICY:
        return _parse_policy(value, label)
    if name == MIN_CLEANABLE_DIRTY_RATIO:
        return _parse_ratio(value, label)
    if name in _INT_CONFIGS:
        _, minimum, maximum = _INT_CONFIGS[name]
        return parse_int(label, value, minimum, maximum)
    return value


def resolve_topic_config(
    topic_overrides: Mapping[str, object] | None = None,
    job_options: Mapping[str, object] | None = None,
) -> TopicConfig:
    """``LogConfig.fromProps``: per-topic override > job-wide option > Kafka default.

    Both mappings use Kafka's topic config names; values may be strings (as read from a config
    file) or numbers. Names the cleaner does not read are ignored.
    """
    merged: dict[str, object] = {**(job_options or {}), **(topic_overrides or {})}
    values: dict[str, Any] = {}  # TopicConfig's fields by name, each parsed to its field's type
    if CLEANUP_POLICY in merged:
        values["cleanup_policy"] = _parse_policy(merged[CLEANUP_POLICY])
    if MIN_CLEANABLE_DIRTY_RATIO in merged:
        values["min_cleanable_dirty_ratio"] = _parse_ratio(merged[MIN_CLEANABLE_DIRTY_RATIO])
    for name, (attr, minimum, maximum) in _INT_CONFIGS.items():
        if name in merged:
            values[attr] = parse_int(name, merged[name], minimum, maximum)
    return TopicConfig(**values)
