package kafkalog;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.LinkOption;
import java.nio.file.Paths;
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
import org.apache.hadoop.fs.UnsupportedFileSystemException;

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
  // A partition dir's files as kafka_log takes them (compaction/steps/discover.py, format/naming.py):
  // segment files, optionally mid-clean or mid-delete, and the broker's own few files.
  private static final Pattern DIGITS = Pattern.compile("[0-9]{20}");
  private static final List<String> SEGMENT_SUFFIXES = List.of(".log", ".index", ".timeindex", ".txnindex", ".snapshot");
  private static final List<String> TRANSIENT_SUFFIXES = List.of(".cleaned", ".swap", ".deleted");
  private static final List<String> KNOWN_FILES = List.of("leader-epoch-checkpoint", "partition.metadata",
      "compaction-commit.json");
  private static final List<String> KNOWN_SUFFIXES = List.of(".snapshot", ".snapshot.deleted", ".checkpoint",
      ".checkpoint.deleted", ".checkpoint.part");

  private LogDir() {}

  static List<SegmentPartition> plan(ReadOptions opts, Configuration conf, long splitBytes) {
    Pattern topics = opts.topics == null ? null : Pattern.compile(opts.topics);
    List<SegmentPartition> out = new ArrayList<>();
    try {
      Path root = root(opts.path, conf);
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
        // Listed and refused before the offsets are looked at, as kafka_log refuses it.
        List<FileStatus> logs = segments(fs, dir.getPath());
        long[] range = opts.range(topic, partition);
        if (range[0] >= range[1]) {
          continue;
        }
        out.addAll(group(topic, partition, logs, range[0], range[1], splitBytes));
      }
    } catch (IOException e) {
      throw new UncheckedIOException("kafka_log_jvm: listing " + opts.path, e);
    }
    return out;
  }

  /**
   * The log dir's path; {@code s3://} read as {@code s3a://} where the session maps no FileSystem
   * to {@code s3} (plain Hadoop has none; EMR's EMRFS is one, and is kept), as the job takes it.
   */
  static Path root(String uri, Configuration conf) throws IOException {
    Path root = new Path(uri);
    if ("s3".equals(root.toUri().getScheme())) {
      try {
        FileSystem.getFileSystemClass("s3", conf);
      } catch (UnsupportedFileSystemException e) {
        return new Path("s3a" + uri.substring(2));
      }
    }
    return root;
  }

  /**
   * A partition dir's {@code .log} files in offset order, after refusing, as kafka_log does, the
   * dir when it holds a file a broker would not have written: every such file named, in one error.
   */
  private static List<FileStatus> segments(FileSystem fs, Path dir) throws IOException {
    List<FileStatus> logs = new ArrayList<>();
    List<String> problems = new ArrayList<>();
    for (FileStatus f : fs.listStatus(dir)) {
      String name = f.getPath().getName();
      String shown = display(f.getPath().toString());
      String link = linkTarget(f);
      if (link != null) {
        // A rewrite would replace the link by a file; and Hadoop's listing follows it unseen.
        problems.add(shown + ": is a symbolic link (to " + link + "), which a broker never makes");
        continue;
      }
      if (f.isDirectory()) {
        problems.add(shown + ": is a directory, not a file");
        continue;
      }
      if (isLocalSpecial(f)) {
        // Hadoop lists it as a file; a read of a pipe would wait for a writer for ever.
        problems.add(shown + ": is not a regular file (a pipe, socket or device), which a broker never makes");
        continue;
      }
      if (KNOWN_FILES.contains(name) || KNOWN_SUFFIXES.stream().anyMatch(name::endsWith)) {
        continue;
      }
      String problem = segmentNameProblem(name);
      if (problem != null) {
        problems.add(shown + ": " + problem);
      } else if (SEGMENT.matcher(name).matches()) {
        logs.add(f);
      }
    }
    if (!problems.isEmpty()) {
      problems.sort(Comparator.naturalOrder());
      throw new IllegalStateException("kafka_log_jvm: unexpected file in partition dir: " + String.join("; ", problems));
    }
    logs.sort(Comparator.comparing(s -> s.getPath().getName()));
    return logs;
  }

  /** Why {@code name} is not {@code <20 digits><segment suffix>[<transient suffix>]}, worded as kafka_log words it; null if it is. */
  static String segmentNameProblem(String name) {
    int dot = name.indexOf('.');
    String prefix = dot < 0 ? name : name.substring(0, dot);
    if (!DIGITS.matcher(prefix).matches()) {
      return pyRepr(name) + " is not a segment file name: the part before the first '.' must be exactly 20 digits, got "
          + pyRepr(prefix);
    }
    if (prefix.compareTo("09223372036854775807") > 0) {
      return pyRepr(name) + ": base offset " + prefix.replaceFirst("^0+(?=.)", "") + " does not fit a Java long";
    }
    String ext = dot < 0 ? "" : name.substring(dot);
    String suffix = ext;
    for (String t : TRANSIENT_SUFFIXES) {
      if (ext.endsWith(t)) {
        suffix = ext.substring(0, ext.length() - t.length());
        break;
      }
    }
    if (!SEGMENT_SUFFIXES.contains(suffix)) {
      return pyRepr(name) + ": unknown suffix " + pyRepr(ext) + " (expected one of " + String.join(", ", SEGMENT_SUFFIXES)
          + ", optionally followed by one of " + String.join(", ", TRANSIENT_SUFFIXES) + ")";
    }
    return null;
  }

  /** Whether a local entry is neither a regular file nor a directory (a named pipe, a socket, a device). */
  private static boolean isLocalSpecial(FileStatus f) {
    String scheme = f.getPath().toUri().getScheme();
    if (scheme != null && !scheme.equals("file")) {
      return false;
    }
    try {
      java.nio.file.Path p = Paths.get(f.getPath().toUri().getPath());
      return Files.exists(p, LinkOption.NOFOLLOW_LINKS)
          && !Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)
          && !Files.isDirectory(p, LinkOption.NOFOLLOW_LINKS);
    } catch (InvalidPathException e) {
      return false;
    }
  }

  /** The target of a local symbolic link, else null (object stores and HDFS have none a broker could see). */
  private static String linkTarget(FileStatus f) {
    String scheme = f.getPath().toUri().getScheme();
    if (scheme != null && !scheme.equals("file")) {
      try {
        return f.isSymlink() ? String.valueOf(f.getSymlink()) : null;
      } catch (IOException e) {
        return "unreadable: " + e.getMessage();
      }
    }
    try {
      java.nio.file.Path p = Paths.get(f.getPath().toUri().getPath());
      if (!Files.isSymbolicLink(p)) {
        return null;
      }
      try {
        return Files.readSymbolicLink(p).toString();
      } catch (IOException e) {
        return "unreadable: " + e.getMessage();
      }
    } catch (InvalidPathException e) {
      return null;
    }
  }

  /** A string as Python's repr() writes it, so that a file's name reads the same from both readers. */
  static String pyRepr(String s) {
    char quote = s.indexOf('\'') >= 0 && s.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder b = new StringBuilder().append(quote);
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == quote || c == '\\') {
        b.append('\\').append(c);
      } else if (c == '\n') {
        b.append("\\n");
      } else if (c == '\r') {
        b.append("\\r");
      } else if (c == '\t') {
        b.append("\\t");
      } else if (c < 0x20 || c == 0x7f) {
        b.append(String.format("\\x%02x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append(quote).toString();
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
