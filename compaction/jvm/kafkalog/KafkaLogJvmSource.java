package kafkalog;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A DataSource V2 over Kafka log dirs of v2 record batches, with the columns and rows of the
 * Python source {@code kafka_log}, column pruning and COUNT(*) pushed down. Registered as
 * {@code kafka_log_jvm}: under {@code kafka_log} Spark would resolve the name to this source and
 * refuse to register the Python one (DATA_SOURCE_ALREADY_EXISTS) in every session with this jar.
 */
public final class KafkaLogJvmSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "kafka_log_jvm";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return LogSchema.of("true".equalsIgnoreCase(options.getOrDefault("includeHeaders", "false").strip()));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new KafkaLogTable(new ReadOptions(properties));
  }
}
