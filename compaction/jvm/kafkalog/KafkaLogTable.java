package kafkalog;

import java.util.EnumSet;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

final class KafkaLogTable implements SupportsRead {
  private final ReadOptions options;

  KafkaLogTable(ReadOptions options) {
    this.options = options;
  }

  @Override
  public String name() {
    return "kafka_log_jvm " + options.path;
  }

  @Override
  public StructType schema() {
    return LogSchema.of(options.includeHeaders);
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
    return new KafkaLogScanBuilder(options);
  }
}
