import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Kafka's Java `Admin` on ACLs and topic listings, for the authorization tests: `topics` (listTopics:
 * what Metadata shows the principal), `acls-create` (a JSON list of bindings), `acls-describe` and
 * `acls-delete` (a JSON filter; absent keys match anything). A binding or filter is
 * {"resource_type": "TOPIC", "name": "b", "pattern": "LITERAL", "principal": "User:bob", "host": "*",
 * "operation": "WRITE", "permission": "ALLOW"}. Each prints one JSON object as its last stdout line:
 * {"topics"|"acls": [...], "errors": [...]}, a binding written as Kafka's AclBinding.toString().
 */
public final class AclClient {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        String command = args[0], bootstrap = args[1];
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", "java-acl-admin");
        props.put("default.api.timeout.ms", "30000");
        props.put("request.timeout.ms", "20000");
        for (int i = 3; i + 1 < args.length; i += 2) {   // --conf key=value pairs after the positional JSON
            String[] pair = args[i + 1].split("=", 2);
            props.put(pair[0], pair[1]);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> errors = new ArrayList<>();
        try (Admin admin = Admin.create(props)) {
            switch (command) {
                case "topics" -> out.put("topics", new TreeSet<>(admin.listTopics().names().get(60, TimeUnit.SECONDS)));
                case "acls-create" -> {
                    List<AclBinding> bindings = new ArrayList<>();
                    JSON.readTree(args[2]).forEach(node -> bindings.add(binding(node)));
                    admin.createAcls(bindings).all().get(60, TimeUnit.SECONDS);
                    out.put("acls", names(bindings));
                }
                case "acls-describe" -> out.put("acls", names(admin.describeAcls(filter(JSON.readTree(args[2])))
                                                                 .values().get(60, TimeUnit.SECONDS)));
                case "acls-delete" -> out.put("acls", names(admin.deleteAcls(List.of(filter(JSON.readTree(args[2]))))
                                                               .all().get(60, TimeUnit.SECONDS)));
                default -> throw new IllegalArgumentException("unknown command " + command);
            }
        } catch (ExecutionException exc) {
            errors.add(exc.getCause().getClass().getName() + ": " + exc.getCause().getMessage());
        }
        out.put("errors", errors);
        System.out.println(JSON.writeValueAsString(out));
    }

    private static String text(JsonNode node, String key, String otherwise) {
        JsonNode value = node.get(key);
        return value == null || value.isNull() ? otherwise : value.asText();
    }

    private static AclBinding binding(JsonNode node) {
        return new AclBinding(
            new ResourcePattern(ResourceType.fromString(text(node, "resource_type", "TOPIC")), text(node, "name", null),
                                PatternType.fromString(text(node, "pattern", "LITERAL"))),
            new AccessControlEntry(text(node, "principal", null), text(node, "host", "*"),
                                   AclOperation.fromString(text(node, "operation", null)),
                                   AclPermissionType.fromString(text(node, "permission", "ALLOW"))));
    }

    private static AclBindingFilter filter(JsonNode node) {
        return new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.fromString(text(node, "resource_type", "ANY")), text(node, "name", null),
                                      PatternType.fromString(text(node, "pattern", "ANY"))),
            new AccessControlEntryFilter(text(node, "principal", null), text(node, "host", null),
                                         AclOperation.fromString(text(node, "operation", "ANY")),
                                         AclPermissionType.fromString(text(node, "permission", "ANY"))));
    }

    private static List<String> names(Collection<AclBinding> bindings) {
        return bindings.stream().map(AclBinding::toString).sorted().toList();
    }
}
