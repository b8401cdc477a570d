package kafkalog;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A log dir listed through Hadoop's FileSystem (file:, hdfs:, s3a: where the cluster has it), as
 * {@code kafka_log} lists one: partition dirs named {@code <topic>-<partition>} (not -delete,
 * -future or -stray dirs, nor {@code __cluster_metadata}), segments {@code <20 digits>.log}; the
 * segments outside the offsets asked for are never opened, by their base offsets alone.
 */
final class LogDir {
  private static final Pattern PARTITION_DIR = Pattern.compile("([a-zA-Z0-9._-]{1,249})-(0|[1-9][0-9]{0,9})");
  private static final Pattern SEGMENT = Pattern.compile("([0-9]{20})\\.log");
  private static final List<String> NOT_PARTITIONS = List.of("-delete", "-future", "-stray");

  private LogDir() {}

  static List<SegmentPartition> plan(ReadOptions opts, Configuration conf, long splitBytes) {
    Path root = new Path(opts.path);
    Pattern topics = opts.topics == null ? null : Pattern.compile(opts.topics);
    List<SegmentPartition> out = new ArrayList<>();
    try {
      FileSystem fs = root.getFileSystem(conf);
      FileStatus[] dirs;
      try {
        dirs = fs.listStatus(root);
      } catch (FileNotFoundException e) {
        throw new IllegalArgumentException("kafka_log_jvm: no log dir at " + opts.path, e);
      }
      Arrays.sort(dirs, Comparator.comparing(s -> s.getPath().getName()));
      for (FileStatus dir : dirs) {
        String name = dir.getPath().getName();
        Matcher m = PARTITION_DIR.matcher(name);
        if (!dir.isDirectory() || !m.matches() || NOT_PARTITIONS.stream().anyMatch(name::endsWith)) {
          continue;
        }
        String topic = m.group(1);
        long number = Long.parseLong(m.group(2));
        if (number > Integer.MAX_VALUE || topic.equals(".") || topic.equals("..")
            || topic.equals("__cluster_metadata") || (topics != null && !topics.matcher(topic).matches())) {
          continue;
        }
        int partition = (int) number;
        long[] range = opts.range(topic, partition);
        if (range[0] >= range[1]) {
          continue;
        }
        List<FileStatus> logs = new ArrayList<>();
        for (FileStatus f : fs.listStatus(dir.getPath())) {
          if (f.isDirectory() || f.isSymlink()) {
            // A broker makes neither in a partition dir; kafka_log refuses such a partition too.
            throw new IllegalStateException("kafka_log_jvm: unexpected file in partition dir: " + f.getPath()
                + (f.isDirectory() ? ": is a directory, not a file" : ": is a symbolic link, which a broker never makes"));
          }
          if (SEGMENT.matcher(f.getPath().getName()).matches()) {
            if (baseOffset(f) < 0) {
              throw new IllegalStateException("kafka_log_jvm: unexpected file in partition dir: " + f.getPath()
                  + ": a base offset beyond the largest offset");
            }
            logs.add(f);
          }
        }
        logs.sort(Comparator.comparing(s -> s.getPath().getName()));
        out.addAll(group(topic, partition, logs, range[0], range[1], splitBytes));
      }
    } catch (IOException e) {
      throw new UncheckedIOException("kafka_log_jvm: listing " + opts.path, e);
    }
    return out;
  }

  /** A partition's segments that may hold offsets in [lo, hi), consecutive small ones together. */
  private static List<SegmentPartition> group(String topic, int partition, List<FileStatus> logs, long lo, long hi,
      long splitBytes) {
    List<SegmentPartition> out = new ArrayList<>();
    List<SegmentPartition.Segment> run = new ArrayList<>();
    long runBytes = 0;
    for (int i = 0; i < logs.size(); i++) {
      long base = baseOffset(logs.get(i));
      boolean last = i == logs.size() - 1;
      long nextBase = last ? Long.MAX_VALUE : baseOffset(logs.get(i + 1));
      if (base >= hi || nextBase <= lo) {
        continue; // holds no offset of the range: never opened
      }
      FileStatus f = logs.get(i);
      if (!run.isEmpty() && runBytes + f.getLen() > splitBytes) {
        out.add(new SegmentPartition(topic, partition, run.toArray(new SegmentPartition.Segment[0]), lo, hi));
        run.clear();
        runBytes = 0;
      }
      run.add(new SegmentPartition.Segment(f.getPath().toString(), base, f.getLen(), last));
      runBytes += f.getLen();
    }
    if (!run.isEmpty()) {
      out.add(new SegmentPartition(topic, partition, run.toArray(new SegmentPartition.Segment[0]), lo, hi));
    }
    return out;
  }

  private static long baseOffset(FileStatus f) {
    String digits = f.getPath().getName().substring(0, 20);
    return digits.compareTo("09223372036854775807") > 0 ? -1 : Long.parseLong(digits);
  }

  /** How a segment is named in errors: a local path as kafka_log names it, any other URI whole. */
  static String display(String uri) {
    Path p = new Path(uri);
    String scheme = p.toUri().getScheme();
    return scheme == null || scheme.equals("file") ? p.toUri().getPath() : uri;
  }
}
