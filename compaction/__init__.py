"""Offline Kafka log compaction on Spark."""

__version__ = "0.1.0"
