import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's own Java client behind the command line every client family under tests/clients/ shares
 * (`produce`, `consume`; tests/helpers/java_clients.py says what each prints), and the quota admin
 * calls `admin-alter` and `admin-describe`. Each prints one JSON object as its last stdout line.
 * Throttle figures are the client's own metrics, which record the throttle_time_ms of every response
 * the client reads (zeros included): `responses` is that count, so avg x responses is the throttle
 * time the client was told in all. `offer_start`/`offer_end` are CLOCK_MONOTONIC seconds
 * (System.nanoTime on Linux), the clock the Python tests' taps read.
 */
public final class ContractClient {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_ERRORS = 5;
    static final String VERSION = clientVersion();   // ShareClient reports it too
    // One metrics sample for the whole run: the throttle max and average cover all of it.
    private static final String WHOLE_RUN_MS = String.valueOf(TimeUnit.HOURS.toMillis(1));

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage("no command");
        }
        Args parsed = new Args(Arrays.copyOfRange(args, 1, args.length));
        Map<String, Object> result;
        switch (args[0]) {
            case "produce" -> result = produce(parsed);
            case "consume" -> result = consume(parsed);
            case "admin-alter" -> result = adminAlter(parsed);
            case "admin-describe" -> result = adminDescribe(parsed);
            default -> {
                usage("unknown command " + args[0]);
                return;
            }
        }
        System.out.println(JSON.writeValueAsString(result));
        System.out.flush();
        System.exit(0);  // a client's non-daemon threads must not keep the JVM up
    }

    // ---- produce ----------------------------------------------------------------------------

    private static Map<String, Object> produce(Args a) throws InterruptedException {
        String bootstrap = a.positional(0), topic = a.positional(1), clientId = a.positional(2);
        double seconds = Double.parseDouble(a.positional(3));
        int recordBytes = Integer.parseInt(a.option("--record-bytes", "1000"));
        int batchBytes = Integer.parseInt(a.option("--batch-bytes", "16384"));
        long maxRecords = Long.parseLong(a.option("--max-records", String.valueOf(Long.MAX_VALUE)));
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", clientId);
        props.put("batch.size", String.valueOf(batchBytes));
        props.put("linger.ms", a.option("--linger-ms", "5"));
        props.put("acks", a.option("--acks", "all"));
        props.put("compression.type", a.option("--compression", "none"));
        props.put("enable.idempotence", String.valueOf(a.flag("--idempotent")));
        props.put("metrics.sample.window.ms", WHOLE_RUN_MS);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        props.putAll(a.conf());

        // What may be outstanding (sent, not yet acknowledged): a few batches, so that the backlog
        // left when the offer ends drains quickly at a quota and the test measures the path.
        int window = Math.max(4 * batchBytes, recordBytes);
        Semaphore outstanding = new Semaphore(window);
        AtomicLong acked = new AtomicLong(), failed = new AtomicLong(), timeouts = new AtomicLong();
        Set<String> errors = Collections.synchronizedSet(new LinkedHashSet<>());  // callbacks add too
        byte[] value = new byte[recordBytes];
        Arrays.fill(value, (byte) 'x');
        long sent = 0;
        long created = System.nanoTime();
        long start = created;
        long deadline = start + (long) (seconds * 1e9);
        long offerEnd;
        Map<String, Object> out = clientResult();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            // The offer starts once the topic's metadata is known, as the first send would wait for it.
            producer.partitionsFor(topic);
            start = System.nanoTime();
            deadline = start + (long) (seconds * 1e9);
            while (sent < maxRecords && System.nanoTime() < deadline) {
                long left = deadline - System.nanoTime();
                if (!outstanding.tryAcquire(recordBytes, Math.max(0, left), TimeUnit.NANOSECONDS)) {
                    break;
                }
                byte[] key = ("k-" + sent).getBytes();
                try {
                    producer.send(new ProducerRecord<>(topic, key, value), (metadata, exception) -> {
                        outstanding.release(recordBytes);
                        if (exception == null) {
                            acked.incrementAndGet();
                            return;
                        }
                        failed.incrementAndGet();
                        if (exception instanceof TimeoutException) {
                            timeouts.incrementAndGet();
                        }
                        remember(errors, exception);
                    });
                } catch (RuntimeException exc) {  // refused before it was queued: not sent
                    outstanding.release(recordBytes);
                    remember(errors, exc);
                    break;
                }
                sent++;
            }
            offerEnd = System.nanoTime();
            long waitUntil = offerEnd + TimeUnit.SECONDS.toNanos(60);
            while (acked.get() + failed.get() < sent && System.nanoTime() < waitUntil) {
                Thread.sleep(10);
            }
            metrics(out, producer.metrics(), "producer-metrics", "produce-throttle-time", "producer-metrics");
            producer.close(Duration.ofSeconds(5));
        } catch (RuntimeException exc) {
            remember(errors, exc);
            offerEnd = System.nanoTime();
        }
        out.put("sent", sent);
        out.put("acked", acked.get());
        out.put("failed", failed.get());
        out.put("timeouts", timeouts.get());
        synchronized (errors) {
            out.put("errors", new ArrayList<>(errors));
        }
        out.put("offer_start", start / 1e9);
        out.put("offer_end", offerEnd / 1e9);
        out.put("seconds", (System.nanoTime() - created) / 1e9);
        return out;
    }

    // ---- consume ----------------------------------------------------------------------------

    private static Map<String, Object> consume(Args a) {
        String bootstrap = a.positional(0), topic = a.positional(1), clientId = a.positional(2);
        String group = a.positional(3);
        long count = Long.parseLong(a.positional(4));
        double timeout = Double.parseDouble(a.positional(5));
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", clientId);
        props.put("group.id", group);
        props.put("auto.offset.reset", "earliest");
        props.put("metrics.sample.window.ms", WHOLE_RUN_MS);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.putAll(a.conf());
        Map<String, Object> out = clientResult();
        Set<String> errors = new LinkedHashSet<>();
        Set<String> keys = new HashSet<>();
        long consumed = 0, bytes = 0;
        long start = System.nanoTime();
        long deadline = start + (long) (timeout * 1e9);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (consumed < count && System.nanoTime() < deadline) {
                try {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> record : records) {
                        consumed++;
                        bytes += record.serializedKeySize() + Math.max(0, record.serializedValueSize());
                        keys.add(record.key() == null ? "" : new String(record.key()));
                    }
                } catch (RuntimeException exc) {
                    remember(errors, exc);
                    if (errors.size() >= MAX_ERRORS) {
                        break;
                    }
                }
            }
            out.put("consume_end", System.nanoTime() / 1e9);
            metrics(out, consumer.metrics(), "consumer-fetch-manager-metrics", "fetch-throttle-time",
                    "consumer-metrics");
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
        } catch (RuntimeException exc) {
            remember(errors, exc);
        }
        out.put("consumed", consumed);
        out.put("bytes", bytes);
        out.put("keys_distinct", keys.size());
        out.put("errors", new ArrayList<>(errors));
        out.put("consume_start", start / 1e9);
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        return out;
    }

    // ---- admin: client quotas -----------------------------------------------------------------

    /** ENTITY_JSON {"client-id": "x", "user": null} (null: the default entity);
     *  OPS_JSON {"producer_byte_rate": 1024, "request_percentage": null} (null: remove the key). */
    private static Map<String, Object> adminAlter(Args a) throws Exception {
        String bootstrap = a.positional(0);
        Map<String, String> entity = new LinkedHashMap<>();
        JSON.readTree(a.positional(1)).properties().forEach(
            e -> entity.put(e.getKey(), e.getValue().isNull() ? null : e.getValue().asText()));
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        JSON.readTree(a.positional(2)).properties().forEach(
            e -> ops.add(new ClientQuotaAlteration.Op(e.getKey(), e.getValue().isNull() ? null : e.getValue().asDouble())));
        Map<String, Object> out = result();
        List<String> errors = new ArrayList<>();
        long start = System.nanoTime();
        try (Admin admin = Admin.create(adminProps(bootstrap, a))) {
            ClientQuotaAlteration alteration = new ClientQuotaAlteration(new ClientQuotaEntity(entity), ops);
            admin.alterClientQuotas(List.of(alteration),
                                    new AlterClientQuotasOptions().validateOnly(a.flag("--validate-only")))
                 .all().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException exc) {
            errors.add(describe(exc.getCause()));
        }
        out.put("ok", errors.isEmpty());
        out.put("errors", errors);
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        return out;
    }

    /** FILTER_JSON {"client-id": "x"}: that entity; null: the default entity; "*": any of that type;
     *  {} describes everything. `--strict`: only entities made of exactly these types. */
    private static Map<String, Object> adminDescribe(Args a) throws Exception {
        String bootstrap = a.positional(0);
        List<ClientQuotaFilterComponent> components = new ArrayList<>();
        JSON.readTree(a.positional(1)).properties().forEach(e -> {
            JsonNode match = e.getValue();
            components.add(match.isNull() ? ClientQuotaFilterComponent.ofDefaultEntity(e.getKey())
                           : match.asText().equals("*") ? ClientQuotaFilterComponent.ofEntityType(e.getKey())
                           : ClientQuotaFilterComponent.ofEntity(e.getKey(), match.asText()));
        });
        ClientQuotaFilter filter = components.isEmpty() && !a.flag("--strict") ? ClientQuotaFilter.all()
            : a.flag("--strict") ? ClientQuotaFilter.containsOnly(components) : ClientQuotaFilter.contains(components);
        Map<String, Object> out = result();
        List<String> errors = new ArrayList<>();
        List<Map<String, Object>> entries = new ArrayList<>();
        long start = System.nanoTime();
        try (Admin admin = Admin.create(adminProps(bootstrap, a))) {
            Map<ClientQuotaEntity, Map<String, Double>> found =
                admin.describeClientQuotas(filter).entities().get(60, TimeUnit.SECONDS);
            found.forEach((entity, values) -> {
                Map<String, Object> entry = new LinkedHashMap<>();
                entry.put("entity", entity.entries());
                entry.put("values", values);
                entries.add(entry);
            });
        } catch (ExecutionException exc) {
            errors.add(describe(exc.getCause()));
        }
        out.put("entries", entries);
        out.put("errors", errors);
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        return out;
    }

    private static Properties adminProps(String bootstrap, Args a) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", a.option("--client-id", "java-admin"));
        props.putAll(a.conf());
        return props;
    }

    // ---- shared -------------------------------------------------------------------------------

    private static Map<String, Object> result() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("client", "java");
        out.put("version", VERSION);
        return out;
    }

    /** A client's result before its metrics are read: null figures if it fails before then. */
    private static Map<String, Object> clientResult() {
        Map<String, Object> out = result();
        out.put("throttle_ms_max", null);
        out.put("throttle_ms_avg", null);
        out.put("responses", null);
        return out;
    }

    /** kafka-clients' version, from the properties file its jar carries. */
    private static String clientVersion() {
        Properties found = new Properties();
        try (InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                found.load(in);
            }
        } catch (IOException exc) {
            return "unknown";
        }
        return found.getProperty("version", "unknown");
    }

    /** `<prefix>-max`/`-avg` of `group` as throttle_ms_max/avg (null before any response), and the
     *  responses counted by the client's network layer (`responseGroup`'s response-total). */
    private static void metrics(Map<String, Object> out, Map<MetricName, ? extends Metric> metrics, String group,
                                String prefix, String responseGroup) {
        Map<String, Double> wanted = new HashMap<>();
        metrics.forEach((name, metric) -> {
            boolean throttle = name.group().equals(group) && name.name().startsWith(prefix + "-");
            boolean responses = name.group().equals(responseGroup) && name.name().equals("response-total");
            if ((throttle || responses) && metric.metricValue() instanceof Double value) {
                wanted.put(name.name(), value);
            }
        });
        out.put("throttle_ms_max", finite(wanted.get(prefix + "-max")));
        out.put("throttle_ms_avg", finite(wanted.get(prefix + "-avg")));
        Double responses = wanted.get("response-total");
        out.put("responses", responses == null ? null : responses.longValue());
    }

    private static Double finite(Double value) {
        return value == null || value.isNaN() || value.isInfinite() ? null : value;
    }

    private static void remember(Set<String> errors, Throwable exc) {
        if (errors.size() < MAX_ERRORS) {
            errors.add(describe(exc));
        }
    }

    private static String describe(Throwable exc) {
        return exc.getClass().getName() + ": " + exc.getMessage();
    }

    private static void usage(String why) {
        System.err.println("ContractClient: " + why + "\nusage: produce BOOTSTRAP TOPIC CLIENT_ID SECONDS [options] | "
                           + "consume BOOTSTRAP TOPIC CLIENT_ID GROUP COUNT TIMEOUT_SECONDS [--conf k=v ...] | "
                           + "admin-alter BOOTSTRAP ENTITY_JSON OPS_JSON [--validate-only] | "
                           + "admin-describe BOOTSTRAP FILTER_JSON [--strict]");
        System.exit(2);
    }

    /** Positionals, `--name value` options, bare flags, and repeated `--conf key=value`. */
    private static final class Args {
        private static final Set<String> FLAGS = Set.of("--idempotent", "--validate-only", "--strict");
        private final List<String> positionals = new ArrayList<>();
        private final Map<String, String> options = new HashMap<>();
        private final Set<String> flags = new HashSet<>();
        private final Properties conf = new Properties();

        Args(String[] args) {
            for (int i = 0; i < args.length; i++) {
                String arg = args[i];
                if (FLAGS.contains(arg)) {
                    flags.add(arg);
                } else if (arg.startsWith("--")) {
                    if (i + 1 >= args.length) {
                        usage(arg + " needs a value");
                    }
                    String value = args[++i];
                    if (arg.equals("--conf")) {
                        int eq = value.indexOf('=');
                        if (eq < 1) {
                            usage("--conf wants key=value, got " + value);
                        }
                        conf.put(value.substring(0, eq), value.substring(eq + 1));
                    } else {
                        options.put(arg, value);
                    }
                } else {
                    positionals.add(arg);
                }
            }
        }

        String positional(int index) {
            if (index >= positionals.size()) {
                usage("missing argument " + (index + 1));
            }
            return positionals.get(index);
        }

        String option(String name, String fallback) {
            return options.getOrDefault(name, fallback);
        }

        boolean flag(String name) {
            return flags.contains(name);
        }

        Properties conf() {
            return conf;
        }
    }
}
