import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.regex.Pattern;
import javax.security.auth.x500.X500Principal;

/**
 * The Java reference kqp's TLS identity is checked against (tests/helpers/java_reference.py).
 * One request per line, every string hex-encoded UTF-8, one answer line each:
 *   "N <DER of an X.501 Name>"             -> "OK <X500Principal.getName()>"
 *   "R <regex> TAB <replacement> TAB <dn>" -> "OK <dn.replaceAll(regex, replacement)>" if the regex
 *                                              matches the whole dn, else "NOMATCH"
 * and "ERR <exception>" when Java throws.
 */
public class X500Check {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        HexFormat hex = HexFormat.of();
        String line;
        while ((line = in.readLine()) != null) {
            try {
                if (line.startsWith("N ")) {
                    String name = new X500Principal(hex.parseHex(line.substring(2))).getName();
                    out.println("OK " + hex.formatHex(name.getBytes(StandardCharsets.UTF_8)));
                } else {
                    String[] part = line.substring(2).split("\t", -1);
                    String regex = text(hex, part[0]), replacement = text(hex, part[1]), dn = text(hex, part[2]);
                    if (Pattern.compile(regex).matcher(dn).matches()) {
                        out.println("OK " + hex.formatHex(dn.replaceAll(regex, replacement).getBytes(StandardCharsets.UTF_8)));
                    } else {
                        out.println("NOMATCH");
                    }
                }
            } catch (Exception e) {
                out.println("ERR " + e);
            }
        }
    }

    private static String text(HexFormat hex, String encoded) {
        return new String(hex.parseHex(encoded), StandardCharsets.UTF_8);
    }
}
