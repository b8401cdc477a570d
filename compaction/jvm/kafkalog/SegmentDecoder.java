package kafkalog;

import java.io.BufferedInputStream;
import java.io.ByteArrayInputStream;
import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

/**
 * A segment file's v2 record batches, read from a stream one batch at a time.
 *
 * <pre>
 * A .log file is batches back to back, no file header. All integers big-endian.
 *
 * Batch header (61 bytes):
 *    0  baseOffset            int64
 *    8  batchLength           int32   bytes after this field: the batch is 12 + batchLength bytes
 *   12  partitionLeaderEpoch  int32   not covered by the CRC
 *   16  magic                 int8    2 (0 and 1: legacy messages, not read here)
 *   17  crc                   uint32  CRC-32C of bytes [21, end of batch)
 *   21  attributes            int16   bits 0-2 codec (0 none, 1 gzip, 2 snappy in xerial framing,
 *                                     3 lz4 frame, 4 zstd), bit 3 LogAppendTime, bit 4 transactional,
 *                                     bit 5 control
 *   23  lastOffsetDelta       int32
 *   27  baseTimestamp         int64
 *   35  maxTimestamp          int64   every record's timestamp in a LogAppendTime batch
 *   43  producerId            int64
 *   51  producerEpoch         int16
 *   53  baseSequence          int32   -1: none; a record's sequence is baseSequence + offsetDelta
 *   57  recordsCount          int32
 *   61  records, compressed as one stream by the codec
 *
 * Record (varints zig-zag LEB128, lengths -1 for null):
 *   length varint (bytes after it) | attributes int8 | timestampDelta varlong | offsetDelta varint
 *   | keyLength varint | key | valueLength varint | value
 *   | headersCount varint | headers: (keyLength varint | key | valueLength varint | value)*
 * </pre>
 *
 * <p>Memory is bounded by the reader's settings, never by what a header claims: one batch of at
 * most {@code maxBatchBytes} and, for a compressed batch, one record of at most
 * {@code maxInflatedBytes} (the records of a batch together at most that too). Damage fails with
 * the file, the byte position of the batch and its base offset, worded as the Python job words it.
 */
final class SegmentDecoder implements Closeable {
  static final int LOG_OVERHEAD = 12; // baseOffset + batchLength
  static final int HEADER = 61;
  static final int MIN_ENTRY = 14; // Kafka's smallest legal batchLength (a v0 message's)
  static final int CRC_FROM = 21;
  static final int MAGIC_V2 = 2;
  static final int CODEC_MASK = 0x07, LOG_APPEND_TIME = 0x08, TRANSACTIONAL = 0x10, CONTROL = 0x20;

  /** A segment's bytes that do not follow Kafka's format: file, byte position, base offset. */
  static final class SegmentFormatException extends RuntimeException {
    SegmentFormatException(String path, long position, long offset, String message) {
      super(path + ": byte " + position + ": " + message + (offset < 0 ? "" : " (offset " + offset + ")"));
    }
  }

  private final InputStream in;
  private final String path;
  private final long fileSize;
  private final boolean active; // the partition's last segment: a partial trailing batch ends it
  private final int maxBatchBytes;
  private final long maxInflatedBytes;
  private final byte[] header = new byte[HEADER];
  private final CRC32C crc = new CRC32C();
  private long next; // byte position of the next batch

  // The current batch.
  long position = -1;
  long baseOffset;
  int batchLength;
  int leaderEpoch;
  int attributes;
  int lastOffsetDelta;
  long baseTimestamp;
  long maxTimestamp;
  long producerId;
  int producerEpoch;
  int baseSequence;
  int recordsCount;
  private byte[] body = new byte[0];
  private int bodyLength;
  private boolean bodyRead;
  private InputStream inflating; // a compressed batch's records
  private long inflated;
  private int pos; // an uncompressed batch's next record in body
  private int recordsLeft;

  // The current record: key and value are [offset, offset + length) of array, length -1 for null.
  private byte[] record = new byte[0];
  byte[] array;
  long offset;
  long timestamp;
  int sequence;
  int keyOffset, keyLength, valueOffset, valueLength;
  // With keepHeaders: the record's headers, four ints each: key offset, key length, value offset,
  // value length (-1 for null), positions in array.
  boolean keepHeaders;
  int headerCount;
  int[] headers = new int[0];

  SegmentDecoder(InputStream in, String path, long fileSize, boolean active, int maxBatchBytes,
      long maxInflatedBytes) {
    // No read-ahead past a header: a count that trusts headers skips every body, and bytes read
    // ahead of a skip are wasted (a body is read straight into its array, past any buffer).
    this.in = new BufferedInputStream(in, HEADER);
    this.path = path;
    this.fileSize = fileSize;
    this.active = active;
    this.maxBatchBytes = maxBatchBytes;
    this.maxInflatedBytes = maxInflatedBytes;
  }

  boolean isControl() {
    return (attributes & CONTROL) != 0;
  }

  boolean isTransactional() {
    return (attributes & TRANSACTIONAL) != 0;
  }

  boolean logAppendTime() {
    return (attributes & LOG_APPEND_TIME) != 0;
  }

  long lastOffset() {
    return baseOffset + lastOffsetDelta;
  }

  private SegmentFormatException error(String message) {
    return new SegmentFormatException(path, position, baseOffset, message);
  }

  /** An entry whose size or magic no broker writes: its offset is not trusted, so not named (as kafka_log). */
  private SegmentFormatException corruptEntry(String message) {
    return new SegmentFormatException(path, position, -1, message);
  }

  /**
   * The next batch's header, its body left unread; false at the end of the file (or at a partial
   * trailing batch of the active segment, which a broker truncates on recovery).
   */
  boolean nextBatch() throws IOException {
    if (position >= 0 && !bodyRead) {
      skipFully(bodyLength);
    }
    closeInflating();
    position = next;
    baseOffset = -1;
    long left = fileSize - position;
    if (left == 0) {
      return false;
    }
    if (left < LOG_OVERHEAD) {
      return partial(LOG_OVERHEAD, left);
    }
    readFully(header, 0, LOG_OVERHEAD);
    baseOffset = readLong(header, 0);
    batchLength = readInt(header, 8);
    if (batchLength < MIN_ENTRY) {
      throw corruptEntry("record size " + batchLength + " is less than the minimum record overhead (" + MIN_ENTRY + ")");
    }
    if (left < 17) {
      return partial(LOG_OVERHEAD + (long) batchLength, left);
    }
    readFully(header, LOG_OVERHEAD, 5);
    int magic = header[16];
    if (magic < 0 || magic > MAGIC_V2) {
      throw corruptEntry("invalid magic " + magic);
    }
    if (magic != MAGIC_V2) {
      throw error("a magic v" + magic + " message: kafka_log_jvm reads v2 record batches only; read this log with"
          + " the kafka_log data source");
    }
    if (LOG_OVERHEAD + batchLength < HEADER) {
      throw corruptEntry("entry size " + (LOG_OVERHEAD + batchLength) + " is smaller than the magic v2 header");
    }
    if (left < LOG_OVERHEAD + (long) batchLength) {
      return partial(LOG_OVERHEAD + (long) batchLength, left);
    }
    if (LOG_OVERHEAD + (long) batchLength > maxBatchBytes) {
      throw error("batch of " + (LOG_OVERHEAD + (long) batchLength) + " bytes is larger than maxBatchBytes "
          + maxBatchBytes + " (an option of kafka_log_jvm)");
    }
    readFully(header, 17, HEADER - 17);
    leaderEpoch = readInt(header, 12);
    attributes = header[22] & 0xFF; // Kafka reads the low byte of the int16
    lastOffsetDelta = readInt(header, 23);
    baseTimestamp = readLong(header, 27);
    maxTimestamp = readLong(header, 35);
    producerId = readLong(header, 43);
    producerEpoch = (short) ((header[51] & 0xFF) << 8 | header[52] & 0xFF);
    baseSequence = readInt(header, 53);
    recordsCount = readInt(header, 57);
    bodyLength = LOG_OVERHEAD + batchLength - HEADER;
    bodyRead = false;
    next = position + LOG_OVERHEAD + batchLength;
    return true;
  }

  private boolean partial(long needed, long available) {
    if (active) {
      return false;
    }
    throw new SegmentFormatException(path, position, -1, "partial trailing batch, log segment may be corrupt ("
        + needed + " bytes declared, " + available + " available)");
  }

  /** The batch's body read; with {@code checkCrc} its CRC-32C checked against the header's. */
  void readBody(boolean checkCrc) throws IOException {
    if (body.length < bodyLength) {
      body = new byte[Math.max(bodyLength, Math.min(2 * body.length, maxBatchBytes))];
    }
    readFully(body, 0, bodyLength);
    bodyRead = true;
    if (checkCrc) {
      crc.reset();
      crc.update(header, CRC_FROM, HEADER - CRC_FROM);
      crc.update(body, 0, bodyLength);
      long stored = readInt(header, 17) & 0xFFFFFFFFL;
      if (crc.getValue() != stored) {
        throw error("magic v2 batch checksum mismatch (stored crc " + stored + ", computed " + crc.getValue() + ")");
      }
    }
    if (recordsCount < 0) {
      throw error("record count " + recordsCount + " is negative");
    }
    recordsLeft = recordsCount;
    pos = 0;
    inflated = 0;
    int codec = attributes & CODEC_MASK;
    if (codec != 0 && !(recordsCount == 0 && bodyLength == 0)) { // an emptied batch may keep its codec bits
      InputStream raw = new ByteArrayInputStream(body, 0, bodyLength);
      try {
        inflating = new BufferedInputStream(switch (codec) {
          case 1 -> new GZIPInputStream(raw, 1 << 13);
          case 2 -> new SnappyInputStream(raw);
          case 3 -> new LZ4FrameInputStream(raw);
          case 4 -> new ZstdInputStreamNoFinalizer(raw);
          default -> throw error("unknown compression codec id " + codec);
        }, 1 << 16);
      } catch (IOException e) {
        throw corrupt(e);
      }
    }
  }

  private SegmentFormatException corrupt(Exception e) {
    SegmentFormatException out = error("compressed records do not decompress: " + e);
    out.initCause(e);
    return out;
  }

  /** The batch's next record into the record fields; false after its last one. */
  boolean nextRecord() throws IOException {
    if (recordsLeft == 0) {
      if (inflating != null ? inflatingHasMore() : pos != bodyLength) {
        throw error("Incorrect declared batch size, records still remaining in file");
      }
      return false;
    }
    recordsLeft--;
    int length;
    int at;
    if (inflating == null) {
      length = varint(body, bodyLength);
      if (length < 0 || length > bodyLength - pos) {
        throw error("record length " + length + " runs past the end of the batch");
      }
      array = body;
      at = pos;
      pos += length;
    } else {
      try {
        length = streamVarint();
        inflated += length;
        if (length < 0 || inflated > maxInflatedBytes) {
          throw error("records inflate past maxInflatedBatchBytes " + maxInflatedBytes
              + " (an option of kafka_log_jvm), or a record length " + length + " is bad");
        }
        if (record.length < length) {
          record = new byte[(int) Math.min(maxInflatedBytes, Math.max(length, 2L * record.length))];
        }
        int n = inflating.readNBytes(record, 0, length);
        if (n < length) {
          throw error("record length " + length + " runs past the end of the batch");
        }
      } catch (IOException | RuntimeException e) {
        if (e instanceof SegmentFormatException s) {
          throw s;
        }
        throw corrupt(e);
      }
      array = record;
      at = 0;
    }
    parseRecord(at, at + length);
    return true;
  }

  private boolean inflatingHasMore() throws IOException {
    try {
      return inflating.read() >= 0;
    } catch (IOException | RuntimeException e) {
      throw corrupt(e);
    }
  }

  private int cursor; // parseRecord's position in array

  private void parseRecord(int start, int end) {
    cursor = start + 1; // attributes: unused
    if (cursor > end) {
      throw error("record of " + (end - start) + " bytes is too short");
    }
    long timestampDelta = varlong(end);
    int offsetDelta = varint(end);
    keyLength = varint(end);
    keyOffset = cursor;
    cursor = skip(keyLength, end, "key");
    valueLength = varint(end);
    valueOffset = cursor;
    cursor = skip(valueLength, end, "value");
    int headers = varint(end);
    if (headers < 0) {
      throw error("record header count " + headers + " is negative");
    }
    if (keepHeaders && this.headers.length < 4L * headers) {
      this.headers = new int[4 * Math.min(headers, end - start)]; // a header takes 2 bytes at least
    }
    headerCount = keepHeaders ? headers : 0;
    for (int h = 0; h < headers; h++) {
      int k = varint(end);
      if (k < 0) {
        throw error("record header key length " + k + " is negative");
      }
      int keyAt = cursor;
      cursor = skip(k, end, "header key");
      int v = varint(end);
      int valueAt = cursor;
      cursor = skip(v, end, "header value");
      if (keepHeaders) {
        this.headers[4 * h] = keyAt;
        this.headers[4 * h + 1] = k;
        this.headers[4 * h + 2] = valueAt;
        this.headers[4 * h + 3] = v;
      }
    }
    if (cursor != end) {
      throw error("record of " + (end - start) + " bytes holds " + (end - cursor) + " bytes after its headers");
    }
    offset = baseOffset + offsetDelta;
    timestamp = logAppendTime() ? maxTimestamp : baseTimestamp + timestampDelta;
    if (baseSequence < 0) {
      sequence = -1;
    } else {
      long seq = (long) baseSequence + offsetDelta; // Kafka's incrementSequence wraps past Integer.MAX_VALUE
      sequence = (int) (seq > Integer.MAX_VALUE ? seq - Integer.MAX_VALUE - 1 : seq);
    }
  }

  private int skip(int length, int end, String what) {
    if (length < -1 || (length > 0 && length > end - cursor)) {
      throw error("record " + what + " of " + length + " bytes runs past the end");
    }
    return cursor + Math.max(length, 0);
  }

  private int varint(int end) {
    long v = varlong(end);
    if (v != (int) v) {
      throw error("a varint of a record does not fit 32 bits");
    }
    return (int) v;
  }

  private long varlong(int end) {
    long raw = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (cursor >= end) {
        throw error("a varint of a record runs past the end of the record");
      }
      byte b = array[cursor++];
      raw |= (long) (b & 0x7F) << shift;
      if (b >= 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw error("a varint of a record is longer than 10 bytes");
  }

  /** A record's length varint at body[pos] (an uncompressed batch). */
  private int varint(byte[] src, int end) {
    array = src;
    cursor = pos;
    int v = varint(end);
    pos = cursor;
    return v;
  }

  private int streamVarint() throws IOException {
    long raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      int b = inflating.read();
      if (b < 0) {
        throw error("a record length runs past the end of the compressed records");
      }
      raw |= (long) (b & 0x7F) << shift;
      if (b < 0x80) {
        long v = (raw >>> 1) ^ -(raw & 1);
        return (int) v;
      }
    }
    throw error("a record length varint is longer than 5 bytes");
  }

  private void readFully(byte[] b, int off, int len) throws IOException {
    int n = in.readNBytes(b, off, len);
    if (n < len) {
      throw new EOFException(path + ": byte " + position + ": the file ends before its listed size " + fileSize);
    }
  }

  private void skipFully(long n) throws IOException {
    in.skipNBytes(n);
  }

  private void closeInflating() throws IOException {
    if (inflating != null) {
      inflating.close();
      inflating = null;
    }
  }

  static int readInt(byte[] b, int at) {
    return (b[at] & 0xFF) << 24 | (b[at + 1] & 0xFF) << 16 | (b[at + 2] & 0xFF) << 8 | b[at + 3] & 0xFF;
  }

  static long readLong(byte[] b, int at) {
    return (long) readInt(b, at) << 32 | readInt(b, at + 4) & 0xFFFFFFFFL;
  }

  @Override
  public void close() throws IOException {
    closeInflating();
    in.close();
  }
}
