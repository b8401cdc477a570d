package kafkalog;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

final class KafkaLogScan implements Scan, Batch {
  private final StructType schema;
  private final boolean countStar;
  private final ReadOptions options;
  private final SerializableConfiguration conf;

  KafkaLogScan(StructType schema, boolean countStar, ReadOptions options) {
    this.schema = schema;
    this.countStar = countStar;
    this.options = options;
    this.conf = new SerializableConfiguration(SparkSession.active().sessionState().newHadoopConf());
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "kafka_log_jvm " + options.path + (countStar
        ? (options.checkCrc ? " [COUNT(*) from batch headers, every CRC checked]" : " [COUNT(*) from batch headers]")
        : " " + schema.simpleString());
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return LogDir.plan(options, conf.value(), options.splitBytes).toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new SegmentReaderFactory(schema, countStar, options, conf);
  }
}
