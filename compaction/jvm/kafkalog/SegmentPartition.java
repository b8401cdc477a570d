package kafkalog;

import java.io.Serializable;

import org.apache.spark.sql.connector.read.InputPartition;

/** One input partition: consecutive segments of one topic-partition, rows in [lo, hi) of offsets. */
final class SegmentPartition implements InputPartition {
  /** One .log file: its URI, size when listed, and whether it is the partition's last (active) one. */
  record Segment(String uri, long baseOffset, long size, boolean active) implements Serializable {}

  final String topic;
  final int partition;
  final Segment[] segments;
  final long lo, hi;

  SegmentPartition(String topic, int partition, Segment[] segments, long lo, long hi) {
    this.topic = topic;
    this.partition = partition;
    this.segments = segments;
    this.lo = lo;
    this.hi = hi;
  }
}
