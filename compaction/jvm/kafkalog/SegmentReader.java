package kafkalog;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The batches of an input partition's segments in log order, one segment open at a time; the
 * batches that hold no row of [lo, hi) are skipped unread (their bodies neither read nor checked).
 */
class SegmentReader implements AutoCloseable {
  // Hadoop's buffer of a local file, what a read after a skipped body reads at least: one batch
  // header (Spark's io.file.buffer.size, 64 KiB, is two batches of a typical log). Bodies bigger
  // than it are read straight into their array.
  static final int READ_AHEAD = SegmentDecoder.HEADER;

  final SegmentPartition split;
  final ReadOptions options;
  private final Configuration conf;
  private int next; // index of the next segment to open
  SegmentDecoder decoder;
  boolean keepHeaders; // each record's headers kept for the headers column

  SegmentReader(SegmentPartition split, ReadOptions options, Configuration conf) {
    this.split = split;
    this.options = options;
    this.conf = conf;
  }

  /** The next batch with an offset in [lo, hi), its header read and its body not; false at the end. */
  boolean nextBatch() {
    try {
      while (true) {
        if (decoder == null) {
          if (next == split.segments.length) {
            return false;
          }
          SegmentPartition.Segment s = split.segments[next++];
          Path path = new Path(s.uri());
          FileSystem fs = path.getFileSystem(conf);
          decoder = new SegmentDecoder(fs.open(path, READ_AHEAD), LogDir.display(s.uri()), s.size(), s.active(),
              options.maxBatchBytes, options.maxInflatedBatchBytes);
          decoder.keepHeaders = keepHeaders;
        }
        if (!decoder.nextBatch()) {
          decoder.close();
          decoder = null;
          continue;
        }
        if (decoder.lastOffset() >= split.lo && decoder.baseOffset < split.hi) {
          return true;
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Whether the current batch's records are all in [lo, hi): its header's count is theirs. */
  boolean wholeBatchInRange() {
    return decoder.baseOffset >= split.lo && decoder.lastOffset() < split.hi;
  }

  boolean inRange(long offset) {
    return offset >= split.lo && offset < split.hi;
  }

  @Override
  public void close() throws IOException {
    if (decoder != null) {
      decoder.close();
      decoder = null;
    }
  }
}
