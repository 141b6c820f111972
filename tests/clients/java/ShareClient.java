import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The contract's `consume` (tests/clients/README.md) as one member of a share group (KIP-932):
 * Kafka's KafkaShareConsumer in GROUP, which this program first sets to start from the earliest
 * offset (group config share.auto.offset.reset, through the Admin API), until COUNT records, the
 * timeout, or the test's STOP_FILE.
 *
 * consume BOOTSTRAP TOPIC CLIENT_ID GROUP COUNT TIMEOUT_SECONDS [--stop-file F] [--keys-file F]
 *         [--release-first] [--reject-every N] [--commit sync|async|fetch] [--conf k=v ...]
 *
 * Every record is acknowledged explicitly: RELEASE on its first delivery with --release-first (it
 * comes back, to this member or another, with a delivery count of 2), REJECT when its key number is
 * a multiple of --reject-every (it never comes back), ACCEPT otherwise; only accepted records count
 * as consumed. Acknowledgements go with commitSync (a ShareAcknowledge request, the default),
 * commitAsync, or the next poll's ShareFetch (`fetch`). With --keys-file each accepted key is
 * appended as it is acknowledged ("key delivery-count", flushed per poll), so a test sees a whole
 * group's progress. The last stdout line is the contract's JSON, with deliveries, released,
 * rejected, the largest delivery count and acknowledgement errors beside it.
 */
public final class ShareClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_ERRORS = 5;
    private static final Set<String> FLAGS = Set.of("--release-first");

    public static void main(String[] args) throws Exception {
        if (args.length < 7 || !args[0].equals("consume")) {
            System.err.println("usage: consume BOOTSTRAP TOPIC CLIENT_ID GROUP COUNT TIMEOUT_SECONDS [--stop-file F] "
                               + "[--keys-file F] [--release-first] [--reject-every N] [--commit sync|async|fetch] "
                               + "[--conf k=v ...]");
            System.exit(2);
        }
        String bootstrap = args[1], topic = args[2], clientId = args[3], group = args[4];
        long count = Long.parseLong(args[5]);
        double timeout = Double.parseDouble(args[6]);
        Map<String, String> options = new LinkedHashMap<>();
        Properties conf = new Properties();
        for (int i = 7; i < args.length; i++) {
            if (FLAGS.contains(args[i])) {
                options.put(args[i], "true");
            } else if (args[i].equals("--conf")) {
                String kv = args[++i];
                conf.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
            } else {
                options.put(args[i], args[++i]);
            }
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", clientId);
        props.put("group.id", group);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("metrics.sample.window.ms", String.valueOf(TimeUnit.HOURS.toMillis(1)));
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.putAll(conf);
        Optional<Path> stopFile = Optional.ofNullable(options.get("--stop-file")).map(Path::of);
        Optional<Path> keysFile = Optional.ofNullable(options.get("--keys-file")).map(Path::of);
        boolean releaseFirst = options.containsKey("--release-first");
        long rejectEvery = Long.parseLong(options.getOrDefault("--reject-every", "0"));
        String commit = options.getOrDefault("--commit", "sync");

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("client", "java-share");
        out.put("version", ContractClient.VERSION);
        out.put("throttle_ms_max", null);
        out.put("throttle_ms_avg", null);
        out.put("responses", null);
        Set<String> errors = new LinkedHashSet<>();
        Set<String> keys = new HashSet<>();
        long deliveries = 0, consumed = 0, bytes = 0, released = 0, rejected = 0, ackErrors = 0;
        short maxDelivery = 0;
        long start = System.nanoTime();
        long deadline = start + (long) (timeout * 1e9);
        try (PrintWriter written = keysFile.isPresent()
                 ? new PrintWriter(Files.newBufferedWriter(keysFile.get(), StandardCharsets.UTF_8)) : null) {
            earliest(bootstrap, group, conf);
            try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
                consumer.subscribe(List.of(topic));
                while (consumed < count && System.nanoTime() < deadline
                       && !(stopFile.isPresent() && Files.exists(stopFile.get()))) {
                    try {
                        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<byte[], byte[]> record : records) {
                            deliveries++;
                            String key = record.key() == null ? "" : new String(record.key(), StandardCharsets.UTF_8);
                            short delivery = record.deliveryCount().orElse((short) 1);
                            maxDelivery = (short) Math.max(maxDelivery, delivery);
                            if (releaseFirst && delivery == 1) {
                                consumer.acknowledge(record, AcknowledgeType.RELEASE);
                                released++;
                            } else if (rejectEvery > 0 && keyNumber(key) % rejectEvery == 0) {
                                consumer.acknowledge(record, AcknowledgeType.REJECT);
                                rejected++;
                            } else {
                                consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                                consumed++;
                                bytes += record.serializedKeySize() + Math.max(0, record.serializedValueSize());
                                keys.add(key);
                                if (written != null) {
                                    written.println(key + " " + delivery);
                                }
                            }
                        }
                        if (!records.isEmpty()) {
                            ackErrors += acknowledge(consumer, commit, errors);
                            if (written != null) {
                                written.flush();
                            }
                        }
                    } catch (RuntimeException exc) {
                        remember(errors, exc);
                        if (errors.size() >= MAX_ERRORS) {
                            break;
                        }
                    }
                }
                out.put("consume_end", System.nanoTime() / 1e9);
                metrics(out, consumer.metrics());
                consumer.close(Duration.ofSeconds(10));
            }
        } catch (Exception exc) {
            remember(errors, exc);
        }
        out.put("consumed", consumed);
        out.put("bytes", bytes);
        out.put("keys_distinct", keys.size());
        out.put("deliveries", deliveries);
        out.put("released", released);
        out.put("rejected", rejected);
        out.put("max_delivery_count", maxDelivery);
        out.put("acknowledgement_errors", ackErrors);
        out.put("errors", new ArrayList<>(errors));
        out.put("consume_start", start / 1e9);
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        System.out.println(JSON.writeValueAsString(out));
        System.out.flush();
        System.exit(0);  // a client's non-daemon threads must not keep the JVM up
    }

    /** A share group starts at the latest offset unless its config says otherwise. */
    private static void earliest(String bootstrap, String group, Properties conf) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", "share-client-admin");
        props.putAll(conf);   // a login, where the test gives one; the consumer's own settings are ignored
        try (Admin admin = Admin.create(props)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            Collection<AlterConfigOp> ops = List.of(new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET));
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get(60, TimeUnit.SECONDS);
        }
    }

    /** Sends this poll's acknowledgements as `commit` says; the partitions whose acknowledgement failed. */
    private static long acknowledge(KafkaShareConsumer<byte[], byte[]> consumer, String commit, Set<String> errors) {
        switch (commit) {
            case "sync" -> {
                long failed = 0;
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> result : consumer.commitSync().entrySet()) {
                    if (result.getValue().isPresent()) {
                        failed++;
                        remember(errors, result.getValue().get());
                    }
                }
                return failed;
            }
            case "async" -> consumer.commitAsync();
            case "fetch" -> { }   // carried by the next poll's ShareFetch
            default -> throw new IllegalArgumentException("--commit sync|async|fetch, not " + commit);
        }
        return 0;
    }

    /** "k-123" -> 123 (ContractClient's keys); -1 for any other key. */
    private static long keyNumber(String key) {
        try {
            return Long.parseLong(key.substring(key.indexOf('-') + 1));
        } catch (NumberFormatException | StringIndexOutOfBoundsException exc) {
            return -1;
        }
    }

    /** The share fetch manager's throttle figures (`fetch-throttle-time-*`) and the responses read. */
    private static void metrics(Map<String, Object> out, Map<MetricName, ? extends Metric> metrics) {
        metrics.forEach((name, metric) -> {
            if (!(metric.metricValue() instanceof Double value) || value.isNaN() || value.isInfinite()) {
                return;
            }
            if (name.group().equals("consumer-share-fetch-manager-metrics")
                    && name.name().startsWith("fetch-throttle-time-")) {
                out.put(name.name().endsWith("max") ? "throttle_ms_max" : "throttle_ms_avg", value);
            } else if (name.group().equals("consumer-metrics") && name.name().equals("response-total")) {
                out.put("responses", value.longValue());
            }
        });
    }

    private static void remember(Set<String> errors, Throwable exc) {
        if (errors.size() < MAX_ERRORS) {
            errors.add(exc.getClass().getName() + ": " + exc.getMessage());
        }
    }

    private ShareClient() {
    }
}
