package kafkalog;

import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/** Column pruning, and COUNT(*) without GROUP BY pushed down (one partial count per input partition). */
final class KafkaLogScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
  private final ReadOptions options;
  private StructType required;
  private boolean countStar;

  KafkaLogScanBuilder(ReadOptions options) {
    this.options = options;
    this.required = LogSchema.of(options.includeHeaders);
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    required = requiredSchema;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    countStar = aggregation.groupByExpressions().length == 0 && aggregation.aggregateExpressions().length == 1
        && aggregation.aggregateExpressions()[0] instanceof CountStar;
    return countStar;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return false; // one partial count per input partition; Spark sums them
  }

  @Override
  public Scan build() {
    return new KafkaLogScan(countStar ? LogSchema.COUNT : required, countStar, options);
  }
}
