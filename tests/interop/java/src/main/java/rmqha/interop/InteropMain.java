package rmqha.interop;

import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.trace.TraceBean;
import org.apache.rocketmq.client.trace.TraceContext;
import org.apache.rocketmq.client.trace.TraceDataEncoder;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.body.LockBatchResponseBody;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Interop driver on the real Apache RocketMQ Java client. One scenario per run; prints exactly one
 * JSON line on stdout (everything else goes to stderr) and exits 0 on success.
 *
 * <pre>
 * java -jar interop-java.jar SCENARIO --namesrv ADDR --topic T --group G --count N
 *      [--serialize JSON|ROCKETMQ] [--timeout SECONDS] [--prefix P] [--keys K] [--batch-size B]
 *      [--body-size BYTES] [--fail-every F] [--retry-delay-level L] [--queues Q]
 *      [--interval-ms MS] [--consume-delay-ms MS] [--tags T1,T2,..] [--subscription EXPR]
 *      [--max-reconsume-times R] [--fail-index I] [--suspend-ms MS] [--quiet-ms MS]
 * </pre>
 *
 * Scenarios: send-sync, send-async, send-oneway, send-batch, send-orderly, consume-push-concurrent,
 * consume-push-orderly, consume-push-broadcast, request-reply, consume-pull, consume-lite-pull, consume-with-failures, offset-resume, route,
 * send-delayed (--delay-level), send-transaction (body n: n % 3 == 0 commits, 1 rolls back,
 * 2 answers UNKNOW and commits when the broker checks), orderly-failover (an ordered producer and
 * an orderly push consumer in one process, run while the test kills and restarts a master; see
 * orderlyFailover), trace (a traced producer and push consumer; the trace records read back from
 * RMQ_SYS_TRACE_TOPIC, see trace), consume-orderly-dlq (an orderly consumer suspends body
 * --fail-index until it goes to %DLQ%group, see consumeOrderlyDlq).
 *
 * --tags: the tags sends rotate through (message i gets tag i % n; default TagA).
 * --subscription: the push consumer's tag expression (default *); --sql EXPR subscribes with
 * an SQL92 selector instead. Every PULL_MESSAGE answer
 * that carried messages is decoded as it came off the wire, before the client's own tag
 * filter, and its tags are counted in "wireTags": what the broker chose to send.
 */
public final class InteropMain {
    static final String CLIENT_VERSION = "5.5.0";
    static final String USER_PROP = "interop";

    private static PrintStream out;

    // options
    String scenario;
    String namesrv;
    String topic;
    String group;
    int count = 10;
    String serialize;
    int timeoutSec = 60;
    String prefix;
    int keys = 4;
    int batchSize = 10;
    int bodySize = 0;
    int failEvery = 3;
    int retryDelayLevel = 1;
    int queues = 0;
    int delayLevel = 1;
    int intervalMs = 20;
    int consumeDelayMs = 40;
    String[] tags = {"TagA"};
    String subscription = "*";
    /** consume-push-server-rebalance: PULL, or POP (set on every master first). */
    String requestMode = "PULL";
    String sql;
    String accessKey;
    int maxReconsumeTimes = 1;
    int failIndex = 0;
    int suspendMs = 100;
    int quietMs = 2000;
    String secretKey;

    final Map<String, Object> result = new LinkedHashMap<>();
    final List<Object> sent = Collections.synchronizedList(new ArrayList<>());
    final List<Object> received = Collections.synchronizedList(new ArrayList<>());
    final List<Object> errors = Collections.synchronizedList(new ArrayList<>());
    final AtomicInteger instanceSeq = new AtomicInteger();
    /** Request codes this run sent, per peer ("namesrv" or "broker"), from an RPCHook. */
    final Map<String, Map<Integer, AtomicInteger>> requests = new ConcurrentHashMap<>();
    /** PULL_MESSAGE answers that carried messages (FOUND), per broker address. */
    final Map<String, AtomicInteger> pullsFound = new ConcurrentHashMap<>();
    /** Tags of the messages in PULL_MESSAGE answers, before the client filters them. */
    final Map<String, AtomicInteger> wireTags = new ConcurrentHashMap<>();
    /** Queues ("brokerName:queueId") each broker address granted in a LOCK_BATCH_MQ answer. */
    final Map<String, Set<String>> locksGranted = new ConcurrentHashMap<>();
    /** --access-key/--secret-key: the real client's ACL hook signs every request after counting. */
    RPCHook acl;
    final RPCHook hook = new RPCHook() {
        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
            String peer = namesrv.equals(remoteAddr) ? "namesrv" : "broker";
            int code = request.getCode();
            requests.computeIfAbsent(peer, k -> new ConcurrentHashMap<>())
                .computeIfAbsent(request.isOnewayRPC() ? -code : code, k -> new AtomicInteger())
                .incrementAndGet();
            if (acl != null) {
                acl.doBeforeRequest(remoteAddr, request);
            }
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            if (response == null || remoteAddr == null) {
                return;
            }
            if (request.getCode() == RequestCode.PULL_MESSAGE && response.getCode() == ResponseCode.SUCCESS) {
                pullsFound.computeIfAbsent(remoteAddr, k -> new AtomicInteger()).incrementAndGet();
                if (response.getBody() != null) {
                    try {
                        for (MessageExt m : MessageDecoder.decodes(ByteBuffer.wrap(response.getBody()), false)) {
                            wireTags.computeIfAbsent(String.valueOf(m.getTags()), k -> new AtomicInteger())
                                .incrementAndGet();
                        }
                    } catch (RuntimeException e) {
                        errors.add(describe(e));
                    }
                }
            } else if (request.getCode() == RequestCode.LOCK_BATCH_MQ
                && response.getCode() == ResponseCode.SUCCESS && response.getBody() != null) {
                try {
                    LockBatchResponseBody b = LockBatchResponseBody.decode(response.getBody(), LockBatchResponseBody.class);
                    Set<String> got = locksGranted.computeIfAbsent(remoteAddr, k -> ConcurrentHashMap.newKeySet());
                    for (MessageQueue mq : b.getLockOKMQSet()) {
                        got.add(mq.getBrokerName() + ":" + mq.getQueueId());
                    }
                } catch (RuntimeException e) {
                    errors.add(describe(e));
                }
            }
        }
    };

    public static void main(String[] args) {
        out = System.out;
        System.setOut(System.err); // client libraries may print; stdout carries only the result
        InteropMain m = new InteropMain();
        int rc;
        try {
            m.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("usage error: " + e.getMessage());
            Runtime.getRuntime().halt(2);
            return;
        }
        if (m.serialize != null) {
            // The client reads -Drocketmq.serialize.type first, then env ROCKETMQ_SERIALIZE_TYPE
            // (RemotingCommand's static initialiser), so this must run before any client class loads.
            System.setProperty(RemotingCommand.SERIALIZE_TYPE_PROPERTY, m.serialize);
        }
        System.setProperty("rocketmq.client.rebalance.waitInterval",
            System.getProperty("rocketmq.client.rebalance.waitInterval", "2000"));
        long t0 = System.currentTimeMillis();
        try {
            m.run();
        } catch (Throwable t) {
            t.printStackTrace();
            m.errors.add(describe(t));
        }
        m.result.put("elapsedMs", System.currentTimeMillis() - t0);
        Map<String, Object> reqs = new TreeMap<>();
        m.requests.forEach((peer, codes) -> {
            Map<String, Object> c = new TreeMap<>();
            codes.forEach((code, n) -> c.put(String.valueOf(code), n.get()));
            reqs.put(peer, c);
        });
        m.result.put("requests", reqs); // negative code = sent oneway
        Map<String, Object> wt = new TreeMap<>();
        m.wireTags.forEach((t, n) -> wt.put(t, n.get()));
        m.result.put("wireTags", wt);
        m.result.put("sent", m.sent);
        m.result.put("received", m.received);
        m.result.put("errors", m.errors);
        rc = m.errors.isEmpty() ? 0 : 1;
        out.println(Json.write(m.result));
        out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(rc);
    }

    void parse(String[] args) {
        if (args.length < 1) {
            throw new IllegalArgumentException("missing SCENARIO");
        }
        scenario = args[0];
        for (int i = 1; i < args.length; i++) {
            String k = args[i];
            if (i + 1 >= args.length) {
                throw new IllegalArgumentException("missing value for " + k);
            }
            String v = args[++i];
            switch (k) {
                case "--namesrv": namesrv = v; break;
                case "--topic": topic = v; break;
                case "--group": group = v; break;
                case "--count": count = Integer.parseInt(v); break;
                case "--serialize": serialize = v; break;
                case "--timeout": timeoutSec = Integer.parseInt(v); break;
                case "--prefix": prefix = v; break;
                case "--keys": keys = Integer.parseInt(v); break;
                case "--batch-size": batchSize = Integer.parseInt(v); break;
                case "--body-size": bodySize = Integer.parseInt(v); break;
                case "--fail-every": failEvery = Integer.parseInt(v); break;
                case "--retry-delay-level": retryDelayLevel = Integer.parseInt(v); break;
                case "--queues": queues = Integer.parseInt(v); break;
                case "--delay-level": delayLevel = Integer.parseInt(v); break;
                case "--interval-ms": intervalMs = Integer.parseInt(v); break;
                case "--consume-delay-ms": consumeDelayMs = Integer.parseInt(v); break;
                case "--access-key": accessKey = v; break;
                case "--secret-key": secretKey = v; break;
                case "--tags": tags = v.split(","); break;
                case "--subscription": subscription = v; break;
                case "--sql": sql = v; break;
                case "--max-reconsume-times": maxReconsumeTimes = Integer.parseInt(v); break;
                case "--fail-index": failIndex = Integer.parseInt(v); break;
                case "--suspend-ms": suspendMs = Integer.parseInt(v); break;
                case "--quiet-ms": quietMs = Integer.parseInt(v); break;
                case "--request-mode": requestMode = v; break;
                default: throw new IllegalArgumentException("unknown option " + k);
            }
        }
        if (namesrv == null || topic == null) {
            throw new IllegalArgumentException("--namesrv and --topic are required");
        }
        if ((accessKey == null) != (secretKey == null)) {
            throw new IllegalArgumentException("--access-key and --secret-key go together");
        }
        if (accessKey != null) {
            acl = new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
        }
        if (group == null) {
            group = "G_" + topic;
        }
        if (prefix == null) {
            prefix = topic;
        }
    }

    void run() throws Exception {
        result.put("client", "java");
        result.put("clientVersion", CLIENT_VERSION);
        result.put("scenario", scenario);
        result.put("serializeType", RemotingCommand.getSerializeTypeConfigInThisServer().name());
        result.put("topic", topic);
        result.put("group", group);
        result.put("count", count);
        switch (scenario) {
            case "send-sync": sendSync(); break;
            case "send-async": sendAsync(); break;
            case "send-oneway": sendOneway(); break;
            case "send-batch": sendBatch(); break;
            case "send-orderly": sendOrderly(); break;
            case "consume-push-concurrent": consumePush(false); break;
            case "consume-push-orderly": consumePush(true); break;
            case "consume-push-broadcast": consumeBroadcast(); break;
            case "consume-push-server-rebalance": consumeServerRebalance(); break;
            case "request-reply": requestReply(); break;
            case "consume-pull": consumePull(); break;
            case "consume-lite-pull": consumeLitePull(); break;
            case "consume-with-failures": consumeWithFailures(); break;
            case "offset-resume": offsetResume(); break;
            case "route": route(); break;
            case "send-delayed": sendDelayed(); break;
            case "send-transaction": sendTransaction(); break;
            case "trace": trace(); break;
            case "consume-orderly-dlq": consumeOrderlyDlq(); break;
            case "orderly-failover": orderlyFailover(); break;
            default: throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    // ---------------------------------------------------------------- helpers

    static Map<String, Object> describe(Throwable t) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("type", t.getClass().getName());
        e.put("message", String.valueOf(t.getMessage()));
        Throwable c = t.getCause();
        if (c != null) {
            e.put("cause", c.getClass().getName() + ": " + c.getMessage());
        }
        return e;
    }

    String instance(String role) {
        return "interop-" + role + "-" + ProcessHandle.current().pid() + "-" + instanceSeq.incrementAndGet();
    }

    long deadline() {
        return System.currentTimeMillis() + timeoutSec * 1000L;
    }

    /** Body: "ID" or, with --body-size, "ID|" padded with a checkable pattern to that size. */
    byte[] body(String id) {
        if (bodySize <= id.length() + 1) {
            return id.getBytes(StandardCharsets.UTF_8);
        }
        StringBuilder sb = new StringBuilder(bodySize).append(id).append('|');
        int i = 0;
        while (sb.length() < bodySize) {
            sb.append((char) ('a' + (i++ % 26)));
        }
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    static String bodyId(byte[] body) {
        String s = new String(body, StandardCharsets.UTF_8);
        int bar = s.indexOf('|');
        return bar < 0 ? s : s.substring(0, bar);
    }

    static boolean bodyOk(byte[] body) {
        String s = new String(body, StandardCharsets.UTF_8);
        int bar = s.indexOf('|');
        if (bar < 0) {
            return true;
        }
        for (int i = bar + 1, j = 0; i < s.length(); i++, j++) {
            if (s.charAt(i) != (char) ('a' + (j % 26))) {
                return false;
            }
        }
        return true;
    }

    Message message(String id, String key) {
        int dash = id.lastIndexOf('-');
        int n = 0;
        if (dash >= 0) {
            try {
                n = Integer.parseInt(id.substring(dash + 1));
            } catch (NumberFormatException e) {
                n = 0;
            }
        }
        Message msg = new Message(topic, tags[n % tags.length], key, body(id));
        msg.putUserProperty(USER_PROP, id);
        return msg;
    }

    DefaultMQProducer producer() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group.startsWith("P") ? group : "P_" + group, hook);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(instance("producer"));
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(2);
        p.setRetryTimesWhenSendAsyncFailed(2);
        p.start();
        return p;
    }

    Map<String, Object> sentRecord(String id, String key, SendResult r) {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("body", id);
        s.put("key", key);
        if (r != null) {
            s.put("status", r.getSendStatus().name());
            s.put("msgId", r.getMsgId());
            s.put("offsetMsgId", r.getOffsetMsgId());
            s.put("brokerName", r.getMessageQueue().getBrokerName());
            s.put("queueId", r.getMessageQueue().getQueueId());
            s.put("queueOffset", r.getQueueOffset());
        }
        return s;
    }

    Map<String, Object> receivedRecord(MessageExt m) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("body", bodyId(m.getBody()));
        r.put("bodyLen", m.getBody().length);
        r.put("bodyOk", bodyOk(m.getBody()));
        r.put("msgId", m.getMsgId());
        String offsetId = null;
        try {
            offsetId = (String) m.getClass().getMethod("getOffsetMsgId").invoke(m);
        } catch (ReflectiveOperationException ignored) {
            // plain MessageExt: the msgId is the offset id
        }
        r.put("offsetMsgId", offsetId);
        r.put("topic", m.getTopic());
        r.put("brokerName", m.getBrokerName());
        r.put("queueId", m.getQueueId());
        r.put("queueOffset", m.getQueueOffset());
        r.put("commitLogOffset", m.getCommitLogOffset());
        r.put("reconsumeTimes", m.getReconsumeTimes());
        r.put("keys", m.getKeys());
        r.put("tags", m.getTags());
        r.put("userProp", m.getUserProperty(USER_PROP));
        r.put("retryTopic", m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
        r.put("bornTimestamp", m.getBornTimestamp());
        r.put("storeTimestamp", m.getStoreTimestamp());
        r.put("storeHost", String.valueOf(m.getStoreHost()));
        r.put("sysFlag", m.getSysFlag());
        return r;
    }

    // ---------------------------------------------------------------- sends

    void sendSync() throws Exception {
        DefaultMQProducer p = producer();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                String key = "k" + i;
                try {
                    sent.add(sentRecord(id, key, p.send(message(id, key))));
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
        } finally {
            p.shutdown();
        }
    }

    void sendDelayed() throws Exception {
        DefaultMQProducer p = producer();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                String key = "k" + i;
                Message msg = message(id, key);
                msg.setDelayTimeLevel(delayLevel);
                try {
                    Map<String, Object> s = sentRecord(id, key, p.send(msg));
                    s.put("sentAt", System.currentTimeMillis());
                    sent.add(s);
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
        } finally {
            p.shutdown();
        }
    }

    /** TransactionMQProducer: the local transaction of body n commits (n % 3 == 0), rolls back
     * (1) or answers UNKNOW (2), and then commits when the broker checks it; waits (--timeout)
     * until every UNKNOW one has been checked. */
    void sendTransaction() throws Exception {
        Set<String> checked = ConcurrentHashMap.newKeySet();
        List<Object> checks = Collections.synchronizedList(new ArrayList<>());
        TransactionMQProducer p = new TransactionMQProducer(
            group.startsWith("P") ? group : "P_" + group, hook);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(instance("tx-producer"));
        p.setSendMsgTimeout(10000);
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                int n = (Integer) arg;
                return n % 3 == 0 ? LocalTransactionState.COMMIT_MESSAGE
                    : n % 3 == 1 ? LocalTransactionState.ROLLBACK_MESSAGE
                    : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String id = bodyId(msg.getBody());
                Map<String, Object> c = new LinkedHashMap<>();
                c.put("body", id);
                c.put("topic", msg.getTopic());
                c.put("queueId", msg.getQueueId());
                c.put("transactionId", msg.getTransactionId());
                c.put("msgId", msg.getMsgId());
                c.put("userProp", msg.getUserProperty(USER_PROP));
                checks.add(c);
                checked.add(id);
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        int unknown = 0;
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                String key = "k" + i;
                try {
                    TransactionSendResult r = p.sendMessageInTransaction(message(id, key), i);
                    Map<String, Object> s = sentRecord(id, key, r);
                    s.put("localState", r.getLocalTransactionState().name());
                    s.put("transactionId", r.getTransactionId());
                    sent.add(s);
                    if (i % 3 == 2) {
                        unknown++;
                    }
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
            if (!await(checked, unknown, deadline())) {
                errors.add(Map.of("type", "timeout",
                    "message", "checked " + checked.size() + " of " + unknown + " undecided"));
            }
            Thread.sleep(500); // the END_TRANSACTION after the last check is oneway
        } finally {
            result.put("checks", checks);
            p.shutdown();
        }
    }

    void sendAsync() throws Exception {
        DefaultMQProducer p = producer();
        CountDownLatch done = new CountDownLatch(count);
        try {
            for (int i = 0; i < count; i++) {
                final String id = prefix + "-" + i;
                final String key = "k" + i;
                p.send(message(id, key), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        sent.add(sentRecord(id, key, r));
                        done.countDown();
                    }

                    @Override
                    public void onException(Throwable e) {
                        errors.add(describe(e));
                        done.countDown();
                    }
                });
            }
            if (!done.await(timeoutSec, TimeUnit.SECONDS)) {
                errors.add(Map.of("type", "timeout", "message", "async sends not all acknowledged"));
            }
        } finally {
            p.shutdown();
        }
    }

    void sendOneway() throws Exception {
        DefaultMQProducer p = producer();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                String key = "k" + i;
                p.sendOneway(message(id, key));
                sent.add(sentRecord(id, key, null));
            }
            Thread.sleep(500); // oneway: give the last frames time to leave before shutdown
        } finally {
            p.shutdown();
        }
    }

    void sendBatch() throws Exception {
        DefaultMQProducer p = producer();
        List<Object> batches = new ArrayList<>();
        try {
            for (int start = 0; start < count; start += batchSize) {
                List<Message> batch = new ArrayList<>();
                List<String> ids = new ArrayList<>();
                for (int i = start; i < Math.min(count, start + batchSize); i++) {
                    String id = prefix + "-" + i;
                    ids.add(id);
                    batch.add(message(id, "k" + i));
                }
                SendResult r;
                try {
                    r = p.send(batch);
                } catch (Exception e) {
                    errors.add(describe(e));
                    continue;
                }
                String[] msgIds = r.getMsgId() == null ? new String[0] : r.getMsgId().split(",");
                String[] offIds = r.getOffsetMsgId() == null ? new String[0] : r.getOffsetMsgId().split(",");
                Map<String, Object> b = new LinkedHashMap<>();
                b.put("size", ids.size());
                b.put("msgIdCount", msgIds.length);
                b.put("offsetMsgIdCount", offIds.length);
                b.put("queueId", r.getMessageQueue().getQueueId());
                b.put("queueOffset", r.getQueueOffset());
                batches.add(b);
                for (int j = 0; j < ids.size(); j++) {
                    Map<String, Object> s = new LinkedHashMap<>();
                    s.put("body", ids.get(j));
                    s.put("key", "k" + (start + j));
                    s.put("status", r.getSendStatus().name());
                    s.put("msgId", j < msgIds.length ? msgIds[j] : null);
                    s.put("offsetMsgId", j < offIds.length ? offIds[j] : null);
                    s.put("brokerName", r.getMessageQueue().getBrokerName());
                    s.put("queueId", r.getMessageQueue().getQueueId());
                    // the response carries the first message's offset; the rest follow it
                    s.put("queueOffset", r.getQueueOffset() + j);
                    sent.add(s);
                }
            }
        } finally {
            p.shutdown();
        }
        result.put("batches", batches);
    }

    void sendOrderly() throws Exception {
        DefaultMQProducer p = producer();
        int[] seq = new int[keys];
        try {
            for (int i = 0; i < count; i++) {
                int k = i % keys;
                String key = "key" + k;
                String id = prefix + "-" + key + "-" + seq[k]++;
                try {
                    SendResult r = p.send(message(id, key), (mqs, msg, arg) -> {
                        int h = Math.abs(arg.hashCode() % mqs.size());
                        return mqs.get(h);
                    }, key);
                    sent.add(sentRecord(id, key, r));
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
        } finally {
            p.shutdown();
        }
    }

    // ---------------------------------------------------------------- consumers

    DefaultMQPushConsumer pushConsumer(int threads) throws Exception {
        return pushConsumer(threads, false);
    }

    /** trace: the client's own message trace (AsyncTraceDispatcher to RMQ_SYS_TRACE_TOPIC). */
    DefaultMQPushConsumer pushConsumer(int threads, boolean trace) throws Exception {
        DefaultMQPushConsumer c = trace
            ? new DefaultMQPushConsumer(group, hook, new AllocateMessageQueueAveragely(), true, null)
            : new DefaultMQPushConsumer(group, hook);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(instance("push"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        if (sql != null) {
            c.subscribe(topic, MessageSelector.bySql(sql));
        } else {
            c.subscribe(topic, subscription);
        }
        c.setConsumeThreadMin(threads);
        c.setConsumeThreadMax(threads);
        c.setConsumeMessageBatchMaxSize(1);
        // Learn new routes (the %RETRY% topic appears on the first send-back) within a second.
        c.setPollNameServerInterval(1000);
        return c;
    }

    /** Waits until `distinct` holds at least `want` bodies or the deadline passes. */
    boolean await(Set<String> distinct, int want, long deadline) throws InterruptedException {
        while (System.currentTimeMillis() < deadline) {
            if (distinct.size() >= want) {
                return true;
            }
            Thread.sleep(20);
        }
        return distinct.size() >= want;
    }

    void timeoutError(Set<String> distinct, int want) {
        errors.add(Map.of("type", "timeout",
            "message", "received " + distinct.size() + " of " + want + " distinct bodies"));
    }

    void consumePush(boolean orderly) throws Exception {
        Set<String> distinct = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer(orderly ? 1 : 4);
        if (orderly) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    Map<String, Object> r = receivedRecord(m);
                    r.put("thread", Thread.currentThread().getName());
                    received.add(r);
                    distinct.add(bodyId(m.getBody()));
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    received.add(receivedRecord(m));
                    distinct.add(bodyId(m.getBody()));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        try {
            if (!await(distinct, count, deadline())) {
                timeoutError(distinct, count);
            }
        } finally {
            c.shutdown();
        }
    }

    /** A push consumer (2 threads) whose received records carry "consumer": idx, and whose
     * bodies go to `distinct`. */
    DefaultMQPushConsumer numberedConsumer(int idx, Set<String> distinct) throws Exception {
        DefaultMQPushConsumer c = pushConsumer(2);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> r = receivedRecord(m);
                r.put("consumer", idx);
                received.add(r);
                distinct.add(bodyId(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return c;
    }

    /** Two push consumers of one group in BROADCASTING mode (offsets kept by the client):
     * each must get every message; received records carry "consumer" (0 or 1). */
    void consumeBroadcast() throws Exception {
        List<Set<String>> seen = new ArrayList<>();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Set<String> distinct = ConcurrentHashMap.newKeySet();
            seen.add(distinct);
            DefaultMQPushConsumer c = numberedConsumer(i, distinct);
            c.setMessageModel(MessageModel.BROADCASTING);
            cs.add(c);
        }
        try {
            for (DefaultMQPushConsumer c : cs) {
                c.start();
            }
            long until = deadline();
            for (Set<String> distinct : seen) {
                if (!await(distinct, count, until)) {
                    timeoutError(distinct, count);
                }
            }
        } finally {
            for (DefaultMQPushConsumer c : cs) {
                c.shutdown();
            }
        }
    }

    /** Two push consumers of one group with clientRebalance=false: each asks a broker for its
     * queues (QUERY_ASSIGNMENT) instead of computing them. With --request-mode POP the group
     * is first switched to pop mode on every master (SET_MESSAGE_REQUEST_MODE, through
     * DefaultMQAdminExt), so the consumers pop. Together they must get every message;
     * received records carry "consumer" (0 or 1). */
    void consumeServerRebalance() throws Exception {
        if ("POP".equals(requestMode)) {
            DefaultMQAdminExt admin = new DefaultMQAdminExt(hook);
            admin.setNamesrvAddr(namesrv);
            admin.setInstanceName(instance("admin"));
            admin.start();
            try {
                for (BrokerData bd : admin.examineBrokerClusterInfo().getBrokerAddrTable().values()) {
                    String master = bd.getBrokerAddrs().get(MixAll.MASTER_ID);
                    if (master != null) {
                        admin.setMessageRequestMode(master, topic, group,
                            org.apache.rocketmq.common.message.MessageRequestMode.POP, 0, 5000);
                    }
                }
            } finally {
                admin.shutdown();
            }
        }
        Set<String> distinct = ConcurrentHashMap.newKeySet();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            DefaultMQPushConsumer c = numberedConsumer(i, distinct);
            c.setInstanceName(instance("srv" + i));
            c.setClientRebalance(false);
            cs.add(c);
        }
        try {
            for (DefaultMQPushConsumer c : cs) {
                c.start();
            }
            if (!await(distinct, count, deadline())) {
                timeoutError(distinct, count);
            }
        } finally {
            for (DefaultMQPushConsumer c : cs) {
                c.shutdown();
            }
        }
    }

    /** DefaultMQProducer.request: a push consumer answers each request with a reply
     * (MessageUtil.createReplyMessage, body "re:" + the request's) sent by its own producer;
     * the requester records each reply it got ("sent" entries carry "reply"). */
    void requestReply() throws Exception {
        DefaultMQProducer replier = producer();
        DefaultMQPushConsumer c = pushConsumer(2);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> r = receivedRecord(m);
                r.put("cluster", m.getProperty(MessageConst.PROPERTY_CLUSTER));
                received.add(r);
                try {
                    byte[] body = ("re:" + bodyId(m.getBody())).getBytes(StandardCharsets.UTF_8);
                    SendResult sr = replier.send(MessageUtil.createReplyMessage(m, body));
                    r.put("replyStatus", sr.getSendStatus().name());
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer requester = new DefaultMQProducer("P_req_" + group, hook);
        requester.setNamesrvAddr(namesrv);
        requester.setInstanceName(instance("requester"));
        requester.start();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                Map<String, Object> s = new LinkedHashMap<>();
                s.put("body", id);
                try {
                    Message reply = requester.request(message(id, "k" + i), 10000);
                    s.put("reply", new String(reply.getBody(), StandardCharsets.UTF_8));
                    s.put("replyTopic", reply.getTopic());
                } catch (Exception e) {
                    errors.add(describe(e));
                }
                sent.add(s);
            }
        } finally {
            requester.shutdown();
            c.shutdown();
            replier.shutdown();
        }
    }

    void consumeWithFailures() throws Exception {
        Set<String> succeeded = ConcurrentHashMap.newKeySet();
        Set<String> failedOnce = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer(4);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            MessageExt m = msgs.get(0);
            String id = bodyId(m.getBody());
            Map<String, Object> r = receivedRecord(m);
            boolean fail = false;
            int dash = id.lastIndexOf('-');
            int n = dash < 0 ? 0 : Integer.parseInt(id.substring(dash + 1));
            if (failEvery > 0 && n % failEvery == 0 && failedOnce.add(id)) {
                fail = true;
            }
            r.put("result", fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS");
            received.add(r);
            if (fail) {
                ctx.setDelayLevelWhenNextConsume(retryDelayLevel);
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            }
            succeeded.add(id);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        try {
            if (!await(succeeded, count, deadline())) {
                timeoutError(succeeded, count);
            }
        } finally {
            c.shutdown();
        }
        result.put("failedOnce", new ArrayList<>(failedOnce));
    }

    // ---------------------------------------------------------------- message trace

    /**
     * Message trace: a producer and a push consumer created with enableMsgTrace (the default
     * trace topic, RMQ_SYS_TRACE_TOPIC, which nothing here creates: the trace producer's first
     * send goes by the TBW102 route and the broker auto-creates it). The producer sends --count
     * messages, the consumer consumes them (CONSUME_SUCCESS); then, with both still running
     * (their trace dispatchers flush every 10 records or 5 s), a pull consumer of group R_group
     * reads every queue of the trace topic from offset 0 and decodes the bodies with the client's
     * TraceDataEncoder until each sent msgId has a Pub, a SubBefore and a SubAfter record, or
     * --timeout. "traces": msgId -> {"types": [the type of each record about it, in read
     * order], "Pub"|"SubBefore"|"SubAfter": the first such record}.
     */
    void trace() throws Exception {
        String traceTopic = TopicValidator.RMQ_SYS_TRACE_TOPIC;
        long deadline = deadline();
        Map<String, Map<String, Object>> traces = new TreeMap<>();
        Set<String> consumed = ConcurrentHashMap.newKeySet();
        DefaultMQProducer p = new DefaultMQProducer("P_" + group, hook, true, null);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(instance("trace-producer"));
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(2);
        DefaultMQPushConsumer c = pushConsumer(2, true);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                received.add(receivedRecord(m));
                consumed.add(bodyId(m.getBody()));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        DefaultMQPullConsumer reader = new DefaultMQPullConsumer("R_" + group, hook);
        reader.setNamesrvAddr(namesrv);
        reader.setInstanceName(instance("trace-reader"));
        p.start();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                String key = "k" + i;
                try {
                    SendResult r = p.send(message(id, key));
                    sent.add(sentRecord(id, key, r));
                    Map<String, Object> t = new LinkedHashMap<>();
                    t.put("types", new ArrayList<>());
                    traces.put(r.getMsgId(), t);
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
            c.start();
            if (!await(consumed, count, deadline)) {
                timeoutError(consumed, count);
            }
            reader.start();
            readTraces(reader, traceTopic, traces, deadline);
        } finally {
            reader.shutdown();
            c.shutdown();
            p.shutdown();
        }
        result.put("traceTopic", traceTopic);
        result.put("traces", traces);
    }

    static boolean tracesComplete(Map<String, Map<String, Object>> traces) {
        for (Map<String, Object> t : traces.values()) {
            if (!(t.containsKey("Pub") && t.containsKey("SubBefore") && t.containsKey("SubAfter"))) {
                return false;
            }
        }
        return true;
    }

    @SuppressWarnings("unchecked")
    void readTraces(DefaultMQPullConsumer reader, String traceTopic,
        Map<String, Map<String, Object>> traces, long deadline) throws Exception {
        Map<MessageQueue, Long> next = new TreeMap<>();
        int messages = 0;
        int records = 0;
        List<Object> undecodable = new ArrayList<>();
        String routeError = null;
        while (!tracesComplete(traces) && System.currentTimeMillis() < deadline) {
            if (next.isEmpty()) {
                try {
                    for (MessageQueue mq : reader.fetchSubscribeMessageQueues(traceTopic)) {
                        next.put(mq, 0L);
                    }
                    routeError = null;
                } catch (Exception e) {
                    routeError = String.valueOf(e.getMessage()); // no trace sent yet: no route
                }
            }
            boolean any = false;
            for (Map.Entry<MessageQueue, Long> e : next.entrySet()) {
                PullResult pr = reader.pull(e.getKey(), "*", e.getValue(), 32, 5000);
                if (pr.getPullStatus() == PullStatus.FOUND) {
                    any = true;
                    for (MessageExt m : pr.getMsgFoundList()) {
                        messages++;
                        String data = new String(m.getBody(), StandardCharsets.UTF_8);
                        List<TraceContext> ctxs;
                        try {
                            ctxs = TraceDataEncoder.decoderFromTraceDataString(data);
                        } catch (RuntimeException ex) {
                            // another test's (or client's) record; ours must still all decode
                            undecodable.add(e.getKey().getQueueId() + ":" + m.getQueueOffset() + " " + ex);
                            continue;
                        }
                        for (TraceContext tc : ctxs) {
                            for (TraceBean b : tc.getTraceBeans()) {
                                Map<String, Object> t = traces.get(b.getMsgId());
                                if (t == null) {
                                    continue;
                                }
                                records++;
                                String type = tc.getTraceType().name();
                                ((List<Object>) t.get("types")).add(type);
                                t.putIfAbsent(type, traceRecord(tc, b));
                            }
                        }
                    }
                }
                e.setValue(pr.getNextBeginOffset());
            }
            if (!any) {
                Thread.sleep(200);
            }
        }
        Map<String, Object> info = new LinkedHashMap<>();
        info.put("queues", next.size());
        info.put("messages", messages);
        info.put("records", records);
        info.put("undecodable", undecodable);
        info.put("routeError", routeError);
        info.put("complete", tracesComplete(traces));
        result.put("traceRead", info);
    }

    static Map<String, Object> traceRecord(TraceContext tc, TraceBean b) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("success", tc.isSuccess());
        r.put("group", tc.getGroupName());
        r.put("regionId", tc.getRegionId());
        r.put("topic", b.getTopic());
        r.put("keys", b.getKeys());
        switch (tc.getTraceType()) {
            case Pub:
                r.put("tags", b.getTags());
                r.put("offsetMsgId", b.getOffsetMsgId());
                r.put("storeHost", b.getStoreHost());
                r.put("bodyLength", b.getBodyLength());
                r.put("msgType", String.valueOf(b.getMsgType()));
                break;
            case SubBefore:
                r.put("retryTimes", b.getRetryTimes());
                r.put("requestId", tc.getRequestId());
                break;
            case SubAfter:
                r.put("requestId", tc.getRequestId());
                r.put("contextCode", tc.getContextCode());
                break;
            default:
                break;
        }
        return r;
    }

    // ---------------------------------------------------------------- orderly dead letters

    /**
     * Orderly consumption and the dead-letter queue. --count messages go to the topic's queue 0
     * (MessageQueueSelector). An orderly push consumer (one thread, batch 1,
     * setMaxReconsumeTimes(--max-reconsume-times), setSuspendCurrentQueueTimeMillis(--suspend-ms))
     * answers SUSPEND_CURRENT_QUEUE_A_MOMENT for body prefix-(--fail-index), every time, and
     * SUCCESS for the rest. The client redelivers it locally maxReconsumeTimes times, then
     * sends it to %RETRY%group with RECONSUME_TIME above MAX_RECONSUME_TIMES (a plain send, not
     * CONSUMER_SEND_MSG_BACK), which the broker must turn into a %DLQ%group message, and moves
     * on. Runs until every other body was consumed and the failing one was read back from queue
     * 0 of %DLQ%group's route (pull consumer, group R_group), then --quiet-ms more, to catch any
     * later redelivery. "received" records carry "result"; "dlq" the DLQ messages with all their
     * properties; "retryMaxOffset" the summed max offsets of %RETRY%group's queues (null when it
     * has no route).
     */
    void consumeOrderlyDlq() throws Exception {
        DefaultMQProducer p = producer();
        try {
            for (int i = 0; i < count; i++) {
                String id = prefix + "-" + i;
                String key = "k" + i;
                try {
                    SendResult r = p.send(message(id, key), (mqs, msg, arg) -> {
                        MessageQueue first = mqs.get(0);
                        for (MessageQueue mq : mqs) {
                            if (mq.getQueueId() < first.getQueueId()) {
                                first = mq;
                            }
                        }
                        return first;
                    }, 0);
                    sent.add(sentRecord(id, key, r));
                } catch (Exception e) {
                    errors.add(describe(e));
                }
            }
        } finally {
            p.shutdown();
        }
        String failId = prefix + "-" + failIndex;
        String dlqTopic = MixAll.getDLQTopic(group);
        String retryTopic = MixAll.getRetryTopic(group);
        Set<String> succeeded = ConcurrentHashMap.newKeySet();
        AtomicInteger failDeliveries = new AtomicInteger();
        DefaultMQPushConsumer c = pushConsumer(1);
        c.setMaxReconsumeTimes(maxReconsumeTimes);
        c.setSuspendCurrentQueueTimeMillis(suspendMs);
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            MessageExt m = msgs.get(0);
            String id = bodyId(m.getBody());
            Map<String, Object> r = receivedRecord(m);
            r.put("at", System.currentTimeMillis());
            boolean fail = id.equals(failId);
            r.put("result", fail ? "SUSPEND_CURRENT_QUEUE_A_MOMENT" : "SUCCESS");
            received.add(r);
            if (fail) {
                failDeliveries.incrementAndGet();
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
            }
            succeeded.add(id);
            return ConsumeOrderlyStatus.SUCCESS;
        });
        DefaultMQPullConsumer reader = new DefaultMQPullConsumer("R_" + group, hook);
        reader.setNamesrvAddr(namesrv);
        reader.setInstanceName(instance("dlq-reader"));
        List<Object> dlq = new ArrayList<>();
        long deadline = deadline();
        c.start();
        try {
            int others = count - (failIndex >= 0 && failIndex < count ? 1 : 0);
            if (!await(succeeded, others, deadline)) {
                timeoutError(succeeded, others);
            }
            reader.start();
            MessageQueue dq = null;
            long offset = 0;
            String routeError = null;
            while (dlq.isEmpty() && System.currentTimeMillis() < deadline) {
                if (dq == null) {
                    try {
                        for (MessageQueue mq : reader.fetchSubscribeMessageQueues(dlqTopic)) {
                            if (mq.getQueueId() == 0) {
                                dq = mq;
                            }
                        }
                    } catch (Exception e) {
                        routeError = String.valueOf(e.getMessage());
                    }
                }
                if (dq != null) {
                    PullResult pr = reader.pull(dq, "*", offset, 32, 5000);
                    if (pr.getPullStatus() == PullStatus.FOUND) {
                        for (MessageExt m : pr.getMsgFoundList()) {
                            Map<String, Object> r = receivedRecord(m);
                            r.put("properties", new TreeMap<>(m.getProperties()));
                            dlq.add(r);
                        }
                    }
                    offset = pr.getNextBeginOffset();
                }
                if (dlq.isEmpty()) {
                    Thread.sleep(200);
                }
            }
            if (dlq.isEmpty()) {
                errors.add(Map.of("type", "timeout", "message", "nothing in queue 0 of " + dlqTopic
                    + " (route " + (dq == null ? "missing: " + routeError : "found") + ")"));
            }
            // Any redelivery (or a second dead letter) would come within this window.
            long quietUntil = System.currentTimeMillis() + quietMs;
            while (System.currentTimeMillis() < quietUntil) {
                Thread.sleep(50);
            }
            if (dq != null) {
                PullResult pr = reader.pull(dq, "*", offset, 32, 5000);
                if (pr.getPullStatus() == PullStatus.FOUND) {
                    for (MessageExt m : pr.getMsgFoundList()) {
                        Map<String, Object> r = receivedRecord(m);
                        r.put("properties", new TreeMap<>(m.getProperties()));
                        dlq.add(r);
                    }
                }
            }
            Long retryMax = null;
            try {
                long sum = 0;
                for (MessageQueue mq : reader.fetchSubscribeMessageQueues(retryTopic)) {
                    sum += reader.maxOffset(mq);
                }
                retryMax = sum;
            } catch (Exception e) {
                result.put("retryRouteError", String.valueOf(e.getMessage()));
            }
            result.put("retryMaxOffset", retryMax);
        } finally {
            c.shutdown();
            reader.shutdown();
        }
        result.put("failId", failId);
        result.put("failDeliveries", failDeliveries.get());
        result.put("dlqTopic", dlqTopic);
        result.put("dlq", dlq);
    }

    /**
     * Phase 1 consumes exactly count/2 bodies with one consume thread (later deliveries block until
     * the consumer is shut down and are never acknowledged), shuts down cleanly so the offsets are
     * committed, then phase 2 (same group, new consumer) consumes until every body was seen.
     */
    void offsetResume() throws Exception {
        int half = count / 2;
        Set<String> distinct = ConcurrentHashMap.newKeySet();
        List<Object> phases = new ArrayList<>();
        long deadline = deadline();
        for (int phase = 1; phase <= 2; phase++) {
            final int ph = phase;
            final int want = phase == 1 ? half : count;
            final CountDownLatch release = new CountDownLatch(1);
            List<Object> got = Collections.synchronizedList(new ArrayList<>());
            DefaultMQPushConsumer c = pushConsumer(1);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                if (ph == 1 && distinct.size() >= want) {
                    // Hold this delivery (unacknowledged, so its offset is not committed) until
                    // the consumer has shut down and dropped its queues; then the result below is
                    // discarded. The consumer's shutdown interrupts this thread: ignore that, an
                    // interrupted thread would also fail the client's own send-back.
                    long until = System.currentTimeMillis() + 20000;
                    while (release.getCount() > 0 && System.currentTimeMillis() < until) {
                        try {
                            release.await(100, TimeUnit.MILLISECONDS);
                        } catch (InterruptedException ignored) {
                            // keep holding
                        }
                    }
                    ctx.setDelayLevelWhenNextConsume(retryDelayLevel);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                for (MessageExt m : msgs) {
                    Map<String, Object> r = receivedRecord(m);
                    r.put("phase", ph);
                    got.add(r);
                    received.add(r);
                    distinct.add(bodyId(m.getBody()));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            boolean ok;
            try {
                ok = await(distinct, want, deadline);
            } finally {
                c.shutdown(); // persists the consumed offsets to the broker
                release.countDown();
            }
            Map<String, Object> p = new LinkedHashMap<>();
            p.put("phase", phase);
            p.put("want", want);
            p.put("received", got.size());
            phases.add(p);
            if (!ok) {
                timeoutError(distinct, want);
                break;
            }
            // The shutdown's offset commit is oneway (UPDATE_CONSUMER_OFFSET, no answer): give it
            // the moment any real restart takes before the next consumer asks for the offsets.
            Thread.sleep(1000);
        }
        result.put("phases", phases);
    }

    void consumePull() throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, hook);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(instance("pull"));
        c.start();
        Set<String> distinct = new HashSet<>();
        List<Object> qinfo = new ArrayList<>();
        Map<MessageQueue, Long> next = new HashMap<>();
        try {
            long deadline = deadline();
            Set<MessageQueue> mqs = c.fetchSubscribeMessageQueues(topic);
            for (MessageQueue mq : new TreeMap<Integer, MessageQueue>(byQueueId(mqs)).values()) {
                long committed = c.fetchConsumeOffset(mq, true);
                long min = c.minOffset(mq);
                long max = c.maxOffset(mq);
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("brokerName", mq.getBrokerName());
                q.put("queueId", mq.getQueueId());
                q.put("minOffset", min);
                q.put("maxOffset", max);
                q.put("committedBefore", committed);
                qinfo.add(q);
                next.put(mq, committed >= 0 ? committed : min);
            }
            while (distinct.size() < count && System.currentTimeMillis() < deadline) {
                boolean any = false;
                for (Map.Entry<MessageQueue, Long> e : next.entrySet()) {
                    PullResult pr = c.pull(e.getKey(), "*", e.getValue(), 32, 5000);
                    switch (pr.getPullStatus()) {
                        case FOUND:
                            for (MessageExt m : pr.getMsgFoundList()) {
                                received.add(receivedRecord(m));
                                distinct.add(bodyId(m.getBody()));
                            }
                            any = true;
                            break;
                        case OFFSET_ILLEGAL:
                            errors.add(Map.of("type", "OFFSET_ILLEGAL", "message", e.getKey().toString()));
                            break;
                        default:
                            break;
                    }
                    e.setValue(pr.getNextBeginOffset());
                    c.updateConsumeOffset(e.getKey(), pr.getNextBeginOffset());
                }
                if (!any) {
                    Thread.sleep(100);
                }
            }
            if (distinct.size() < count) {
                timeoutError(distinct, count);
            }
            for (MessageQueue mq : next.keySet()) {
                c.getOffsetStore().updateConsumeOffsetToBroker(mq, next.get(mq), false);
            }
        } finally {
            c.shutdown();
        }
        // A fresh consumer in the same group reads the committed offsets back from the broker.
        DefaultMQPullConsumer check = new DefaultMQPullConsumer(group, hook);
        check.setNamesrvAddr(namesrv);
        check.setInstanceName(instance("pullcheck"));
        check.start();
        try {
            for (Object o : qinfo) {
                @SuppressWarnings("unchecked")
                Map<String, Object> q = (Map<String, Object>) o;
                MessageQueue mq = new MessageQueue(topic, (String) q.get("brokerName"), (Integer) q.get("queueId"));
                q.put("nextOffset", next.get(mq));
                q.put("committedAfter", check.fetchConsumeOffset(mq, true));
            }
        } finally {
            check.shutdown();
        }
        result.put("queues", qinfo);
    }

    static Map<Integer, MessageQueue> byQueueId(Collection<MessageQueue> mqs) {
        Map<Integer, MessageQueue> m = new HashMap<>();
        for (MessageQueue mq : mqs) {
            m.put(mq.getQueueId(), mq);
        }
        return m;
    }

    void consumeLitePull() throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, hook);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(instance("lite"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommit(true);
        c.subscribe(topic, "*");
        c.start();
        Set<String> distinct = new HashSet<>();
        try {
            long deadline = deadline();
            while (distinct.size() < count && System.currentTimeMillis() < deadline) {
                for (MessageExt m : c.poll(1000)) {
                    received.add(receivedRecord(m));
                    distinct.add(bodyId(m.getBody()));
                }
            }
            if (distinct.size() < count) {
                timeoutError(distinct, count);
            }
            c.commitSync();
        } finally {
            c.shutdown();
        }
    }

    // ---------------------------------------------------------------- failover

    /**
     * An ordered producer and an orderly push consumer in one process, for a test that kills a
     * master mid-run and restarts it (tests/interop/test_java_acting.py). The producer sends
     * --count messages, one every --interval-ms, key i % --keys, through a MessageQueueSelector
     * (hash of the key over the writable queues, sorted). The orderly consumer (one consume
     * thread, pull batch 1, at most one cached message per queue, --consume-delay-ms per
     * message, so a backlog builds up on the brokers and not in the client) runs until every
     * acknowledged message (a SendResult came back: stored on the master, whatever its
     * replication status) has been consumed, or --timeout. Failed sends are expected
     * while a master is gone: they go to "sendFailures", not to "errors". Progress goes to
     * stderr every 100 ms: "progress sent=S acked=A received=R receivedA=RA done=D" (RA:
     * distinct bodies consumed from queues of broker-a).
     */
    void orderlyFailover() throws Exception {
        Set<String> acked = ConcurrentHashMap.newKeySet();
        Set<String> distinct = ConcurrentHashMap.newKeySet();
        AtomicInteger sentCount = new AtomicInteger();
        AtomicInteger receivedA = new AtomicInteger();
        List<Object> sendFailures = Collections.synchronizedList(new ArrayList<>());
        CountDownLatch produced = new CountDownLatch(1);

        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(instance("orderly"));
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.setConsumeMessageBatchMaxSize(1);
        c.setPullBatchSize(1);
        c.setPullThresholdForQueue(1);
        c.setPollNameServerInterval(500);
        c.setHeartbeatBrokerInterval(1000);
        c.setPersistConsumerOffsetInterval(1000);
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> r = receivedRecord(m);
                r.put("at", System.currentTimeMillis());
                received.add(r);
                if (distinct.add(bodyId(m.getBody())) && "broker-a".equals(m.getBrokerName())) {
                    receivedA.incrementAndGet();
                }
            }
            try {
                Thread.sleep(consumeDelayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });

        DefaultMQProducer p = new DefaultMQProducer("P_" + group, hook);
        p.setNamesrvAddr(namesrv);
        p.setInstanceName(instance("producer"));
        p.setSendMsgTimeout(3000);
        p.setRetryTimesWhenSendFailed(0);
        p.setPollNameServerInterval(500);

        Thread progress = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                System.err.println("progress sent=" + sentCount.get() + " acked=" + acked.size()
                    + " received=" + distinct.size() + " receivedA=" + receivedA.get()
                    + " done=" + (produced.getCount() == 0 ? 1 : 0));
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "progress");
        progress.setDaemon(true);

        Thread producer = new Thread(() -> {
            int[] seq = new int[keys];
            try {
                for (int i = 0; i < count; i++) {
                    int k = i % keys;
                    String key = "key" + k;
                    String id = prefix + "-" + key + "-" + seq[k]++;
                    long at = System.currentTimeMillis();
                    try {
                        SendResult r = p.send(message(id, key), (mqs, msg, arg) -> {
                            List<MessageQueue> sorted = new ArrayList<>(mqs);
                            sorted.sort((a, b) -> a.getBrokerName().equals(b.getBrokerName())
                                ? Integer.compare(a.getQueueId(), b.getQueueId())
                                : a.getBrokerName().compareTo(b.getBrokerName()));
                            return sorted.get(Math.abs(arg.hashCode() % sorted.size()));
                        }, key);
                        Map<String, Object> s = sentRecord(id, key, r);
                        s.put("sentAt", at);
                        sent.add(s);
                        acked.add(id); // stored on the master (the status says how replicated)
                    } catch (Exception e) {
                        Map<String, Object> f = new LinkedHashMap<>(describe(e));
                        f.put("body", id);
                        f.put("at", at);
                        sendFailures.add(f);
                    }
                    sentCount.incrementAndGet();
                    Thread.sleep(intervalMs);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                produced.countDown();
            }
        }, "ordered-producer");

        c.start();
        p.start();
        progress.start();
        producer.start();
        long deadline = deadline();
        try {
            boolean ok = produced.await(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            while (ok && !distinct.containsAll(acked) && System.currentTimeMillis() < deadline) {
                Thread.sleep(20);
            }
            if (!ok || !distinct.containsAll(acked)) {
                Set<String> missing = new HashSet<>(acked);
                missing.removeAll(distinct);
                errors.add(Map.of("type", "timeout", "message", "produced=" + ok + ", "
                    + missing.size() + " acknowledged bodies not consumed, e.g. "
                    + missing.stream().sorted().limit(10).toList()));
            }
        } finally {
            producer.interrupt();
            c.shutdown();
            p.shutdown();
            progress.interrupt();
        }
        Map<String, Object> pulls = new TreeMap<>();
        pullsFound.forEach((addr, n) -> pulls.put(addr, n.get()));
        Map<String, Object> locks = new TreeMap<>();
        locksGranted.forEach((addr, qs) -> locks.put(addr, new ArrayList<>(new java.util.TreeSet<>(qs))));
        result.put("acked", acked.size());
        result.put("sendFailures", sendFailures);
        result.put("pullsFound", pulls);
        result.put("locksGranted", locks);
    }

    // ---------------------------------------------------------------- admin / route

    void route() throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(hook);
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName(instance("admin"));
        admin.start();
        DefaultMQProducer p = null;
        try {
            ClusterInfo ci = admin.examineBrokerClusterInfo();
            Map<String, Object> cluster = new LinkedHashMap<>();
            Map<String, Object> brokers = new TreeMap<>();
            for (Map.Entry<String, BrokerData> e : ci.getBrokerAddrTable().entrySet()) {
                brokers.put(e.getKey(), brokerData(e.getValue()));
            }
            cluster.put("brokerAddrTable", brokers);
            Map<String, Object> clusters = new TreeMap<>();
            for (Map.Entry<String, Set<String>> e : ci.getClusterAddrTable().entrySet()) {
                clusters.put(e.getKey(), new ArrayList<>(new java.util.TreeSet<>(e.getValue())));
            }
            cluster.put("clusterAddrTable", clusters);
            result.put("clusterInfo", cluster);

            if (queues > 0) {
                TopicConfig tc = new TopicConfig(topic, queues, queues, 6);
                for (BrokerData bd : ci.getBrokerAddrTable().values()) {
                    String master = bd.getBrokerAddrs().get(MixAll.MASTER_ID);
                    if (master != null) {
                        admin.createAndUpdateTopicConfig(master, tc);
                    }
                }
            }
            long deadline = deadline();
            TopicRouteData rd = null;
            Exception last = null;
            while (System.currentTimeMillis() < deadline) {
                try {
                    rd = admin.examineTopicRouteInfo(topic);
                    if (queues <= 0 || rd.getQueueDatas().stream().anyMatch(q -> q.getWriteQueueNums() == queues)) {
                        break;
                    }
                } catch (Exception e) {
                    last = e;
                }
                Thread.sleep(200);
            }
            if (rd == null) {
                throw last != null ? last : new IllegalStateException("no route for " + topic);
            }
            Map<String, Object> route = new LinkedHashMap<>();
            List<Object> qds = new ArrayList<>();
            for (QueueData qd : rd.getQueueDatas()) {
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("brokerName", qd.getBrokerName());
                q.put("readQueueNums", qd.getReadQueueNums());
                q.put("writeQueueNums", qd.getWriteQueueNums());
                q.put("perm", qd.getPerm());
                q.put("topicSysFlag", qd.getTopicSysFlag());
                qds.add(q);
            }
            List<Object> bds = new ArrayList<>();
            for (BrokerData bd : rd.getBrokerDatas()) {
                bds.add(brokerData(bd));
            }
            route.put("queueDatas", qds);
            route.put("brokerDatas", bds);
            result.put("route", route);

            p = producer();
            List<Object> pub = new ArrayList<>();
            for (MessageQueue mq : p.fetchPublishMessageQueues(topic)) {
                pub.add(Map.of("brokerName", mq.getBrokerName(), "queueId", mq.getQueueId()));
            }
            result.put("publishQueues", pub);
        } finally {
            if (p != null) {
                p.shutdown();
            }
            admin.shutdown();
        }
    }

    static Map<String, Object> brokerData(BrokerData bd) {
        Map<String, Object> b = new LinkedHashMap<>();
        b.put("cluster", bd.getCluster());
        b.put("brokerName", bd.getBrokerName());
        Map<String, Object> addrs = new TreeMap<>();
        for (Map.Entry<Long, String> a : bd.getBrokerAddrs().entrySet()) {
            addrs.put(String.valueOf(a.getKey()), a.getValue());
        }
        b.put("brokerAddrs", addrs);
        return b;
    }
}
