package rmqha.interop;

import java.io.PrintStream;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What every bench program's main does: options as "--name value" pairs (a usage error exits 2),
 * one run, and one JSON result line on stdout (stdout carries nothing else: System.out goes to
 * stderr while the bench runs); a failure prints its stack trace and {"fatal": ...} and exits 1.
 * Exits with halt, so client threads that linger cannot keep the JVM up.
 */
final class BenchMain {
    /** A bench program: takes its options one at a time, checks them, runs. */
    interface Bench {
        /** One option; throws IllegalArgumentException for an unknown name or a bad value. */
        void option(String name, String value);

        /** After the last option: throws IllegalArgumentException if a required one is missing. */
        void check();

        Map<String, Object> run() throws Exception;
    }

    private BenchMain() {}

    static void main(String[] args, Bench bench) {
        PrintStream out = System.out;
        System.setOut(System.err);
        try {
            for (int i = 0; i < args.length; i += 2) {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException("missing value for " + args[i]);
                }
                bench.option(args[i], args[i + 1]);
            }
            bench.check();
        } catch (RuntimeException e) {
            System.err.println("usage error: " + e.getMessage());
            Runtime.getRuntime().halt(2);
            return;
        }
        Map<String, Object> result;
        int rc = 0;
        try {
            result = bench.run();
        } catch (Throwable t) {
            t.printStackTrace();
            result = new LinkedHashMap<>();
            result.put("fatal", InteropMain.describe(t));
            rc = 1;
        }
        out.println(Json.write(result));
        out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }
}
