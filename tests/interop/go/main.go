// Command interop-go drives the real Apache RocketMQ Go client (rocketmq-client-go/v2, unmodified)
// through one scenario and prints exactly one JSON line on stdout; it exits 0 on success.
//
//	interop-go SCENARIO --namesrv ADDR --topic T --group G --count N [--serialize JSON|ROCKETMQ]
//	           [--timeout SECONDS] [--prefix P] [--keys K] [--batch-size B] [--body-size BYTES]
//	           [--fail-every F] [--retry-delay-level L] [--queues Q --broker ADDR]
//
// Scenarios: send-sync, send-async, send-oneway, send-batch, send-orderly,
// consume-push-concurrent, consume-push-orderly, consume-lite-pull, consume-with-failures,
// offset-resume, route.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "unsafe" // go:linkname

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// The Go client ships both header codecs (JSON = 0, ROCKETMQ = 1) but v2.1.2 exposes no switch:
// the package variable below picks the codec of every outgoing frame (incoming frames are decoded
// by the type byte they carry). Setting it is the only way to make this client speak ROCKETMQ.
//
//go:linkname codecType github.com/apache/rocketmq-client-go/v2/internal/remote.codecType
var codecType byte

const (
	clientVersion = "v2.1.2"
	userProp      = "interop"
)

type opts struct {
	scenario, namesrv, topic, group, serialize, prefix, broker string
	accessKey, secretKey, tags, subscription                   string
	count, timeoutSec, keys, batchSize, bodySize, failEvery    int
	retryDelayLevel, queues                                    int
}

type run struct {
	o        opts
	mu       sync.Mutex
	result   map[string]interface{}
	sent     []map[string]interface{}
	received []map[string]interface{}
	errs     []map[string]interface{}
	seq      int
}

func main() {
	stdout := os.Stdout
	os.Stdout = os.Stderr // libraries may print; stdout carries only the result line
	rlog.SetLogLevel("warn")

	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: interop-go SCENARIO --namesrv ADDR --topic T ...")
		os.Exit(2)
	}
	var o opts
	o.scenario = os.Args[1]
	fs := flag.NewFlagSet("interop-go", flag.ContinueOnError)
	fs.StringVar(&o.namesrv, "namesrv", "", "name server host:port")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.group, "group", "", "consumer/producer group")
	fs.StringVar(&o.serialize, "serialize", "", "JSON or ROCKETMQ")
	fs.StringVar(&o.prefix, "prefix", "", "body prefix (default: topic)")
	fs.StringVar(&o.broker, "broker", "", "broker address (route --queues)")
	fs.IntVar(&o.count, "count", 10, "messages")
	fs.IntVar(&o.timeoutSec, "timeout", 60, "seconds")
	fs.IntVar(&o.keys, "keys", 4, "ordering keys (send-orderly)")
	fs.IntVar(&o.batchSize, "batch-size", 10, "messages per batch")
	fs.IntVar(&o.bodySize, "body-size", 0, "pad bodies to this many bytes")
	fs.IntVar(&o.failEvery, "fail-every", 3, "consume-with-failures: fail body n when n%F==0")
	fs.IntVar(&o.retryDelayLevel, "retry-delay-level", 1, "delay level for RECONSUME_LATER")
	fs.IntVar(&o.queues, "queues", 0, "route: create the topic with this many queues")
	fs.StringVar(&o.accessKey, "access-key", "", "ACL access key (the client's credentials option)")
	fs.StringVar(&o.secretKey, "secret-key", "", "ACL secret key")
	fs.StringVar(&o.tags, "tags", "TagA", "comma-separated tags sends rotate through (message i: tag i % n)")
	fs.StringVar(&o.subscription, "subscription", "*", "the push consumer's tag expression")
	if err := fs.Parse(os.Args[2:]); err != nil || o.namesrv == "" || o.topic == "" {
		fmt.Fprintln(os.Stderr, "usage error: --namesrv and --topic are required")
		os.Exit(2)
	}
	if o.group == "" {
		o.group = "G_" + o.topic
	}
	if o.prefix == "" {
		o.prefix = o.topic
	}
	if o.serialize == "" {
		o.serialize = os.Getenv("ROCKETMQ_SERIALIZE_TYPE")
	}
	switch strings.ToUpper(o.serialize) {
	case "", "JSON":
		codecType = 0
	case "ROCKETMQ":
		codecType = 1
	default:
		fmt.Fprintln(os.Stderr, "usage error: --serialize JSON|ROCKETMQ")
		os.Exit(2)
	}

	r := &run{o: o, result: map[string]interface{}{}}
	r.result["client"] = "go"
	r.result["clientVersion"] = clientVersion
	r.result["scenario"] = o.scenario
	if codecType == 1 {
		r.result["serializeType"] = "ROCKETMQ"
	} else {
		r.result["serializeType"] = "JSON"
	}
	r.result["topic"] = o.topic
	r.result["group"] = o.group
	r.result["count"] = o.count

	t0 := time.Now()
	if err := r.dispatch(); err != nil {
		r.addErr(err)
	}
	r.result["elapsedMs"] = time.Since(t0).Milliseconds()
	r.mu.Lock()
	r.result["sent"] = nonNil(r.sent)
	r.result["received"] = nonNil(r.received)
	r.result["errors"] = nonNil(r.errs)
	rc := 0
	if len(r.errs) > 0 {
		rc = 1
	}
	line, err := json.Marshal(r.result)
	r.mu.Unlock()
	if err != nil {
		fmt.Fprintln(os.Stderr, "json:", err)
		os.Exit(3)
	}
	stdout.Write(append(line, '\n'))
	os.Exit(rc)
}

func nonNil(v []map[string]interface{}) []map[string]interface{} {
	if v == nil {
		return []map[string]interface{}{}
	}
	return v
}

func (r *run) dispatch() error {
	switch r.o.scenario {
	case "send-sync":
		return r.sendSync()
	case "send-async":
		return r.sendAsync()
	case "send-oneway":
		return r.sendOneway()
	case "send-batch":
		return r.sendBatch()
	case "send-orderly":
		return r.sendOrderly()
	case "consume-push-concurrent":
		return r.consumePush(false)
	case "consume-push-orderly":
		return r.consumePush(true)
	case "consume-lite-pull", "consume-pull":
		return r.consumeLitePull()
	case "consume-with-failures":
		return r.consumeWithFailures()
	case "offset-resume":
		return r.offsetResume()
	case "route":
		return r.route()
	case "request-reply":
		return r.requestReply()
	}
	return fmt.Errorf("unknown scenario %q", r.o.scenario)
}

// ------------------------------------------------------------------ helpers

func (r *run) addErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, map[string]interface{}{"type": fmt.Sprintf("%T", err), "message": err.Error()})
}

func (r *run) addSent(m map[string]interface{}) {
	r.mu.Lock()
	r.sent = append(r.sent, m)
	r.mu.Unlock()
}

func (r *run) addReceived(m map[string]interface{}) {
	r.mu.Lock()
	r.received = append(r.received, m)
	r.mu.Unlock()
}

func (r *run) instance(role string) string {
	r.mu.Lock()
	r.seq++
	n := r.seq
	r.mu.Unlock()
	return fmt.Sprintf("interop-go-%s-%d-%d", role, os.Getpid(), n)
}

func (r *run) credentials() primitive.Credentials {
	return primitive.Credentials{AccessKey: r.o.accessKey, SecretKey: r.o.secretKey}
}

func (r *run) resolver() primitive.NsResolver {
	return primitive.NewPassthroughResolver([]string{r.o.namesrv})
}

func (r *run) deadline() time.Time {
	return time.Now().Add(time.Duration(r.o.timeoutSec) * time.Second)
}

// body is "ID" or, with --body-size, "ID|" padded with a checkable pattern.
func (r *run) body(id string) []byte {
	if r.o.bodySize <= len(id)+1 {
		return []byte(id)
	}
	b := make([]byte, 0, r.o.bodySize)
	b = append(b, id...)
	b = append(b, '|')
	for i := 0; len(b) < r.o.bodySize; i++ {
		b = append(b, byte('a'+i%26))
	}
	return b
}

func bodyID(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '|'); i >= 0 {
		return s[:i]
	}
	return s
}

func bodyOK(b []byte) bool {
	s := string(b)
	i := strings.IndexByte(s, '|')
	if i < 0 {
		return true
	}
	for j, c := range []byte(s[i+1:]) {
		if c != byte('a'+j%26) {
			return false
		}
	}
	return true
}

func (r *run) message(id, key string) *primitive.Message {
	m := primitive.NewMessage(r.o.topic, r.body(id))
	tags := strings.Split(r.o.tags, ",")
	n := 0
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		if v, err := strconv.Atoi(id[i+1:]); err == nil {
			n = v
		}
	}
	m.WithTag(tags[n%len(tags)])
	m.WithKeys([]string{key})
	m.WithProperty(userProp, id)
	return m
}

func (r *run) producer(extra ...producer.Option) (rocketmq.Producer, error) {
	group := r.o.group
	if !strings.HasPrefix(group, "P") {
		group = "P_" + group
	}
	options := []producer.Option{
		producer.WithNsResolver(r.resolver()),
		producer.WithGroupName(group),
		producer.WithInstanceName(r.instance("producer")),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(10 * time.Second),
	}
	if r.o.accessKey != "" {
		options = append(options, producer.WithCredentials(r.credentials()))
	}
	p, err := rocketmq.NewProducer(append(options, extra...)...)
	if err != nil {
		return nil, err
	}
	return p, p.Start()
}

func sentRecord(id, key string, res *primitive.SendResult) map[string]interface{} {
	s := map[string]interface{}{"body": id, "key": key}
	if res != nil {
		s["status"] = sendStatus(res.Status)
		s["msgId"] = res.MsgID
		s["offsetMsgId"] = res.OffsetMsgID
		s["brokerName"] = res.MessageQueue.BrokerName
		s["queueId"] = res.MessageQueue.QueueId
		s["queueOffset"] = res.QueueOffset
	}
	return s
}

func sendStatus(s primitive.SendStatus) string {
	switch s {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return fmt.Sprintf("STATUS_%d", s)
}

func receivedRecord(m *primitive.MessageExt) map[string]interface{} {
	rec := map[string]interface{}{
		"body":            bodyID(m.Body),
		"bodyLen":         len(m.Body),
		"bodyOk":          bodyOK(m.Body),
		"msgId":           m.MsgId,
		"offsetMsgId":     m.OffsetMsgId,
		"topic":           m.Topic,
		"queueOffset":     m.QueueOffset,
		"commitLogOffset": m.CommitLogOffset,
		"reconsumeTimes":  m.ReconsumeTimes,
		"keys":            m.GetKeys(),
		"tags":            m.GetTags(),
		"userProp":        m.GetProperty(userProp),
		"retryTopic":      m.GetProperty(primitive.PropertyRetryTopic),
		"bornTimestamp":   m.BornTimestamp,
		"storeTimestamp":  m.StoreTimestamp,
		"storeHost":       m.StoreHost,
		"sysFlag":         m.SysFlag,
	}
	if m.Queue != nil {
		rec["brokerName"] = m.Queue.BrokerName
		rec["queueId"] = m.Queue.QueueId
	}
	return rec
}

// ------------------------------------------------------------------ sends

func (r *run) sendSync() error {
	p, err := r.producer()
	if err != nil {
		return err
	}
	defer p.Shutdown()
	for i := 0; i < r.o.count; i++ {
		id, key := fmt.Sprintf("%s-%d", r.o.prefix, i), fmt.Sprintf("k%d", i)
		res, err := p.SendSync(context.Background(), r.message(id, key))
		if err != nil {
			r.addErr(err)
			continue
		}
		r.addSent(sentRecord(id, key, res))
	}
	return nil
}

// requestReply: Producer.Request, answered by a push consumer whose own producer sends the
// reply (the topic must exist first: the Go consumer does not start without its route) (consumer.CreateReplyMessage, body "re:" + the request's: v2.1.2's CreateReplyMessage
// drops the body it is given, so it is set again). Sent entries carry "reply".
func (r *run) requestReply() error {
	replier, err := r.producer()
	if err != nil {
		return err
	}
	defer replier.Shutdown()
	// The requester shares the consumer's client: v2.1.2 sends a producer's heartbeat to a
	// broker only once it knows one (at start, or every 30 s), and a broker pushes a reply
	// only to a producer it has a heartbeat of; the consumer's start sends that heartbeat.
	inst := r.instance("push")
	requester, err := r.producer(producer.WithInstanceName(inst))
	if err != nil {
		return err
	}
	defer requester.Shutdown()
	c, err := r.pushConsumer(false, consumer.WithInstance(inst))
	if err != nil {
		return err
	}
	err = c.Subscribe(r.o.topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if consumer.GetReplyToClient(m) == "" {
				continue // the message that created the topic: not a request
			}
			rec := receivedRecord(m)
			rec["cluster"] = m.GetProperty(primitive.PropertyCluster)
			body := []byte("re:" + bodyID(m.Body))
			reply, err := consumer.CreateReplyMessage(m, body)
			if err != nil {
				r.addErr(err)
				r.addReceived(rec)
				continue
			}
			reply.Body = body
			res, err := replier.SendSync(context.Background(), reply)
			if err != nil {
				r.addErr(err)
			} else {
				rec["replyStatus"] = sendStatus(res.Status)
			}
			r.addReceived(rec)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	defer c.Shutdown()
	for i := 0; i < r.o.count; i++ {
		id := fmt.Sprintf("%s-%d", r.o.prefix, i)
		rec := map[string]interface{}{"body": id}
		reply, err := requester.Request(context.Background(), 10*time.Second, r.message(id, fmt.Sprintf("k%d", i)))
		if err != nil {
			r.addErr(err)
		} else {
			rec["reply"] = string(reply.Body)
			rec["replyTopic"] = reply.Topic
		}
		r.addSent(rec)
	}
	return nil
}

func (r *run) sendAsync() error {
	p, err := r.producer()
	if err != nil {
		return err
	}
	defer p.Shutdown()
	var wg sync.WaitGroup
	for i := 0; i < r.o.count; i++ {
		id, key := fmt.Sprintf("%s-%d", r.o.prefix, i), fmt.Sprintf("k%d", i)
		wg.Add(1)
		err := p.SendAsync(context.Background(), func(ctx context.Context, res *primitive.SendResult, e error) {
			defer wg.Done()
			if e != nil {
				r.addErr(e)
				return
			}
			r.addSent(sentRecord(id, key, res))
		}, r.message(id, key))
		if err != nil {
			wg.Done()
			r.addErr(err)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Duration(r.o.timeoutSec) * time.Second):
		return errors.New("timeout: async sends not all acknowledged")
	}
	return nil
}

func (r *run) sendOneway() error {
	p, err := r.producer()
	if err != nil {
		return err
	}
	defer p.Shutdown()
	for i := 0; i < r.o.count; i++ {
		id, key := fmt.Sprintf("%s-%d", r.o.prefix, i), fmt.Sprintf("k%d", i)
		if err := p.SendOneWay(context.Background(), r.message(id, key)); err != nil {
			r.addErr(err)
			continue
		}
		r.addSent(sentRecord(id, key, nil))
	}
	time.Sleep(500 * time.Millisecond) // let the last oneway frames leave before shutdown
	return nil
}

func (r *run) sendBatch() error {
	p, err := r.producer()
	if err != nil {
		return err
	}
	defer p.Shutdown()
	var batches []map[string]interface{}
	for start := 0; start < r.o.count; start += r.o.batchSize {
		var msgs []*primitive.Message
		var ids []string
		for i := start; i < r.o.count && i < start+r.o.batchSize; i++ {
			id := fmt.Sprintf("%s-%d", r.o.prefix, i)
			ids = append(ids, id)
			msgs = append(msgs, r.message(id, fmt.Sprintf("k%d", i)))
		}
		res, err := p.SendSync(context.Background(), msgs...)
		if err != nil {
			r.addErr(err)
			continue
		}
		var msgIDs []string // the Go client reports no client ids for a batch
		if res.MsgID != "" {
			msgIDs = strings.Split(res.MsgID, ",")
		}
		offIDs := strings.Split(res.OffsetMsgID, ",")
		batches = append(batches, map[string]interface{}{
			"size": len(ids), "msgIdCount": len(msgIDs), "offsetMsgIdCount": len(offIDs),
			"queueId": res.MessageQueue.QueueId, "queueOffset": res.QueueOffset,
		})
		for j, id := range ids {
			s := sentRecord(id, fmt.Sprintf("k%d", start+j), res)
			s["msgId"], s["offsetMsgId"] = nil, nil
			if j < len(msgIDs) {
				s["msgId"] = msgIDs[j]
			}
			if j < len(offIDs) {
				s["offsetMsgId"] = offIDs[j]
			}
			s["queueOffset"] = res.QueueOffset + int64(j)
			r.addSent(s)
		}
	}
	r.result["batches"] = batches
	return nil
}

func (r *run) sendOrderly() error {
	p, err := r.producer(producer.WithQueueSelector(producer.NewHashQueueSelector()))
	if err != nil {
		return err
	}
	defer p.Shutdown()
	seq := make([]int, r.o.keys)
	for i := 0; i < r.o.count; i++ {
		k := i % r.o.keys
		key := fmt.Sprintf("key%d", k)
		id := fmt.Sprintf("%s-%s-%d", r.o.prefix, key, seq[k])
		seq[k]++
		m := r.message(id, key)
		m.WithShardingKey(key)
		res, err := p.SendSync(context.Background(), m)
		if err != nil {
			r.addErr(err)
			continue
		}
		r.addSent(sentRecord(id, key, res))
	}
	return nil
}

// ------------------------------------------------------------------ consumers

type distinctSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func newDistinct() *distinctSet { return &distinctSet{m: map[string]bool{}} }

func (d *distinctSet) add(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[s] {
		return false
	}
	d.m[s] = true
	return true
}

func (d *distinctSet) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

func (d *distinctSet) keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.m))
	for k := range d.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func await(d *distinctSet, want int, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if d.size() >= want {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d.size() >= want
}

func timeoutErr(d *distinctSet, want int) error {
	return fmt.Errorf("timeout: received %d of %d distinct bodies", d.size(), want)
}

func (r *run) pushConsumer(orderly bool, extra ...consumer.Option) (rocketmq.PushConsumer, error) {
	options := []consumer.Option{
		consumer.WithNsResolver(r.resolver()),
		consumer.WithGroupName(r.o.group),
		consumer.WithInstance(r.instance("push")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeMessageBatchMaxSize(1),
		consumer.WithConsumerOrder(orderly),
	}
	if r.o.accessKey != "" {
		options = append(options, consumer.WithCredentials(r.credentials()))
	}
	return rocketmq.NewPushConsumer(append(options, extra...)...)
}

func (r *run) consumePush(orderly bool) error {
	d := newDistinct()
	c, err := r.pushConsumer(orderly)
	if err != nil {
		return err
	}
	err = c.Subscribe(r.o.topic, consumer.MessageSelector{Type: consumer.TAG, Expression: r.o.subscription}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			r.addReceived(receivedRecord(m))
			d.add(bodyID(m.Body))
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	ok := await(d, r.o.count, r.deadline())
	_ = c.Shutdown()
	if !ok {
		return timeoutErr(d, r.o.count)
	}
	return nil
}

func (r *run) consumeWithFailures() error {
	succeeded, failedOnce := newDistinct(), newDistinct()
	c, err := r.pushConsumer(false)
	if err != nil {
		return err
	}
	err = c.Subscribe(r.o.topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		m := msgs[0]
		id := bodyID(m.Body)
		rec := receivedRecord(m)
		n := 0
		if i := strings.LastIndexByte(id, '-'); i >= 0 {
			n, _ = strconv.Atoi(id[i+1:])
		}
		if r.o.failEvery > 0 && n%r.o.failEvery == 0 && failedOnce.add(id) {
			rec["result"] = "RECONSUME_LATER"
			r.addReceived(rec)
			if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
				cc.DelayLevelWhenNextConsume = r.o.retryDelayLevel
			}
			return consumer.ConsumeRetryLater, nil
		}
		rec["result"] = "CONSUME_SUCCESS"
		r.addReceived(rec)
		succeeded.add(id)
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	ok := await(succeeded, r.o.count, r.deadline())
	_ = c.Shutdown()
	r.result["failedOnce"] = failedOnce.keys()
	if !ok {
		return timeoutErr(succeeded, r.o.count)
	}
	return nil
}

// offsetResume: phase 1 consumes exactly count/2 bodies (later deliveries block until the
// consumer shuts down and are never acknowledged), shuts down so offsets are committed; phase 2
// (same group, new consumer) consumes until every body was seen.
func (r *run) offsetResume() error {
	half := r.o.count / 2
	d := newDistinct()
	deadline := r.deadline()
	var phases []map[string]interface{}
	for phase := 1; phase <= 2; phase++ {
		ph := phase
		want := r.o.count
		if phase == 1 {
			want = half
		}
		release := make(chan struct{})
		var mu sync.Mutex
		got := 0
		c, err := r.pushConsumer(false, consumer.WithConsumeGoroutineNums(1))
		if err != nil {
			return err
		}
		err = c.Subscribe(r.o.topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if ph == 1 && d.size() >= want {
				mu.Unlock()
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
				mu.Lock()
				if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
					cc.DelayLevelWhenNextConsume = r.o.retryDelayLevel
				}
				return consumer.ConsumeRetryLater, nil
			}
			for _, m := range msgs {
				rec := receivedRecord(m)
				rec["phase"] = ph
				r.addReceived(rec)
				d.add(bodyID(m.Body))
				got++
			}
			return consumer.ConsumeSuccess, nil
		})
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		ok := await(d, want, deadline)
		_ = c.Shutdown() // persists the consumed offsets to the broker
		close(release)
		mu.Lock()
		phases = append(phases, map[string]interface{}{"phase": phase, "want": want, "received": got})
		mu.Unlock()
		if !ok {
			r.result["phases"] = phases
			return timeoutErr(d, want)
		}
		// The shutdown's offset commit is oneway (UPDATE_CONSUMER_OFFSET, no answer): give it
		// the moment any real restart takes before the next consumer asks for the offsets.
		time.Sleep(time.Second)
	}
	r.result["phases"] = phases
	return nil
}

func (r *run) consumeLitePull() error {
	d := newDistinct()
	pullOptions := []consumer.Option{
		consumer.WithNsResolver(r.resolver()),
		consumer.WithGroupName(r.o.group),
		consumer.WithInstance(r.instance("pull")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerModel(consumer.Clustering),
	}
	if r.o.accessKey != "" {
		pullOptions = append(pullOptions, consumer.WithCredentials(r.credentials()))
	}
	c, err := rocketmq.NewPullConsumer(pullOptions...)
	if err != nil {
		return err
	}
	if err := c.Subscribe(r.o.topic, consumer.MessageSelector{}); err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	deadline := r.deadline()
	for d.size() < r.o.count && time.Now().Before(deadline) {
		cr, err := c.Poll(context.Background(), time.Second)
		if err != nil {
			if errors.Is(err, consumer.ErrNoNewMsg) {
				continue
			}
			r.addErr(err)
			break
		}
		for _, m := range cr.GetMsgList() {
			r.addReceived(receivedRecord(m))
			d.add(bodyID(m.Body))
		}
		c.ACK(context.Background(), cr, consumer.ConsumeSuccess)
	}
	_ = c.Shutdown()
	if d.size() < r.o.count {
		return timeoutErr(d, r.o.count)
	}
	return nil
}

// ------------------------------------------------------------------ admin / route

func (r *run) route() error {
	a, err := admin.NewAdmin(admin.WithResolver(r.resolver()))
	if err != nil {
		return err
	}
	defer a.Close()
	ctx := context.Background()
	if r.o.queues > 0 {
		if r.o.broker == "" {
			return errors.New("route --queues needs --broker ADDR")
		}
		err := a.CreateTopic(ctx, admin.WithTopicCreate(r.o.topic), admin.WithBrokerAddrCreate(r.o.broker),
			admin.WithReadQueueNums(r.o.queues), admin.WithWriteQueueNums(r.o.queues), admin.WithPerm(6))
		if err != nil {
			return err
		}
	}
	deadline := r.deadline()
	var mqs []*primitive.MessageQueue
	for time.Now().Before(deadline) {
		mqs, err = a.FetchPublishMessageQueues(ctx, r.o.topic)
		if err == nil && len(mqs) > 0 && (r.o.queues <= 0 || len(mqs) == r.o.queues) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	pub := []map[string]interface{}{}
	for _, mq := range mqs {
		pub = append(pub, map[string]interface{}{"brokerName": mq.BrokerName, "queueId": mq.QueueId})
	}
	sort.Slice(pub, func(i, j int) bool { return pub[i]["queueId"].(int) < pub[j]["queueId"].(int) })
	r.result["publishQueues"] = pub
	return nil
}
