import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;

/**
 * A Kafka Streams application: INPUT's records, repartitioned by key (an internal topic the group
 * creates: the broker for the streams protocol, the client for the classic one) and upper-cased,
 * to OUTPUT, with exactly-once processing (transactions), under group.protocol PROTOCOL.
 *
 * streams BOOTSTRAP INPUT OUTPUT APPLICATION_ID streams|classic STOP_FILE TIMEOUT_SECONDS
 *         [--state-dir DIR] [--conf k=v ...]
 *
 * Runs until the test creates STOP_FILE (once it has read every record from OUTPUT) or the timeout,
 * then closes. The last stdout line is one JSON object: the records it processed (the repartitioned
 * stream's, which may count a record twice when a transaction aborted), the states it went through,
 * the `application.server` endpoints the group told it of (KafkaStreams.metadataForAllStreamsClients:
 * what a streams group's heartbeat answer carries), errors, and seconds.
 */
public final class StreamsClient {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        if (args.length < 8 || !args[0].equals("streams")) {
            System.err.println("usage: streams BOOTSTRAP INPUT OUTPUT APPLICATION_ID streams|classic STOP_FILE "
                               + "TIMEOUT_SECONDS [--state-dir DIR] [--conf k=v ...]");
            System.exit(2);
        }
        String bootstrap = args[1], input = args[2], output = args[3], applicationId = args[4], protocol = args[5];
        Path stopFile = Path.of(args[6]);
        double timeout = Double.parseDouble(args[7]);
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        props.put("consumer.auto.offset.reset", "earliest");
        for (int i = 8; i < args.length; i++) {
            switch (args[i]) {
                case "--state-dir" -> props.put(StreamsConfig.STATE_DIR_CONFIG, args[++i]);
                case "--conf" -> {
                    String kv = args[++i];
                    props.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
                }
                default -> throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        AtomicLong processed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
               .repartition(Repartitioned.<byte[], String>as("by-key").withKeySerde(Serdes.ByteArray())
                                        .withValueSerde(Serdes.String()))
               .peek((key, value) -> processed.incrementAndGet())
               .mapValues(value -> value.toUpperCase())
               .to(output, Produced.with(Serdes.ByteArray(), Serdes.String()));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("client", "java-streams");
        out.put("protocol", protocol);
        Set<String> errors = new LinkedHashSet<>();
        List<String> states = new ArrayList<>();
        long start = System.nanoTime();
        long deadline = start + (long) (timeout * 1e9);
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setStateListener((now, before) -> {
                synchronized (states) {
                    states.add(now.name());
                }
            });
            streams.setUncaughtExceptionHandler(exc -> {
                synchronized (errors) {
                    errors.add(exc.getClass().getName() + ": " + exc.getMessage());
                }
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            while (System.nanoTime() < deadline && !Files.exists(stopFile)
                   && streams.state() != KafkaStreams.State.ERROR
                   && streams.state() != KafkaStreams.State.NOT_RUNNING) {
                Thread.sleep(100);
            }
            List<String> endpoints = new ArrayList<>();
            if (streams.state() == KafkaStreams.State.RUNNING) {
                streams.metadataForAllStreamsClients().forEach(m -> endpoints.add(m.host() + ":" + m.port()));
            }
            out.put("endpoints", endpoints);
            streams.close(Duration.ofSeconds(30));
        }
        out.put("processed", processed.get());
        synchronized (states) {
            out.put("states", new ArrayList<>(states));
        }
        synchronized (errors) {
            out.put("errors", new ArrayList<>(errors));
        }
        out.put("seconds", (System.nanoTime() - start) / 1e9);
        System.out.println(JSON.writeValueAsString(out));
        System.out.flush();
        System.exit(0);  // the application's non-daemon threads must not keep the JVM up
    }

    private StreamsClient() {
    }
}
