package kafkalog;

import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The source's options, named as {@code kafka_log} (and Spark's Kafka source) names them. Options
 * of {@code kafka_log} this reader does not implement are refused, never ignored: a read that
 * silently returned other rows than {@code kafka_log} would be worse than none.
 */
final class ReadOptions implements Serializable {
  static final long EARLIEST = -2, LATEST = -1; // Spark's Kafka source's offsets JSON

  // Defaults written into the jar from compaction/settings.py (compaction/jvm/__init__.py).
  private static final Properties DEFAULTS = new Properties();

  static {
    try (InputStream in = ReadOptions.class.getResourceAsStream("defaults.properties")) {
      if (in == null) {
        throw new IllegalStateException("kafka_log_jvm: the jar lacks kafkalog/defaults.properties; build it with"
            + " compaction.jvm.reader_jar()");
      }
      DEFAULTS.load(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static final String[] REFUSED = {
    "compacted", "asOfTime", "asOfOffsets", "minPartitions", "kafka.isolation.level",
    "startingTimestamp", "endingTimestamp",
  };

  final String path;
  final boolean checkCrc; // false: a pushed-down count trusts batch headers, as Parquet trusts footers
  final boolean includeControl;
  final boolean includeHeaders;
  final String topics; // a regex of whole topic names, or null for every topic
  final long startingDefault, endingDefault;
  final Map<String, Long> starting, ending; // "topic\0partition" -> offset
  final int maxBatchBytes;
  final long maxInflatedBatchBytes;
  final int batchRows;
  final long batchBytes;
  final long splitBytes;

  ReadOptions(Map<String, String> given) {
    Map<String, String> opts = new HashMap<>();
    given.forEach((k, v) -> opts.put(k.toLowerCase(Locale.ROOT), v));
    for (String name : REFUSED) {
      String v = opts.get(name.toLowerCase(Locale.ROOT));
      if (v != null && !("false".equalsIgnoreCase(v.trim()) || "read_uncommitted".equalsIgnoreCase(v.trim()))) {
        throw new IllegalArgumentException("kafka_log_jvm: option " + name + " is not implemented here; read with"
            + " the kafka_log data source (spark.dataSource.register(compaction.KafkaLogDataSource)), which has it");
      }
    }
    path = opts.get("path");
    if (path == null || path.isEmpty()) {
      throw new IllegalArgumentException("kafka_log_jvm: no log dir: load(\"/path/to/kafka-logs\") or option path");
    }
    checkCrc = bool(opts, "checkCrc", true);
    includeControl = bool(opts, "includeControl", false);
    includeHeaders = bool(opts, "includeHeaders", false);
    String pattern = opts.get("subscribepattern");
    String listed = opts.get("subscribe");
    if (pattern != null && listed != null) {
      throw new IllegalArgumentException("kafka_log_jvm: options subscribe and subscribePattern: give one of them");
    }
    if (listed != null) {
      StringBuilder b = new StringBuilder();
      for (String t : listed.split(",")) {
        if (!t.isBlank()) {
          b.append(b.length() == 0 ? "" : "|").append(Pattern.quote(t.strip()));
        }
      }
      pattern = b.toString();
    }
    if (pattern != null && !pattern.isEmpty()) {
      try {
        Pattern.compile(pattern);
      } catch (PatternSyntaxException e) {
        throw new IllegalArgumentException("kafka_log_jvm: option subscribePattern: " + e.getMessage());
      }
    }
    topics = pattern == null || pattern.isEmpty() ? null : pattern;
    starting = new HashMap<>();
    ending = new HashMap<>();
    startingDefault = offsets(opts, "startingOffsets", EARLIEST, starting);
    endingDefault = offsets(opts, "endingOffsets", LATEST, ending);
    if (startingDefault == LATEST) {
      throw new IllegalArgumentException(
          "kafka_log_jvm: option startingOffsets: latest is not allowed for a batch read (as in Spark)");
    }
    if (endingDefault == EARLIEST) {
      throw new IllegalArgumentException(
          "kafka_log_jvm: option endingOffsets: earliest is not allowed for a batch read (as in Spark)");
    }
    maxBatchBytes = (int) number(opts, "maxBatchBytes", Integer.MAX_VALUE);
    maxInflatedBatchBytes = number(opts, "maxInflatedBatchBytes", Integer.MAX_VALUE - 8);
    batchRows = (int) number(opts, "batchRows", Integer.MAX_VALUE);
    batchBytes = number(opts, "batchBytes", Integer.MAX_VALUE);
    splitBytes = number(opts, "splitBytes", Long.MAX_VALUE);
  }

  /** [lo, hi) of the offsets read of one topic-partition. */
  long[] range(String topic, int partition) {
    String key = topic + "\0" + partition;
    long start = starting.getOrDefault(key, startingDefault);
    long end = ending.getOrDefault(key, endingDefault);
    return new long[] {start == EARLIEST ? 0 : start, end == LATEST ? Long.MAX_VALUE : end};
  }

  private static boolean bool(Map<String, String> opts, String name, boolean dflt) {
    String raw = opts.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return dflt;
    }
    String v = raw.strip().toLowerCase(Locale.ROOT);
    if (!v.equals("true") && !v.equals("false")) {
      throw new IllegalArgumentException("kafka_log_jvm: option " + name + ": expected true or false, got '" + raw + "'");
    }
    return v.equals("true");
  }

  private static long number(Map<String, String> opts, String name, long max) {
    String raw = opts.getOrDefault(name.toLowerCase(Locale.ROOT), DEFAULTS.getProperty(name));
    long v;
    try {
      v = Long.parseLong(raw.strip());
    } catch (NumberFormatException | NullPointerException e) {
      throw new IllegalArgumentException("kafka_log_jvm: option " + name + ": expected a positive integer, got '"
          + raw + "'");
    }
    if (v < 1 || v > max) {
      throw new IllegalArgumentException("kafka_log_jvm: option " + name + ": " + v + " is not within 1.." + max);
    }
    return v;
  }

  private static long offsets(Map<String, String> opts, String name, long dflt, Map<String, Long> out) {
    String raw = opts.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return dflt;
    }
    if (raw.strip().equals("earliest")) {
      return EARLIEST;
    }
    if (raw.strip().equals("latest")) {
      return LATEST;
    }
    try {
      JsonNode root = new ObjectMapper().readTree(raw);
      if (root == null || !root.isObject()) {
        throw new IOException("not a JSON object");
      }
      for (Iterator<Map.Entry<String, JsonNode>> t = root.fields(); t.hasNext(); ) {
        Map.Entry<String, JsonNode> topic = t.next();
        if (!topic.getValue().isObject()) {
          throw new IOException("the value of " + topic.getKey() + " is not an object");
        }
        for (Iterator<Map.Entry<String, JsonNode>> p = topic.getValue().fields(); p.hasNext(); ) {
          Map.Entry<String, JsonNode> part = p.next();
          if (!part.getValue().canConvertToLong() || !part.getValue().isIntegralNumber()) {
            throw new IOException("the offset of " + topic.getKey() + "-" + part.getKey() + " is not an integer");
          }
          long offset = part.getValue().asLong();
          if (offset < EARLIEST) {
            throw new IllegalArgumentException("kafka_log_jvm: option " + name + ": offset " + offset + " of "
                + topic.getKey() + "-" + part.getKey() + " is below -2");
          }
          out.put(topic.getKey() + "\0" + Integer.parseInt(part.getKey()), offset);
        }
      }
    } catch (IOException | NumberFormatException e) {
      throw new IllegalArgumentException("kafka_log_jvm: option " + name + ": expected earliest, latest or JSON such"
          + " as {\"topic\":{\"0\":23,\"1\":-2}}, got '" + raw + "' (" + e.getMessage() + ")");
    }
    return dflt;
  }
}
