package kafkalog;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * An input partition's rows as columnar batches of only the columns Spark asked for: at most
 * batchRows rows and about batchBytes of keys and values each (at least one row).
 */
final class ColumnarReader implements PartitionReader<ColumnarBatch> {
  private final SegmentReader reader;
  private final int[] columns; // indexes into LogSchema.FULL
  private final OnHeapColumnVector[] vectors;
  private final ColumnarBatch out;
  private final byte[] topic;
  private boolean inBatch;

  ColumnarReader(SegmentPartition split, StructType schema, ReadOptions options, Configuration conf) {
    this.reader = new SegmentReader(split, options, conf);
    reader.keepHeaders = schema.getFieldIndex("headers").isDefined();
    this.columns = new int[schema.fields().length];
    for (int c = 0; c < columns.length; c++) {
      columns[c] = LogSchema.FULL.fieldIndex(schema.fields()[c].name());
    }
    this.vectors = OnHeapColumnVector.allocateColumns(options.batchRows, schema);
    this.out = new ColumnarBatch(vectors);
    this.topic = split.topic.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public boolean next() {
    for (WritableColumnVector v : vectors) {
      v.reset();
    }
    int n = 0;
    long bytes = 0;
    ReadOptions o = reader.options;
    try {
      while (n < o.batchRows && bytes < o.batchBytes) {
        SegmentDecoder d = reader.decoder;
        if (!inBatch) {
          if (!reader.nextBatch()) {
            break;
          }
          d = reader.decoder;
          d.readBody(o.checkCrc);
          inBatch = !d.isControl() || o.includeControl;
          continue;
        }
        if (!d.nextRecord()) {
          inBatch = false;
          continue;
        }
        if (reader.inRange(d.offset)) {
          put(n++, d);
          bytes += Math.max(d.keyLength, 0) + Math.max(d.valueLength, 0);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    out.setNumRows(n);
    return n > 0;
  }

  private void put(int row, SegmentDecoder d) {
    for (int c = 0; c < columns.length; c++) {
      WritableColumnVector v = vectors[c];
      switch (columns[c]) {
        case 0 /* key */ -> putBytes(v, row, d.array, d.keyOffset, d.keyLength);
        case 1 /* value */ -> putBytes(v, row, d.array, d.valueOffset, d.valueLength);
        case 2 /* topic */ -> v.putByteArray(row, topic, 0, topic.length);
        case 3 /* partition */ -> v.putInt(row, reader.split.partition);
        case 4 /* offset */ -> v.putLong(row, d.offset);
        case 5 /* timestamp */ -> v.putLong(row, d.timestamp * 1000L);
        case 6 /* timestampType */ -> v.putInt(row, d.logAppendTime() ? 1 : 0);
        case 7 /* headers */ -> putHeaders(v, row, d);
        case 8 /* leaderEpoch */ -> v.putInt(row, d.leaderEpoch);
        case 9 /* producerId */ -> v.putLong(row, d.producerId);
        case 10 /* producerEpoch */ -> v.putInt(row, d.producerEpoch);
        case 11 /* baseSequence */ -> v.putInt(row, d.baseSequence);
        case 12 /* sequence */ -> v.putInt(row, d.sequence);
        case 13 /* isTransactional */ -> v.putBoolean(row, d.isTransactional());
        case 14 /* isControl */ -> v.putBoolean(row, d.isControl());
        default -> throw new IllegalStateException("kafka_log_jvm has no column " + columns[c]);
      }
    }
  }

  private static void putHeaders(WritableColumnVector v, int row, SegmentDecoder d) {
    WritableColumnVector pairs = v.arrayData();
    int start = pairs.getElementsAppended();
    for (int h = 0; h < d.headerCount; h++) {
      int[] at = d.headers;
      pairs.getChild(0).appendByteArray(d.array, at[4 * h], at[4 * h + 1]);
      if (at[4 * h + 3] < 0) {
        pairs.getChild(1).appendNull();
      } else {
        pairs.getChild(1).appendByteArray(d.array, at[4 * h + 2], at[4 * h + 3]);
      }
      pairs.appendStruct(false);
    }
    v.putArray(row, start, d.headerCount);
  }

  private static void putBytes(WritableColumnVector v, int row, byte[] array, int offset, int length) {
    if (length < 0) {
      v.putNull(row);
    } else {
      v.putByteArray(row, array, offset, length);
    }
  }

  @Override
  public ColumnarBatch get() {
    return out;
  }

  @Override
  public void close() throws IOException {
    out.close();
    reader.close();
  }
}
