package kafkalog;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

final class SegmentReaderFactory implements PartitionReaderFactory {
  private final StructType schema;
  private final boolean countStar;
  private final ReadOptions options;
  private final SerializableConfiguration conf;

  SegmentReaderFactory(StructType schema, boolean countStar, ReadOptions options, SerializableConfiguration conf) {
    this.schema = schema;
    this.countStar = countStar;
    this.options = options;
    this.conf = conf;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return !countStar;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new CountReader((SegmentPartition) partition, options, conf.value());
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new ColumnarReader((SegmentPartition) partition, schema, options, conf.value());
  }
}
