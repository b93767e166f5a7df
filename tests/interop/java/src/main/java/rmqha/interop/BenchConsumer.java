package rmqha.interop;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Consume load generator on the real Apache RocketMQ Java client (used by `rmq-ha bench produce`
 * for its consume case). Two phases in one process:
 *
 * <ol>
 *   <li>fill: creates the topic (--queues queues) and stores --count messages of --body-size
 *       bytes with one DefaultMQProducer, --fill-threads threads sending batches of --batch
 *       synchronously (not measured);
 *   <li>drain: one started DefaultLitePullConsumer (a fresh group, pull batch --pull-batch,
 *       auto commit) fetches the topic's queues; then the clock (and the brokers' CPU,
 *       --cpu-pids) starts, it assigns itself every queue (no rebalance) and polls from the
 *       first offset (a fresh group, CONSUME_FROM_FIRST_OFFSET; no seek: see {@link #run})
 *       until it has received --count messages or --timeout seconds passed.
 * </ol>
 *
 * <pre>
 * java -cp interop-java.jar rmqha.interop.BenchConsumer --namesrv ADDR --topic T --count N
 *      [--body-size 1024] [--batch 32] [--fill-threads 4] [--queues 8] [--pull-batch 32]
 *      [--timeout 120] [--cpu-pids PID,PID]
 * </pre>
 *
 * Prints one JSON line on stdout: msgsPerSec and bytesPerSec (bodies) of the drain, msgs (counted
 * messages), seconds, fillSeconds, errors (failed fill sends), brokerCpuTicks (with --cpu-pids).
 */
public final class BenchConsumer implements BenchMain.Bench {
    String namesrv;
    String topic;
    long count;
    int bodySize = 1024;
    int batch = 32;
    int fillThreads = 4;
    int queues = 8;
    int pullBatch = 32;
    double timeout = 120;
    long[] cpuPids = new long[0];

    final AtomicLong errors = new AtomicLong();
    final List<Object> errorSamples = Collections.synchronizedList(new ArrayList<>());

    public static void main(String[] args) {
        BenchMain.main(args, new BenchConsumer());
    }

    @Override
    public void option(String name, String value) {
        switch (name) {
            case "--namesrv": namesrv = value; break;
            case "--topic": topic = value; break;
            case "--count": count = Long.parseLong(value); break;
            case "--body-size": bodySize = Integer.parseInt(value); break;
            case "--batch": batch = Integer.parseInt(value); break;
            case "--fill-threads": fillThreads = Integer.parseInt(value); break;
            case "--queues": queues = Integer.parseInt(value); break;
            case "--pull-batch": pullBatch = Integer.parseInt(value); break;
            case "--timeout": timeout = Double.parseDouble(value); break;
            case "--cpu-pids": cpuPids = BenchProducer.parsePids(value); break;
            default: throw new IllegalArgumentException("unknown option " + name);
        }
    }

    @Override
    public void check() {
        if (namesrv == null || topic == null) {
            throw new IllegalArgumentException("--namesrv and --topic are required");
        }
        if (count <= 0 || batch <= 0 || fillThreads <= 0 || pullBatch <= 0) {
            throw new IllegalArgumentException("--count, --batch, --fill-threads, --pull-batch must be > 0");
        }
    }

    @Override
    public Map<String, Object> run() throws Exception {
        BenchProducer topicMaker = new BenchProducer();
        topicMaker.namesrv = namesrv;
        topicMaker.topic = topic;
        topicMaker.queues = queues;
        topicMaker.createTopic();
        long f0 = System.nanoTime();
        fill();
        double fillSeconds = (System.nanoTime() - f0) / 1e9;
        if (errors.get() > 0) {
            throw new IllegalStateException(errors.get() + " fill sends failed: " + errorSamples);
        }

        DefaultLitePullConsumer c = new DefaultLitePullConsumer(
            "C_bench_" + ProcessHandle.current().pid(), BenchProducer.aclHook("rmqha.bench.acl"));
        c.setNamesrvAddr(namesrv);
        c.setInstanceName("bench-consumer-" + ProcessHandle.current().pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(pullBatch);
        c.setAutoCommit(true);
        c.start();
        long received = 0;
        long t0;
        long t1;
        long cpu0;
        long cpu1 = 0;
        try {
            // Assigned queues, no rebalance: nothing is pulled before the clock starts.
            Collection<MessageQueue> mqs = c.fetchMessageQueues(topic);
            t0 = System.nanoTime();
            cpu0 = BenchProducer.cpuTicks(cpuPids);
            // No seek(mq, 0) after assign: assign starts each queue's pull task at once, so a
            // seek races with pulls already in flight. On a loaded machine one queue then
            // drained from offset 192 or 448 instead of 0 (every other queue whole, and
            // the later offsets of that queue read): the head of the queue was never pulled
            // again. A fresh group with CONSUME_FROM_FIRST_OFFSET starts every queue at its
            // first offset without a seek.
            c.assign(mqs);
            for (MessageQueue mq : mqs) {
                // every assigned queue is reported, a queue that gave nothing too
                perQueue.put(mq.getQueueId(), new long[] {0, -1});
            }
            long deadline = t0 + (long) (timeout * 1e9);
            while (received < count && System.nanoTime() < deadline) {
                List<MessageExt> got = c.poll(1000);
                received += got.size();
                for (MessageExt m : got) {
                    long[] q = perQueue.computeIfAbsent(m.getQueueId(), k -> new long[] {0, -1});
                    q[0]++;
                    q[1] = Math.max(q[1], m.getQueueOffset());
                }
            }
            t1 = System.nanoTime();
            cpu1 = BenchProducer.cpuTicks(cpuPids);
        } finally {
            c.shutdown();
        }
        if (received < count) {
            // which queue fell short, and where: the consumer's view, to set beside the
            // broker's log and store (the bench keeps a failed case's work dir)
            StringBuilder where = new StringBuilder();
            for (Map.Entry<Integer, long[]> e : perQueue.entrySet()) {
                where.append(String.format(" q%d: %d msgs, last offset %d;",
                    e.getKey(), e.getValue()[0], e.getValue()[1]));
            }
            throw new IllegalStateException(
                "drained " + received + " of " + count + " messages in " + timeout + " s;" + where);
        }
        double seconds = (t1 - t0) / 1e9;
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("client", "java");
        r.put("clientVersion", InteropMain.CLIENT_VERSION);
        r.put("consumer", "DefaultLitePullConsumer");
        r.put("topic", topic);
        r.put("queues", queues);
        r.put("bodySize", bodySize);
        r.put("pullBatch", pullBatch);
        r.put("filled", count);
        r.put("received", received);
        r.put("msgs", received);
        r.put("seconds", Math.round(seconds * 1000) / 1000.0);
        r.put("fillSeconds", Math.round(fillSeconds * 1000) / 1000.0);
        r.put("msgsPerSec", seconds > 0 ? Math.round(received / seconds) : 0);
        r.put("bytesPerSec", seconds > 0 ? Math.round(received * (double) bodySize / seconds) : 0);
        r.put("errors", errors.get());
        if (cpuPids.length > 0) {
            r.put("brokerCpuTicks", cpu0 < 0 || cpu1 < 0 ? null : cpu1 - cpu0);
        }
        return r;
    }

    /** Per queue id: messages received and the highest queue offset among them. */
    final Map<Integer, long[]> perQueue = new TreeMap<>();

    /** Stores `count` messages: fillThreads threads claim batches from a shared counter. */
    void fill() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(
            "P_benchfill_" + ProcessHandle.current().pid(), BenchProducer.aclHook("rmqha.bench.acl"));
        p.setNamesrvAddr(namesrv);
        p.setInstanceName("bench-fill-" + ProcessHandle.current().pid());
        p.setSendMsgTimeout(10000);
        p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        p.start();
        byte[] body = new byte[bodySize];
        for (int i = 0; i < bodySize; i++) {
            body[i] = (byte) ('a' + (i % 26));
        }
        AtomicLong claimed = new AtomicLong();
        Thread[] ts = new Thread[fillThreads];
        try {
            for (int t = 0; t < fillThreads; t++) {
                ts[t] = new Thread(() -> {
                    long from;
                    while ((from = claimed.getAndAdd(batch)) < count && errors.get() == 0) {
                        int n = (int) Math.min(batch, count - from);
                        List<Message> b = new ArrayList<>(n);
                        for (int i = 0; i < n; i++) {
                            b.add(new Message(topic, "bench", body));
                        }
                        try {
                            SendResult r = n == 1 ? p.send(b.get(0)) : p.send(b);
                            if (r.getSendStatus() != SendStatus.SEND_OK) {
                                error(Map.of("type", "status", "message", r.getSendStatus().name()));
                            }
                        } catch (Exception e) {
                            error(InteropMain.describe(e));
                        }
                    }
                }, "fill-" + t);
                ts[t].start();
            }
            for (Thread t : ts) {
                t.join();
            }
        } finally {
            p.shutdown();
        }
    }

    void error(Map<String, Object> e) {
        if (errors.incrementAndGet() <= 5) {
            errorSamples.add(e);
        }
    }
}
