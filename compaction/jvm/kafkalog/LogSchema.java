package kafkalog;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The columns of Spark's Kafka source, then what a log holds and a broker does not show (as kafka_log). */
final class LogSchema {
  private LogSchema() {}

  /** Every column, {@code headers} included: a column's index here is its code in ColumnarReader. */
  static final StructType FULL = new StructType(new StructField[] {
    DataTypes.createStructField("key", DataTypes.BinaryType, true),
    DataTypes.createStructField("value", DataTypes.BinaryType, true),
    DataTypes.createStructField("topic", DataTypes.StringType, true),
    DataTypes.createStructField("partition", DataTypes.IntegerType, true),
    DataTypes.createStructField("offset", DataTypes.LongType, true),
    DataTypes.createStructField("timestamp", DataTypes.TimestampType, true),
    DataTypes.createStructField("timestampType", DataTypes.IntegerType, true),
    DataTypes.createStructField("headers", DataTypes.createArrayType(new StructType(new StructField[] {
      DataTypes.createStructField("key", DataTypes.StringType, true),
      DataTypes.createStructField("value", DataTypes.BinaryType, true),
    }), true), true),
    DataTypes.createStructField("leaderEpoch", DataTypes.IntegerType, true),
    DataTypes.createStructField("producerId", DataTypes.LongType, true),
    DataTypes.createStructField("producerEpoch", DataTypes.IntegerType, true),
    DataTypes.createStructField("baseSequence", DataTypes.IntegerType, true),
    DataTypes.createStructField("sequence", DataTypes.IntegerType, true),
    DataTypes.createStructField("isTransactional", DataTypes.BooleanType, true),
    DataTypes.createStructField("isControl", DataTypes.BooleanType, true),
  });

  static final int HEADERS = FULL.fieldIndex("headers");

  /** The source's schema: every column, {@code headers} only with includeHeaders (as kafka_log). */
  static StructType of(boolean includeHeaders) {
    if (includeHeaders) {
      return FULL;
    }
    StructField[] out = new StructField[FULL.fields().length - 1];
    for (int i = 0, j = 0; i < FULL.fields().length; i++) {
      if (i != HEADERS) {
        out[j++] = FULL.fields()[i];
      }
    }
    return new StructType(out);
  }

  /** The pushed COUNT(*): one partial count per input partition, summed by Spark. */
  static final StructType COUNT = new StructType(new StructField[] {
    DataTypes.createStructField("count(*)", DataTypes.LongType, false),
  });
}
