package kafkalog;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;

/**
 * An input partition's row count as one row (the pushed-down COUNT(*)): the v2 headers' record
 * counts. With checkCrc (the default) every batch is read and its CRC checked first; without,
 * only the 61-byte headers are read, trusted as Parquet's count trusts its footers. A batch cut
 * by the offsets asked for is decoded to count its records in range.
 */
final class CountReader implements PartitionReader<InternalRow> {
  private final SegmentReader reader;
  private boolean done;

  CountReader(SegmentPartition split, ReadOptions options, Configuration conf) {
    this.reader = new SegmentReader(split, options, conf);
  }

  @Override
  public boolean next() {
    return !done;
  }

  @Override
  public InternalRow get() {
    done = true;
    long n = 0;
    boolean crc = reader.options.checkCrc;
    try {
      while (reader.nextBatch()) {
        SegmentDecoder d = reader.decoder;
        boolean rows = !d.isControl() || reader.options.includeControl;
        if (rows && reader.wholeBatchInRange()) {
          if (crc) {
            d.readBody(true);
          }
          n += d.recordsCount;
        } else if (rows) {
          d.readBody(crc);
          while (d.nextRecord()) {
            n += reader.inRange(d.offset) ? 1 : 0;
          }
        } else if (crc) {
          d.readBody(true);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return new GenericInternalRow(new Object[] {n});
  }

  @Override
  public void close() throws IOException {
    reader.close();
  }
}
