// Kafka's own Java clients, driven by a script, for the tests' Kafka 4.x broker (tests/helpers/kafka4.py
// compiles this against the kafka-clients jar of the same release).
//
// Why Java and not kafka-python alone: the bytes a broker stores are the producer's batches, and
// the producer most clusters run is this one (its batching, its JVM codecs, its idempotent and
// transactional sequence numbers). kafka-python stays the tests' independent decoder.
//
// Usage: Kafka4Client BOOTSTRAP SCRIPT
// SCRIPT has one command a line, fields separated by a tab; bytes are hex, "-" is null:
//   topic NAME PARTITIONS CONFIG=VALUE...        create a topic (waits until it exists)
//   producer NAME CONFIG=VALUE...                a KafkaProducer (acks=all unless given)
//   init NAME | begin NAME | commit NAME | abort NAME | flush NAME | close NAME
//   send NAME TOPIC PARTITION KEY VALUE TIMESTAMP [HKEY=HVALUE]...   (TIMESTAMP "-": the clock)
//   alter TOPIC CONFIG=VALUE...                  set topic configs (incrementalAlterConfigs)
//   workload NAME TOPIC PARTITION BYTES KEYS KEYMIN KEYMAX VALMIN VALMAX SEED TOMBSTONES random|text
//                                                keyed records until BYTES of keys and values were
//                                                sent (the benches' workloads, see workload());
//                                                prints "workload RECORDS BYTES"
//   consume TOPIC                                read_committed from offset 0 of every partition
//                                                to the end offsets; prints one line a record:
//                                                "record TOPIC P OFFSET TIMESTAMP KEY VALUE [HKEY=HVALUE]...",
//                                                then "end TOPIC P END_OFFSET" per partition
// A failed send fails the next flush/commit/close; any error exits 1 with the exception.
import java.io.BufferedReader;
import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class Kafka4Client {
    static final HexFormat HEX = HexFormat.of();

    static byte[] bytes(String field) {
        return field.equals("-") ? null : HEX.parseHex(field);
    }

    static String hex(byte[] b) {
        return b == null ? "-" : HEX.formatHex(b);
    }

    static Map<String, Object> configs(String[] f, int from) {
        Map<String, Object> out = new HashMap<>();
        for (int i = from; i < f.length; i++) {
            int eq = f[i].indexOf('=');
            out.put(f[i].substring(0, eq), f[i].substring(eq + 1));
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
        Map<String, List<Future<RecordMetadata>>> pending = new HashMap<>();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap));
             BufferedReader in = new BufferedReader(new FileReader(args[1], StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) continue;
                String[] f = line.split("\t");
                switch (f[0]) {
                    case "topic": {
                        Map<String, String> cfg = new HashMap<>();
                        configs(f, 3).forEach((k, v) -> cfg.put(k, (String) v));
                        NewTopic t = new NewTopic(f[1], Integer.parseInt(f[2]), (short) 1).configs(cfg);
                        admin.createTopics(List.of(t)).all().get();
                        while (!admin.listTopics().names().get().contains(f[1])) Thread.sleep(50);
                        break;
                    }
                    case "producer": {
                        Map<String, Object> cfg = configs(f, 2);
                        cfg.put("bootstrap.servers", bootstrap);
                        cfg.putIfAbsent("acks", "all");
                        producers.put(f[1], new KafkaProducer<>(cfg, new ByteArraySerializer(), new ByteArraySerializer()));
                        pending.put(f[1], new ArrayList<>());
                        break;
                    }
                    case "init": producers.get(f[1]).initTransactions(); break;
                    case "begin": producers.get(f[1]).beginTransaction(); break;
                    case "commit": producers.get(f[1]).commitTransaction(); settle(pending.get(f[1])); break;
                    case "abort": producers.get(f[1]).abortTransaction(); pending.get(f[1]).clear(); break;
                    case "flush": producers.get(f[1]).flush(); settle(pending.get(f[1])); break;
                    case "close": {
                        producers.get(f[1]).flush();
                        settle(pending.get(f[1]));
                        producers.remove(f[1]).close();
                        break;
                    }
                    case "send": {
                        List<Header> headers = new ArrayList<>();
                        for (int i = 7; i < f.length; i++) {
                            int eq = f[i].indexOf('=');
                            headers.add(new RecordHeader(new String(HEX.parseHex(f[i].substring(0, eq)),
                                    StandardCharsets.UTF_8), bytes(f[i].substring(eq + 1))));
                        }
                        Long ts = f[6].equals("-") ? null : Long.parseLong(f[6]);
                        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(f[2], Integer.parseInt(f[3]), ts,
                                bytes(f[4]), bytes(f[5]), headers);
                        pending.get(f[1]).add(producers.get(f[1]).send(r));
                        break;
                    }
                    case "consume": consume(bootstrap, f[1], admin); break;
                    case "alter": {
                        List<AlterConfigOp> ops = new ArrayList<>();
                        configs(f, 2).forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, (String) v),
                                AlterConfigOp.OpType.SET)));
                        admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.TOPIC, f[1]), ops))
                             .all().get();
                        break;
                    }
                    case "workload": workload(producers.get(f[1]), f); break;
                    default: throw new IllegalArgumentException("unknown command: " + line);
                }
            }
        }
        for (KafkaProducer<byte[], byte[]> p : producers.values()) p.close();
        System.out.flush();
    }

    static final String[] WORDS = {"order", "shipped", "customer", "amount", "currency", "EUR", "status",
        "pending", "address", "street", "city", "total", "discount", "item", "quantity", "warehouse"};

    static long mix64(long z) {
        z = (z ^ (z >>> 33)) * 0xff51afd7ed558ccdL;
        z = (z ^ (z >>> 33)) * 0xc4ceb9fe1a85ec53L;
        return z ^ (z >>> 33);
    }

    // Key id uniform in [0, keys); the key is "k" + the zero-padded id, padded with hex of a hash
    // of the id to a length in [keyMin, keyMax] fixed per id. The value's length is uniform in
    // [valMin, valMax]: random bytes, or JSON-like text that compresses as real payloads do; with
    // probability `tombstones` the value is null. One SplittableRandom(seed): a seed is a workload.
    static void workload(KafkaProducer<byte[], byte[]> producer, String[] f) throws Exception {
        String topic = f[2];
        int partition = Integer.parseInt(f[3]);
        long target = Long.parseLong(f[4]);
        int keys = Integer.parseInt(f[5]), keyMin = Integer.parseInt(f[6]), keyMax = Integer.parseInt(f[7]);
        int valMin = Integer.parseInt(f[8]), valMax = Integer.parseInt(f[9]);
        SplittableRandom rng = new SplittableRandom(Long.parseLong(f[10]));
        double tombstones = Double.parseDouble(f[11]);
        boolean text = f[12].equals("text");
        int digits = Integer.toString(Math.max(keys - 1, 0)).length();
        AtomicReference<Exception> failed = new AtomicReference<>();
        long sent = 0, records = 0;
        StringBuilder sb = new StringBuilder();
        while (sent < target && failed.get() == null) {
            int id = rng.nextInt(keys);
            long h = mix64(id * 0x9E3779B97F4A7C15L + 0x1234567L);
            int len = Math.max(keyMin + (int) Long.remainderUnsigned(h, keyMax - keyMin + 1), digits + 2);
            sb.setLength(0);
            String digitsOfId = Integer.toString(id);
            sb.append('k');
            for (int i = digitsOfId.length(); i < digits; i++) sb.append('0');
            sb.append(digitsOfId).append('-');
            for (long filler = mix64(h); sb.length() < len; filler = (filler >>> 4) | (filler << 60)) {
                sb.append(Character.forDigit((int) (filler & 0xF), 16));
            }
            byte[] key = sb.toString().getBytes(StandardCharsets.US_ASCII);
            byte[] value = null;
            if (rng.nextDouble() >= tombstones) {
                int n = valMin + rng.nextInt(valMax - valMin + 1);
                if (text) {
                    sb.setLength(0);
                    sb.append("{\"seq\":").append(records);
                    while (sb.length() < n) {
                        sb.append(",\"").append(WORDS[rng.nextInt(WORDS.length)]).append("\":\"")
                          .append(WORDS[rng.nextInt(WORDS.length)]).append(rng.nextInt(1000)).append('"');
                    }
                    sb.setLength(n - 1);
                    value = sb.append('}').toString().getBytes(StandardCharsets.US_ASCII);
                } else {
                    value = new byte[n];
                    rng.nextBytes(value);
                }
            }
            producer.send(new ProducerRecord<>(topic, partition, key, value), (md, e) -> {
                if (e != null) failed.compareAndSet(null, e);
            });
            sent += key.length + (value == null ? 0 : value.length);
            records++;
        }
        producer.flush();
        if (failed.get() != null) throw failed.get();
        System.out.println("workload\t" + records + "\t" + sent);
    }

    static void settle(List<Future<RecordMetadata>> futures) throws Exception {
        for (Future<RecordMetadata> f : futures) f.get();
        futures.clear();
    }

    static void consume(String bootstrap, String topic, Admin admin) throws Exception {
        int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        Map<String, Object> cfg = new HashMap<>();
        cfg.put("bootstrap.servers", bootstrap);
        cfg.put("isolation.level", "read_committed");
        cfg.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cfg, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);  // read_committed: the last stable offsets
            StringBuilder out = new StringBuilder();
            long deadline = System.currentTimeMillis() + 60_000;
            while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("consume timed out");
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    out.setLength(0);
                    out.append("record\t").append(topic).append('\t').append(r.partition()).append('\t').append(r.offset()).append('\t')
                       .append(r.timestamp()).append('\t').append(hex(r.key())).append('\t').append(hex(r.value()));
                    for (Header h : r.headers()) {
                        out.append('\t').append(hex(h.key().getBytes(StandardCharsets.UTF_8))).append('=').append(hex(h.value()));
                    }
                    System.out.println(out);
                }
            }
            for (TopicPartition tp : tps) System.out.println("end\t" + topic + "\t" + tp.partition() + "\t" + end.get(tp));
        }
    }
}
