package rmqha.interop;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Produce load generator on the real Apache RocketMQ Java client (used by `rmq-ha bench produce`).
 * One DefaultMQProducer (as RocketMQ's own benchmark Producer does) shared by N threads, each
 * sending synchronously in a loop: single messages or batches of B, bodies of S bytes, no keys.
 * A warm-up period (JIT, routes, connections) is run first and not counted.
 *
 * <pre>
 * java -cp interop-java.jar rmqha.interop.BenchProducer --namesrv ADDR --topic T
 *      [--threads 4] [--seconds 10] [--warmup 2] [--body-size 1024] [--batch 1] [--queues 8]
 *      [--cpu-pids PID,PID]
 * </pre>
 *
 * Prints one JSON line on stdout: msgsPerSec, bytesPerSec (bodies only), p50Ms/p99Ms (per send
 * call, i.e. per batch when batching), errors (failed sends plus non-SEND_OK statuses), and with
 * --cpu-pids brokerCpuTicks: the CPU clock ticks those processes used in the measured window.
 */
public final class BenchProducer implements BenchMain.Bench {
    String namesrv;
    String topic;
    int threads = 4;
    double seconds = 10;
    double warmup = 2;
    int bodySize = 1024;
    int batch = 1;
    int queues = 8;
    /** Broker processes whose CPU (utime + stime, /proc) is read at the start and end of the
     * measured window: brokerCpuTicks in the result. */
    long[] cpuPids = new long[0];

    final AtomicLong errors = new AtomicLong();
    final List<Object> errorSamples = Collections.synchronizedList(new ArrayList<>());

    public static void main(String[] args) {
        BenchMain.main(args, new BenchProducer());
    }

    @Override
    public void option(String name, String value) {
        switch (name) {
            case "--namesrv": namesrv = value; break;
            case "--topic": topic = value; break;
            case "--threads": threads = Integer.parseInt(value); break;
            case "--seconds": seconds = Double.parseDouble(value); break;
            case "--warmup": warmup = Double.parseDouble(value); break;
            case "--body-size": bodySize = Integer.parseInt(value); break;
            case "--batch": batch = Integer.parseInt(value); break;
            case "--queues": queues = Integer.parseInt(value); break;
            case "--cpu-pids": cpuPids = parsePids(value); break;
            default: throw new IllegalArgumentException("unknown option " + name);
        }
    }

    @Override
    public void check() {
        if (namesrv == null || topic == null) {
            throw new IllegalArgumentException("--namesrv and --topic are required");
        }
    }

    /**
     * The real client's ACL hook for the credentials in system property `prop` ("AK:SK"), or
     * null (no ACL). `rmq-ha bench produce --secure` passes them; TLS is the client's own
     * -Dtls.enable=true.
     */
    static RPCHook aclHook(String prop) {
        String v = System.getProperty(prop);
        if (v == null || v.isEmpty()) {
            return null;
        }
        int i = v.indexOf(':');
        return new AclClientRPCHook(new SessionCredentials(v.substring(0, i), v.substring(i + 1)));
    }

    static long[] parsePids(String v) {
        return v.isEmpty()
            ? new long[0]
            : Arrays.stream(v.split(",")).mapToLong(Long::parseLong).toArray();
    }

    /**
     * utime + stime of the given processes in clock ticks (fields 14 and 15 of /proc/PID/stat,
     * counted after the command name's closing parenthesis); -1 if one cannot be read.
     */
    static long cpuTicks(long[] pids) {
        long total = 0;
        for (long pid : pids) {
            try {
                String stat = new String(
                    java.nio.file.Files.readAllBytes(java.nio.file.Path.of("/proc/" + pid + "/stat")),
                    java.nio.charset.StandardCharsets.US_ASCII);
                String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                total += Long.parseLong(f[11]) + Long.parseLong(f[12]);
            } catch (java.io.IOException | RuntimeException e) {
                return -1;
            }
        }
        return total;
    }

    /** Sleeps until System.nanoTime() reaches `at`. */
    static void sleepUntil(long at) throws InterruptedException {
        long left;
        while ((left = at - System.nanoTime()) > 0) {
            Thread.sleep(Math.max(1, left / 1_000_000), (int) (left % 1_000_000));
        }
    }

    /** Creates the topic with `queues` read/write queues on every master and waits for its route. */
    void createTopic() throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(aclHook("rmqha.bench.aclAdmin"));
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("bench-admin-" + ProcessHandle.current().pid());
        admin.start();
        try {
            ClusterInfo ci = admin.examineBrokerClusterInfo();
            TopicConfig tc = new TopicConfig(topic, queues, queues, 6);
            for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                String master = bd.getBrokerAddrs().get(MixAll.MASTER_ID);
                if (master != null) {
                    admin.createAndUpdateTopicConfig(master, tc);
                }
            }
            long deadline = System.currentTimeMillis() + 30_000;
            while (true) {
                try {
                    TopicRouteData rd = admin.examineTopicRouteInfo(topic);
                    if (rd.getQueueDatas().stream().anyMatch(q -> q.getWriteQueueNums() == queues)) {
                        return;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("no route with " + queues + " queues for " + topic);
                }
                Thread.sleep(200);
            }
        } finally {
            admin.shutdown();
        }
    }

    /** Per-thread latency samples in microseconds. */
    static final class Samples {
        long[] us = new long[1 << 16];
        int n;
        long msgs;
        long sends;

        void add(long v) {
            if (n == us.length) {
                us = Arrays.copyOf(us, n * 2);
            }
            us[n++] = v;
        }
    }

    @Override
    public Map<String, Object> run() throws Exception {
        createTopic();
        DefaultMQProducer p = new DefaultMQProducer(
            "P_bench_" + ProcessHandle.current().pid(), aclHook("rmqha.bench.acl"));
        p.setNamesrvAddr(namesrv);
        p.setInstanceName("bench-producer-" + ProcessHandle.current().pid());
        p.setSendMsgTimeout(5000);
        p.setRetryTimesWhenSendFailed(0); // a failure is an error, not a hidden retry
        p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        p.start();
        byte[] body = new byte[bodySize];
        for (int i = 0; i < bodySize; i++) {
            body[i] = (byte) ('a' + (i % 26));
        }
        long t0 = System.nanoTime();
        long measureFrom = t0 + (long) (warmup * 1e9);
        long end = measureFrom + (long) (seconds * 1e9);
        Samples[] samples = new Samples[threads];
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            Samples s = samples[t] = new Samples();
            ts[t] = new Thread(() -> loop(p, body, s, measureFrom, end), "bench-" + t);
            ts[t].start();
        }
        // The brokers' CPU over the measured window only (not the warm-up or client start-up).
        sleepUntil(measureFrom);
        long cpu0 = cpuTicks(cpuPids);
        sleepUntil(end);
        long cpu1 = cpuTicks(cpuPids);
        for (Thread t : ts) {
            t.join();
        }
        p.shutdown();
        double measured = seconds; // only sends started and completed inside [measureFrom, end] count

        long msgs = 0;
        long sends = 0;
        int total = 0;
        for (Samples s : samples) {
            msgs += s.msgs;
            sends += s.sends;
            total += s.n;
        }
        long[] all = new long[total];
        int k = 0;
        for (Samples s : samples) {
            System.arraycopy(s.us, 0, all, k, s.n);
            k += s.n;
        }
        Arrays.sort(all);
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("client", "java");
        r.put("clientVersion", InteropMain.CLIENT_VERSION);
        r.put("topic", topic);
        r.put("queues", queues);
        r.put("threads", threads);
        r.put("bodySize", bodySize);
        r.put("batch", batch);
        r.put("seconds", Math.round(measured * 1000) / 1000.0);
        r.put("msgs", msgs);
        r.put("sends", sends);
        r.put("msgsPerSec", Math.round(msgs / measured));
        r.put("bytesPerSec", Math.round(msgs * (double) bodySize / measured));
        r.put("p50Ms", quantileMs(all, 50));
        r.put("p99Ms", quantileMs(all, 99));
        r.put("maxMs", all.length == 0 ? null : all[all.length - 1] / 1000.0);
        r.put("errors", errors.get());
        r.put("errorSamples", new ArrayList<>(errorSamples));
        if (cpuPids.length > 0) {
            r.put("brokerCpuTicks", cpu0 < 0 || cpu1 < 0 ? null : cpu1 - cpu0);
        }
        return r;
    }

    static Object quantileMs(long[] sorted, double q) {
        if (sorted.length == 0) {
            return null;
        }
        int rank = (int) Math.max(1, Math.ceil(q / 100 * sorted.length));
        return sorted[rank - 1] / 1000.0;
    }

    void loop(DefaultMQProducer p, byte[] body, Samples s, long measureFrom, long end) {
        while (true) {
            long start = System.nanoTime();
            if (start >= end) {
                return;
            }
            boolean ok;
            try {
                SendResult r;
                if (batch == 1) {
                    // The client stamps UNIQ_KEY into the properties; a fresh message per send.
                    r = p.send(new Message(topic, "bench", body));
                } else {
                    List<Message> b = new ArrayList<>(batch);
                    for (int i = 0; i < batch; i++) {
                        b.add(new Message(topic, "bench", body));
                    }
                    r = p.send(b);
                }
                ok = r.getSendStatus() == SendStatus.SEND_OK;
                if (!ok) {
                    error(Map.of("type", "status", "message", r.getSendStatus().name()));
                }
            } catch (Exception e) {
                ok = false;
                error(InteropMain.describe(e));
            }
            long done = System.nanoTime();
            if (start >= measureFrom && done <= end) {
                s.add((done - start) / 1000);
                s.sends++;
                if (ok) {
                    s.msgs += batch;
                }
            }
        }
    }

    void error(Map<String, Object> e) {
        if (errors.incrementAndGet() <= 5) {
            errorSamples.add(e);
        }
    }
}
