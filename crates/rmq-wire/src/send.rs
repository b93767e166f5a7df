//! The native send path (issue 16): one call per received buffer of remoting frames decides,
//! for every SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) of an
//! ordinary message, what the broker's Python handler (`broker/handlers/send.py`) would
//! answer, appends the stored messages of the whole buffer with one [`Appender::append`] and
//! encodes the responses — or, when the broker waits before answering (SYNC_FLUSH, replicas:
//! [`SendState::defer`]), returns each stored request's SEND_OK with the end offset to wait for
//! ([`Deferred`]). Sans-I/O: the store is behind [`Appender`], the topic table and the limits
//! are plain data the caller keeps current.
//!
//! What it does not do is handed back untouched (as decoded frames, in order): every other
//! code, responses, a topic that is not in the table (unknown: auto-create, retry/DLQ and
//! system topics stay Python's), a header that does not parse (Python names the field), a
//! transaction or delayed/timer message (`TRAN_MSG`, `DELAY`, `TIMER_DE*` properties or a
//! transaction sys flag), a batch body that does not decode, a random queue on a topic with
//! no write queue, and every message of a buffer whose append failed (Python appends them
//! again one request at a time and answers as it does). Once one send frame of a buffer is
//! handed back, every later send frame of that buffer is too: Python runs them after the
//! native appends, so no later send of the buffer is stored natively ahead of it.
//!
//! The answers are byte-identical to the Python handler's (its tests compare them): the same
//! checks in the same order (topic permission, queue id, batch emptiness, body size,
//! properties size), the same codes and remarks, and SEND_OK with `msgId` (the offset message
//! ids, comma-joined for a batch), `queueId`, `queueOffset`, `MSG_REGION`, `TRACE_ON` and,
//! for a single message with a `UNIQ_KEY`, `transactionId`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use crate::batch::decode_batch;
use crate::message::MessageIn;
use crate::remoting::{
    decode_frames_with_limit, encode_frame_into, Frame, FrameError, FLAG_ONEWAY, FLAG_RESPONSE,
};

/// SEND_MESSAGE: V1 (long) header field names.
pub const SEND_MESSAGE: i32 = 10;
/// SEND_MESSAGE_V2: one-letter header field names.
pub const SEND_MESSAGE_V2: i32 = 310;
/// SEND_BATCH_MESSAGE: one-letter names, a batch body.
pub const SEND_BATCH_MESSAGE: i32 = 320;

/// Response codes the send path answers.
pub const SUCCESS: i32 = 0;
pub const SYSTEM_ERROR: i32 = 1;
pub const MESSAGE_ILLEGAL: i32 = 13;
pub const NO_PERMISSION: i32 = 16;
/// A queue id beyond the topic's queues (RocketMQ 5.5.0 answers a send with it: measured).
pub const INVALID_PARAMETER: i32 = 29;

/// `PermName.PERM_WRITE`.
pub const PERM_WRITE: i32 = 2;
/// The largest properties string a stored record can carry.
pub const MAX_PROPERTIES_LEN: usize = 32767;
/// `LanguageCode.PYTHON` and `MQVersion` ordinal the Python side answers with.
pub const RESPONSE_LANGUAGE: u8 = 3;
pub const RESPONSE_VERSION: i32 = 479;
/// sysFlag bits of a transaction (prepared / commit): the special services' business.
pub const TRANSACTION_SYS_FLAG_MASK: i32 = 0xC;

/// What a topic allows a send (its config, as Python keeps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicEntry {
    pub write_queue_nums: i32,
    /// With ``write_queue_nums``, the bound of the queue ids a send may name (RocketMQ's
    /// msgCheck: below the larger of the two).
    pub read_queue_nums: i32,
    pub perm: i32,
}

/// The limits and identity the answers depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendConfig {
    /// `maxMessageSize`: a larger body is MESSAGE_ILLEGAL.
    pub max_message_size: usize,
    /// The store host of offset message ids.
    pub store_ip: IpAddr,
    pub store_port: u16,
    /// Bounds of the message-size histogram (`rocketmq_message_size`), ascending.
    pub size_buckets: Vec<u64>,
    /// `brokerClusterName`: every stored message gets it as its `CLUSTER` property, as
    /// RocketMQ's SendMessageProcessor puts it (a request-reply consumer addresses its reply
    /// to `<cluster>_REPLY_TOPIC` from it). Empty: no property is added.
    pub cluster: String,
}

/// `props` (RocketMQ's `key\x01value\x02...` string) with `key` set to `value`: an existing
/// `key` property is replaced, else the pair is appended (each pair ends with `\x02`, as
/// `MessageDecoder.messageProperties2String` writes them).
pub fn with_property(props: &[u8], key: &str, value: &str) -> Vec<u8> {
    with_properties(props, &[(key, value)])
}

/// `props` with every `(key, value)` of `pairs` set, in one pass: existing pairs with those
/// keys are dropped and the new ones appended in order.
pub fn with_properties(props: &[u8], pairs: &[(&str, &str)]) -> Vec<u8> {
    let extra: usize = pairs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut out = Vec::with_capacity(props.len() + extra + 1);
    for pair in props.split(|&b| b == 2) {
        if pair.is_empty() {
            continue;
        }
        let name = pair.split(|&b| b == 1).next().unwrap_or(pair);
        if pairs.iter().any(|(k, _)| name == k.as_bytes()) {
            continue;
        }
        out.extend_from_slice(pair);
        out.push(2);
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(1);
        out.extend_from_slice(v.as_bytes());
        out.push(2);
    }
    out
}

/// RocketMQ's broker defaults `regionId` and `traceOn`, which every send's answer carries too.
pub const MSG_REGION: &str = "DefaultRegion";
pub const TRACE_ON: &str = "true";

/// The properties the broker puts on every message it stores (RocketMQ's send processors):
/// `MSG_REGION` and `TRACE_ON` (a traced consumer's client sends its consume trace only for a
/// message that names its region) and `CLUSTER` (a request-reply consumer addresses its reply
/// from it; not added when `cluster` is empty).
pub fn stamp(props: &[u8], cluster: &str) -> Vec<u8> {
    let all = [
        ("MSG_REGION", MSG_REGION),
        ("TRACE_ON", TRACE_ON),
        ("CLUSTER", cluster),
    ];
    let n = if cluster.is_empty() { 2 } else { 3 };
    with_properties(props, &all[..n])
}

/// What the caller keeps between calls: the topic table, the limits, the random state.
#[derive(Debug, Clone)]
pub struct SendState {
    pub table: HashMap<String, TopicEntry>,
    pub cfg: SendConfig,
    /// [`next_random`]'s state.
    pub rng: u64,
    /// The broker waits for a flush or replicas before answering (SYNC_FLUSH, SYNC_MASTER,
    /// controller mode): stored requests are not answered here but returned as
    /// [`Outcome::deferred`] for the caller to answer once the wait is over.
    pub defer: bool,
}

/// A stored request whose answer waits (see [`SendState::defer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferred {
    /// The SEND_OK response, to send with the code the wait decides.
    pub response: Frame<'static>,
    /// Physical end offset of the request's messages: what the wait is for.
    pub end_offset: u64,
    /// The producer wants the wait (its `WAIT` property is not "false").
    pub wait: bool,
    /// The request's code (for the caller's per-code metrics).
    pub request_code: i32,
}

/// Where one appended message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub physical_offset: u64,
    pub size: u32,
    pub queue_offset: i64,
}

/// The store, as the send path uses it: all messages of a buffer in one append, all or none.
pub trait Appender {
    /// Appends `msgs` in order; one [`Placed`] per message. On error nothing was stored.
    fn append(&mut self, msgs: &[MessageIn<'_>]) -> Result<Vec<Placed>, String>;
}

/// Messages stored per topic (all natively stored sends are of type "Normal").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicStat {
    pub messages: u64,
    /// Sum of the body sizes.
    pub bytes: u64,
    /// Histogram counts over [`SendConfig::size_buckets`] (one more than bounds: +Inf).
    pub buckets: Vec<u64>,
}

/// What one [`process`] call did.
#[derive(Debug, Default)]
pub struct Outcome<'a> {
    /// Frames for Python, in the order they arrived.
    pub fallback: Vec<Frame<'a>>,
    /// Bytes of the buffer used (complete frames).
    pub consumed: usize,
    /// The encoded responses of the natively answered requests, back to back.
    pub responses: Vec<u8>,
    /// (topic, queue id) appended to, each once, in first-append order.
    pub touched: Vec<(String, i32)>,
    /// Per topic, in first-store order.
    pub topics: Vec<(String, TopicStat)>,
    /// (request code, response code, requests) answered natively (oneway ones included).
    pub answered: Vec<(i32, i32, u64)>,
    /// Physical end offset of the append (0 when nothing was stored).
    pub end_offset: u64,
    /// Stored requests to answer after their wait (only with [`SendState::defer`]), in order;
    /// not in `answered`.
    pub deferred: Vec<Deferred>,
}

/// The send-relevant header fields, as the V1 header names them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SendHeader {
    topic: String,
    queue_id: i32,
    sys_flag: i32,
    born_timestamp: i64,
    flag: i32,
    properties: Option<String>,
    reconsume_times: Option<i32>,
    batch: bool,
}

/// (flag, body, properties) of one message to store.
type Entry<'a> = (i32, &'a [u8], Cow<'a, [u8]>);

/// One frame's fate.
enum Plan<'a> {
    Python,
    Reply {
        code: i32,
        remark: String,
    },
    Store {
        topic: String,
        queue_id: i32,
        sys_flag: i32,
        born_timestamp: i64,
        reconsume_times: i32,
        /// (flag, body, properties)
        entries: Vec<Entry<'a>>,
        uniq: Option<String>,
        wait: bool,
    },
}

fn last<'e>(ext: &'e [(String, String)], key: &str) -> Option<&'e str> {
    ext.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Python's header integers: `[+-]?[0-9]+` within the Java type's range.
fn int<T: std::str::FromStr>(v: &str) -> Option<T> {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// None when a required field is absent or a number does not parse: Python answers those
/// (naming the field).
fn parse_header(code: i32, ext: &[(String, String)]) -> Option<SendHeader> {
    let v2 = code != SEND_MESSAGE;
    let name = |long: &'static str, short: &'static str| if v2 { short } else { long };
    let get = |long, short| last(ext, name(long, short));
    // Required by the header class even where the send path does not use them.
    get("producerGroup", "a")?;
    get("defaultTopic", "c")?;
    int::<i32>(get("defaultTopicQueueNums", "d")?)?;
    let opt_i32 = |long, short| -> Option<Option<i32>> {
        match get(long, short) {
            None => Some(None),
            Some(v) => int::<i32>(v).map(Some),
        }
    };
    opt_i32("maxReconsumeTimes", "l")?;
    Some(SendHeader {
        topic: get("topic", "b")?.to_owned(),
        queue_id: int(get("queueId", "e")?)?,
        sys_flag: int(get("sysFlag", "f")?)?,
        born_timestamp: int(get("bornTimestamp", "g")?)?,
        flag: int(get("flag", "h")?)?,
        properties: get("properties", "i").map(str::to_owned),
        reconsume_times: opt_i32("reconsumeTimes", "j")?,
        batch: get("batch", "m").is_some_and(|b| b.eq_ignore_ascii_case("true")),
    })
}

/// The special services' cheap test on raw properties (`SpecialServices.may_route`).
fn may_route(props: &[u8]) -> bool {
    let has = |needle: &[u8]| props.windows(needle.len()).any(|w| w == needle);
    has(b"TRAN_MSG\x01") || has(b"DELAY\x01") || has(b"TIMER_DE")
}

/// `send.py::_wants_wait`: the `WAIT` property (the last one) is not "false", any case.
fn wants_wait(props: &[u8]) -> bool {
    let mut wait = true;
    for prop in props.split(|&b| b == 2) {
        let mut kv = prop.splitn(2, |&b| b == 1);
        if kv.next() == Some(b"WAIT") {
            if let Some(v) = kv.next() {
                wait = !String::from_utf8_lossy(v).to_lowercase().eq("false");
            }
        }
    }
    wait
}

/// `send.py::_uniq_key`: the first `UNIQ_KEY` property's value, if it starts a property.
fn uniq_key(props: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"UNIQ_KEY\x01";
    let i = props.windows(KEY.len()).position(|w| w == KEY)?;
    if i > 0 && props[i - 1] != 2 {
        return None;
    }
    let start = i + KEY.len();
    let end = props[start..]
        .iter()
        .position(|&b| b == 2)
        .map_or(props.len(), |j| start + j);
    let v = String::from_utf8_lossy(&props[start..end]).into_owned();
    (!v.is_empty()).then_some(v)
}

/// RocketMQ's offset message id: store IP (4 or 16 bytes), port (4), offset (8), upper hex.
pub fn offset_msg_id(ip: IpAddr, port: u16, offset: u64, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut push = |bytes: &[u8]| {
        for b in bytes {
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xF)] as char);
        }
    };
    match ip {
        IpAddr::V4(a) => push(&a.octets()),
        IpAddr::V6(a) => push(&a.octets()),
    }
    push(&u32::from(port).to_be_bytes());
    push(&offset.to_be_bytes());
}

/// A tiny xorshift for the queue of a send that names none (queueId < 0).
pub fn next_random(state: &mut u64) -> u64 {
    let mut x = if *state == 0 {
        0x9E37_79B9_7F4A_7C15
    } else {
        *state
    };
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

fn plan<'a>(
    f: &Frame<'a>,
    table: &HashMap<String, TopicEntry>,
    cfg: &SendConfig,
    rng: &mut u64,
) -> Plan<'a> {
    let Some(ext) = f.ext_fields.as_deref() else {
        return Plan::Python;
    };
    let Some(h) = parse_header(f.code, ext) else {
        return Plan::Python;
    };
    let Some(tc) = table.get(&h.topic) else {
        return Plan::Python;
    };
    if tc.perm & PERM_WRITE != PERM_WRITE {
        return Plan::Reply {
            code: NO_PERMISSION,
            remark: format!("the topic[{}] sending message is forbidden", h.topic),
        };
    }
    let mut queue_id = h.queue_id;
    if queue_id < 0 {
        let Ok(n) = u64::try_from(tc.write_queue_nums) else {
            return Plan::Python;
        };
        if n == 0 {
            return Plan::Python; // Python's randrange(0) fails its own way
        }
        // n <= i32::MAX, so the remainder fits.
        queue_id = (next_random(rng) % n) as i32;
    }
    if queue_id >= tc.write_queue_nums.max(tc.read_queue_nums) {
        return Plan::Reply {
            code: INVALID_PARAMETER,
            remark: format!(
                "request queueId[{queue_id}] is illegal, topic {} has {} write and {} read queues",
                h.topic, tc.write_queue_nums, tc.read_queue_nums
            ),
        };
    }
    let body: &'a [u8] = match &f.body {
        None => &[],
        Some(Cow::Borrowed(b)) => b,
        Some(Cow::Owned(_)) => return Plan::Python,
    };
    let is_batch = f.code == SEND_BATCH_MESSAGE || h.batch;
    let props = h.properties.unwrap_or_default().into_bytes();
    let wait = wants_wait(&props);
    if h.sys_flag & TRANSACTION_SYS_FLAG_MASK != 0 || (!is_batch && may_route(&props)) {
        return Plan::Python;
    }
    let mut entries: Vec<Entry<'a>> = if is_batch {
        match decode_batch(body) {
            Ok(es) => es
                .into_iter()
                .map(|e| (e.flag, e.body, Cow::Borrowed(e.properties)))
                .collect(),
            Err(_) => return Plan::Python,
        }
    } else {
        vec![(h.flag, body, Cow::Owned(props))]
    };
    if !is_batch {
        // a batch's messages are stored with their own properties only, as RocketMQ stores
        // them (the stamp would add about 80 bytes to every small batched message)
        for e in &mut entries {
            e.2 = Cow::Owned(stamp(&e.2, &cfg.cluster));
        }
    }
    if entries.is_empty() {
        return Plan::Reply {
            code: MESSAGE_ILLEGAL,
            remark: "the batch is empty".to_owned(),
        };
    }
    if is_batch && body.len() > cfg.max_message_size {
        // RocketMQ refuses a batch larger than maxMessageSize as a whole (send.py says the same)
        return Plan::Reply {
            code: MESSAGE_ILLEGAL,
            remark: format!(
                "the batch of {} bytes is over the max message size, MAX: {}",
                body.len(),
                cfg.max_message_size
            ),
        };
    }
    for (_, b, p) in &entries {
        if b.len() > cfg.max_message_size {
            return Plan::Reply {
                code: MESSAGE_ILLEGAL,
                remark: format!(
                    "the message body size over max value, MAX: {}",
                    cfg.max_message_size
                ),
            };
        }
        if p.len() > MAX_PROPERTIES_LEN {
            return Plan::Reply {
                code: MESSAGE_ILLEGAL,
                remark: "the message properties are too long".to_owned(),
            };
        }
    }
    let uniq = if is_batch {
        None
    } else {
        entries.first().and_then(|(_, _, p)| uniq_key(p))
    };
    Plan::Store {
        topic: h.topic,
        queue_id,
        sys_flag: h.sys_flag,
        born_timestamp: h.born_timestamp,
        reconsume_times: h.reconsume_times.unwrap_or(0),
        entries,
        uniq,
        wait,
    }
}

fn is_send(f: &Frame<'_>) -> bool {
    f.flag & FLAG_RESPONSE == 0
        && matches!(f.code, SEND_MESSAGE | SEND_MESSAGE_V2 | SEND_BATCH_MESSAGE)
}

fn respond(
    req: &Frame<'_>,
    code: i32,
    remark: Option<String>,
    ext: Option<Vec<(String, String)>>,
    out: &mut Vec<u8>,
) -> Result<usize, crate::remoting::RemotingError> {
    let r = Frame {
        code,
        language: RESPONSE_LANGUAGE,
        version: RESPONSE_VERSION,
        opaque: req.opaque,
        flag: FLAG_RESPONSE,
        remark,
        ext_fields: ext,
        body: None,
        ser_type: req.ser_type,
    };
    encode_frame_into(&r, out)
}

fn bucket(bounds: &[u64], n: u64) -> usize {
    bounds.partition_point(|&b| b < n)
}

/// Handles every complete frame of `buf` (at most `max_frame_len` bytes each) as the module
/// docs say. `enabled == false` hands every frame back (the role or config rules the native
/// path out now). A malformed frame fails the whole call as `decode_frames` does; nothing of
/// the buffer was appended then.
pub fn process<'a>(
    buf: &'a [u8],
    max_frame_len: usize,
    enabled: bool,
    state: &mut SendState,
    born_host: SocketAddr,
    store: &mut dyn Appender,
) -> Result<Outcome<'a>, FrameError> {
    let SendState {
        table,
        cfg,
        rng,
        defer,
    } = state;
    let defer = *defer;
    let cfg = &*cfg;
    let (frames, consumed) = decode_frames_with_limit(buf, max_frame_len)?;
    let mut out = Outcome {
        consumed,
        ..Outcome::default()
    };
    if !enabled || !frames.iter().any(is_send) {
        out.fallback = frames;
        return Ok(out);
    }
    let mut handed_back = false;
    let plans: Vec<Plan<'a>> = frames
        .iter()
        .map(|f| {
            if !is_send(f) || handed_back {
                return Plan::Python;
            }
            let p = plan(f, table, cfg, rng);
            handed_back = matches!(p, Plan::Python);
            p
        })
        .collect();
    let mut placed: Vec<Placed> = Vec::new();
    let stored = {
        let msgs: Vec<MessageIn<'_>> = plans
            .iter()
            .flat_map(|p| match p {
                Plan::Store {
                    topic,
                    queue_id,
                    sys_flag,
                    born_timestamp,
                    reconsume_times,
                    entries,
                    ..
                } => entries
                    .iter()
                    .map(|(flag, body, props)| MessageIn {
                        topic: topic.as_bytes(),
                        queue_id: *queue_id,
                        flag: *flag,
                        sys_flag: *sys_flag,
                        body,
                        properties: props,
                        born_timestamp: *born_timestamp,
                        born_host,
                        reconsume_times: *reconsume_times,
                        prepared_txn_offset: 0,
                    })
                    .collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .collect();
        if msgs.is_empty() {
            true
        } else {
            match store.append(&msgs) {
                Ok(p) if p.len() == msgs.len() => {
                    placed = p;
                    true
                }
                // Nothing stored (or an appender that broke its contract): Python does it.
                _ => false,
            }
        }
    };
    let mut next = 0usize;
    let mut ids = String::new();
    let mut answered: HashMap<(i32, i32), u64> = HashMap::new();
    let mut answer_order: Vec<(i32, i32)> = Vec::new();
    let mut count = |req: i32, resp: i32| {
        let n = answered.entry((req, resp)).or_insert(0);
        if *n == 0 {
            answer_order.push((req, resp));
        }
        *n += 1;
    };
    for (f, p) in frames.into_iter().zip(plans) {
        let oneway = f.flag & FLAG_ONEWAY != 0;
        match p {
            Plan::Python => out.fallback.push(f),
            Plan::Store { .. } if !stored => out.fallback.push(f),
            Plan::Reply { code, remark } => {
                count(f.code, code);
                if !oneway {
                    // Our codes and remarks always encode (both serializations).
                    let _ = respond(&f, code, Some(remark), None, &mut out.responses);
                }
            }
            Plan::Store {
                topic,
                queue_id,
                entries,
                uniq,
                wait,
                ..
            } => {
                let mine = &placed[next..next + entries.len()];
                next += entries.len();
                if let Some(last) = mine.last() {
                    out.end_offset = out
                        .end_offset
                        .max(last.physical_offset + u64::from(last.size));
                }
                let key = (topic.clone(), queue_id);
                if !out.touched.contains(&key) {
                    out.touched.push(key);
                }
                let stat = match out.topics.iter().position(|(t, _)| *t == topic) {
                    Some(i) => &mut out.topics[i].1,
                    None => {
                        out.topics.push((
                            topic.clone(),
                            TopicStat {
                                buckets: vec![0; cfg.size_buckets.len() + 1],
                                ..TopicStat::default()
                            },
                        ));
                        let i = out.topics.len() - 1;
                        &mut out.topics[i].1
                    }
                };
                for (_, b, _) in &entries {
                    stat.messages += 1;
                    stat.bytes += b.len() as u64;
                    stat.buckets[bucket(&cfg.size_buckets, b.len() as u64)] += 1;
                }
                if oneway {
                    count(f.code, SUCCESS);
                    continue;
                }
                ids.clear();
                for (i, m) in mine.iter().enumerate() {
                    if i > 0 {
                        ids.push(',');
                    }
                    offset_msg_id(cfg.store_ip, cfg.store_port, m.physical_offset, &mut ids);
                }
                let mut ext = vec![
                    ("msgId".to_owned(), ids.clone()),
                    ("queueId".to_owned(), queue_id.to_string()),
                    (
                        "queueOffset".to_owned(),
                        mine.first().map_or(0, |m| m.queue_offset).to_string(),
                    ),
                    ("MSG_REGION".to_owned(), "DefaultRegion".to_owned()),
                    ("TRACE_ON".to_owned(), "true".to_owned()),
                ];
                if let Some(u) = uniq {
                    ext.push(("transactionId".to_owned(), u));
                }
                if defer {
                    out.deferred.push(Deferred {
                        response: Frame {
                            code: SUCCESS,
                            language: RESPONSE_LANGUAGE,
                            version: RESPONSE_VERSION,
                            opaque: f.opaque,
                            flag: FLAG_RESPONSE,
                            remark: None,
                            ext_fields: Some(ext),
                            body: None,
                            ser_type: f.ser_type,
                        },
                        end_offset: mine
                            .last()
                            .map_or(0, |m| m.physical_offset + u64::from(m.size)),
                        wait,
                        request_code: f.code,
                    });
                    continue;
                }
                count(f.code, SUCCESS);
                // A response that cannot be encoded cannot be either: the request is stored,
                // so it goes unanswered like a lost response (the client times out).
                let _ = respond(&f, SUCCESS, None, Some(ext), &mut out.responses);
            }
        }
    }
    out.answered = answer_order
        .into_iter()
        .map(|k| (k.0, k.1, answered.get(&k).copied().unwrap_or(0)))
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{encode_batch, BatchEntry};
    use crate::remoting::{decode_frames, encode_frames, SERIALIZE_JSON, SERIALIZE_ROCKETMQ};
    use proptest::prelude::*;

    /// (topic, queue id, body, properties) of a stored message.
    type Stored = (Vec<u8>, i32, Vec<u8>, Vec<u8>);

    /// An in-memory log: offsets as a store would hand them out.
    #[derive(Default)]
    struct MemLog {
        end: u64,
        queues: HashMap<(Vec<u8>, i32), i64>,
        stored: Vec<Stored>,
        fail: bool,
    }

    impl Appender for MemLog {
        fn append(&mut self, msgs: &[MessageIn<'_>]) -> Result<Vec<Placed>, String> {
            if self.fail {
                return Err("refused".into());
            }
            let mut out = Vec::new();
            for m in msgs {
                let size = 100 + m.body.len() as u32;
                let q = self
                    .queues
                    .entry((m.topic.to_vec(), m.queue_id))
                    .or_insert(0);
                out.push(Placed {
                    physical_offset: self.end,
                    size,
                    queue_offset: *q,
                });
                *q += 1;
                self.end += u64::from(size);
                self.stored.push((
                    m.topic.to_vec(),
                    m.queue_id,
                    m.body.to_vec(),
                    m.properties.to_vec(),
                ));
            }
            Ok(out)
        }
    }

    fn table() -> HashMap<String, TopicEntry> {
        let mut t = HashMap::new();
        t.insert(
            "T".to_owned(),
            TopicEntry {
                write_queue_nums: 4,
                read_queue_nums: 4,
                perm: 6,
            },
        );
        t.insert(
            "RO".to_owned(),
            TopicEntry {
                write_queue_nums: 4,
                read_queue_nums: 4,
                perm: 4,
            },
        );
        t
    }

    fn cfg() -> SendConfig {
        SendConfig {
            max_message_size: 64,
            store_ip: "127.0.0.1".parse().expect("ip"),
            store_port: 10911,
            size_buckets: vec![8, 32],
            cluster: "C1".to_owned(),
        }
    }

    fn st() -> SendState {
        SendState {
            table: table(),
            cfg: cfg(),
            rng: 1,
            defer: false,
        }
    }

    fn host() -> SocketAddr {
        "10.0.0.1:5555".parse().expect("addr")
    }

    fn ext(pairs: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn send(
        code: i32,
        ser: u8,
        opaque: i32,
        topic: &str,
        queue: &str,
        props: &str,
        body: &[u8],
    ) -> Vec<u8> {
        let keys: [&str; 9] = if code == SEND_MESSAGE {
            [
                "producerGroup",
                "topic",
                "defaultTopic",
                "defaultTopicQueueNums",
                "queueId",
                "sysFlag",
                "bornTimestamp",
                "flag",
                "properties",
            ]
        } else {
            ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
        };
        let vals = [
            "G",
            topic,
            "TBW102",
            "4",
            queue,
            "0",
            "1700000000000",
            "0",
            props,
        ];
        let pairs: Vec<(&str, &str)> = keys.iter().copied().zip(vals).collect();
        let f = Frame {
            code,
            language: 0,
            version: 479,
            opaque,
            flag: 0,
            remark: None,
            ext_fields: ext(&pairs),
            body: (!body.is_empty()).then(|| Cow::Owned(body.to_vec())),
            ser_type: ser,
        };
        encode_frames([&f]).expect("encodes")
    }

    fn run(buf: &[u8], log: &mut MemLog) -> (Vec<Frame<'static>>, usize) {
        let mut state = st();
        let o = process(buf, 1 << 20, true, &mut state, host(), log).expect("decodes");
        let (frames, _) = decode_frames(&o.responses).expect("responses decode");
        (
            frames.into_iter().map(Frame::into_owned).collect(),
            o.consumed,
        )
    }

    fn field<'f>(f: &'f Frame<'_>, key: &str) -> Option<&'f str> {
        last(f.ext_fields.as_deref().unwrap_or(&[]), key)
    }

    #[test]
    fn an_ordinary_send_is_stored_and_answered_in_both_serializations() {
        for ser in [SERIALIZE_JSON, SERIALIZE_ROCKETMQ] {
            for code in [SEND_MESSAGE, SEND_MESSAGE_V2] {
                let mut log = MemLog::default();
                let buf = send(
                    code,
                    ser,
                    7,
                    "T",
                    "2",
                    "UNIQ_KEY\u{1}abc\u{2}K\u{1}v",
                    b"hi",
                );
                let (resp, used) = run(&buf, &mut log);
                assert_eq!(used, buf.len());
                assert_eq!(resp.len(), 1);
                let r = &resp[0];
                assert_eq!((r.code, r.opaque, r.flag, r.ser_type), (0, 7, 1, ser));
                assert_eq!(field(r, "queueId"), Some("2"));
                assert_eq!(field(r, "queueOffset"), Some("0"));
                assert_eq!(field(r, "transactionId"), Some("abc"));
                assert_eq!(field(r, "msgId"), Some("7F00000100002A9F0000000000000000"));
                assert_eq!(log.stored.len(), 1);
                assert_eq!(log.stored[0].2, b"hi");
                assert_eq!(
                    log.stored[0].3,
                    b"UNIQ_KEY\x01abc\x02K\x01v\x02MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true\x02CLUSTER\x01C1\x02".to_vec()
                );
            }
        }
    }

    #[test]
    fn a_batch_is_one_response_with_every_message_id() {
        let body = encode_batch(&[
            BatchEntry {
                flag: 0,
                body: b"one",
                properties: b"",
            },
            BatchEntry {
                flag: 0,
                body: b"two",
                properties: b"K\x01v",
            },
        ])
        .expect("batch");
        let mut log = MemLog::default();
        let buf = send(SEND_BATCH_MESSAGE, SERIALIZE_JSON, 1, "T", "0", "", &body);
        let (resp, _) = run(&buf, &mut log);
        let ids = field(&resp[0], "msgId").expect("ids");
        assert_eq!(ids.split(',').count(), 2);
        assert_eq!(field(&resp[0], "transactionId"), None);
        assert_eq!(log.stored.len(), 2);
        // a batch's messages keep their own properties only: RocketMQ 5's batch encoder
        // (MessageExtEncoder.encode(MessageExtBatch)) writes each message's own properties
        assert_eq!(log.stored[0].3, b"".to_vec());
        assert_eq!(log.stored[1].3, b"K\x01v".to_vec());
    }

    #[test]
    fn refusals_carry_the_python_handlers_codes_and_remarks() {
        // Two bodies each under the limit (64) whose batch is over it: RocketMQ refuses it.
        let big = encode_batch(&[
            BatchEntry {
                flag: 0,
                body: &[1; 40],
                properties: b"",
            },
            BatchEntry {
                flag: 0,
                body: &[2; 40],
                properties: b"",
            },
        ])
        .expect("batch");
        let too_big = format!(
            "the batch of {} bytes is over the max message size, MAX: 64",
            big.len()
        );
        let cases: [(Vec<u8>, i32, &str); 5] = [
            (
                send(SEND_BATCH_MESSAGE, SERIALIZE_JSON, 1, "T", "0", "", &big),
                MESSAGE_ILLEGAL,
                &too_big,
            ),
            (
                send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "RO", "0", "", b"x"),
                NO_PERMISSION,
                "the topic[RO] sending message is forbidden",
            ),
            (
                send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", "4", "", b"x"),
                INVALID_PARAMETER,
                "request queueId[4] is illegal, topic T has 4 write and 4 read queues",
            ),
            (
                send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", "0", "", &[0; 65]),
                MESSAGE_ILLEGAL,
                "the message body size over max value, MAX: 64",
            ),
            (
                send(SEND_BATCH_MESSAGE, SERIALIZE_JSON, 1, "T", "0", "", b""),
                MESSAGE_ILLEGAL,
                "the batch is empty",
            ),
        ];
        for (buf, code, remark) in cases {
            let mut log = MemLog::default();
            let (resp, _) = run(&buf, &mut log);
            assert_eq!(resp[0].code, code);
            assert_eq!(resp[0].remark.as_deref(), Some(remark));
            assert!(log.stored.is_empty());
        }
    }

    #[test]
    fn what_python_must_do_is_handed_back_and_so_is_every_later_send() {
        for (topic, props) in [
            ("Unknown", ""),
            ("T", "DELAY\u{1}3"),
            ("T", "TRAN_MSG\u{1}true"),
            ("T", "TIMER_DELAY_SEC\u{1}3"),
        ] {
            let mut buf = send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, topic, "0", props, b"x");
            buf.extend(send(SEND_MESSAGE_V2, SERIALIZE_JSON, 2, "T", "0", "", b"y"));
            let mut log = MemLog::default();
            let mut state = st();
            let o = process(&buf, 1 << 20, true, &mut state, host(), &mut log).expect("decodes");
            assert_eq!(o.fallback.len(), 2, "{topic} {props:?}");
            assert!(o.responses.is_empty() && log.stored.is_empty());
        }
        // A header field that does not parse: Python names it.
        let f = Frame {
            code: SEND_MESSAGE_V2,
            ext_fields: ext(&[("a", "G"), ("b", "T"), ("c", "X"), ("d", "4"), ("e", "x")]),
            ..Frame::default()
        };
        let buf = encode_frames([&f]).expect("encodes");
        let mut log = MemLog::default();
        let mut state = st();
        let o = process(&buf, 1 << 20, true, &mut state, host(), &mut log).expect("decodes");
        assert_eq!(o.fallback.len(), 1);
        // Disabled: everything goes back.
        let buf = send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", "0", "", b"x");
        let o = process(&buf, 1 << 20, false, &mut state, host(), &mut log).expect("decodes");
        assert_eq!(o.fallback.len(), 1);
        assert!(log.stored.is_empty());
    }

    #[test]
    fn a_failed_append_hands_every_stored_send_back() {
        let mut buf = send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", "0", "", b"x");
        buf.extend(send(SEND_MESSAGE_V2, SERIALIZE_JSON, 2, "T", "9", "", b"y"));
        let mut log = MemLog {
            fail: true,
            ..MemLog::default()
        };
        let mut state = st();
        let o = process(&buf, 1 << 20, true, &mut state, host(), &mut log).expect("decodes");
        assert_eq!(o.fallback.len(), 1, "the stored one goes back");
        let (resp, _) = decode_frames(&o.responses).expect("decodes");
        assert_eq!(resp.len(), 1, "the refused one is answered");
        assert_eq!(resp[0].opaque, 2);
    }

    #[test]
    fn oneway_sends_are_stored_unanswered_and_counted() {
        let mut buf = send(SEND_MESSAGE_V2, SERIALIZE_JSON, 1, "T", "0", "", b"x");
        let (mut frames, _) = decode_frames(&buf).expect("decodes");
        frames[0].flag = FLAG_ONEWAY;
        buf = encode_frames(frames.iter()).expect("encodes");
        let mut log = MemLog::default();
        let mut state = st();
        let o = process(&buf, 1 << 20, true, &mut state, host(), &mut log).expect("decodes");
        assert!(o.responses.is_empty());
        assert_eq!(log.stored.len(), 1);
        assert_eq!(o.answered, vec![(SEND_MESSAGE_V2, SUCCESS, 1)]);
        assert_eq!(o.topics[0].1.buckets, vec![1, 0, 0]);
        assert_eq!(o.touched, vec![("T".to_owned(), 0)]);
    }

    #[test]
    fn with_defer_stored_sends_wait_and_refusals_do_not() {
        let mut buf = send(
            SEND_MESSAGE_V2,
            SERIALIZE_JSON,
            1,
            "T",
            "0",
            "WAIT\u{1}False",
            b"x",
        );
        buf.extend(send(
            SEND_MESSAGE_V2,
            SERIALIZE_ROCKETMQ,
            2,
            "T",
            "1",
            "",
            b"yy",
        ));
        buf.extend(send(SEND_MESSAGE_V2, SERIALIZE_JSON, 3, "T", "9", "", b"z"));
        let mut log = MemLog::default();
        let mut state = SendState {
            defer: true,
            ..st()
        };
        let o = process(&buf, 1 << 20, true, &mut state, host(), &mut log).expect("decodes");
        assert_eq!(log.stored.len(), 2);
        let (resp, _) = decode_frames(&o.responses).expect("decodes");
        assert_eq!(resp.len(), 1, "only the refusal is answered at once");
        assert_eq!(resp[0].opaque, 3);
        assert_eq!(o.answered, vec![(SEND_MESSAGE_V2, INVALID_PARAMETER, 1)]);
        let d: Vec<(i32, u8, u64, bool)> = o
            .deferred
            .iter()
            .map(|d| (d.response.opaque, d.response.ser_type, d.end_offset, d.wait))
            .collect();
        assert_eq!(d, vec![(1, 0, 101, false), (2, 1, 101 + 102, true)]);
        assert_eq!(last(d_ext(&o.deferred[1]), "queueId"), Some("1"));
    }

    fn d_ext(d: &Deferred) -> &[(String, String)] {
        d.response.ext_fields.as_deref().unwrap_or(&[])
    }

    #[test]
    fn with_property_replaces_or_appends_one_pair() {
        assert_eq!(
            with_property(b"", "CLUSTER", "C"),
            b"CLUSTER\x01C\x02".to_vec()
        );
        assert_eq!(
            with_property(b"K\x01v", "CLUSTER", "C"),
            b"K\x01v\x02CLUSTER\x01C\x02".to_vec()
        );
        assert_eq!(
            with_property(b"CLUSTER\x01old\x02K\x01v\x02", "CLUSTER", "C"),
            b"K\x01v\x02CLUSTER\x01C\x02".to_vec()
        );
        // a key that only ends like CLUSTER, or holds it in its value, is another property
        assert_eq!(
            with_property(b"XCLUSTER\x01a\x02K\x01CLUSTER\x02", "CLUSTER", "C"),
            b"XCLUSTER\x01a\x02K\x01CLUSTER\x02CLUSTER\x01C\x02".to_vec()
        );
        // the broker's stamp: a client-sent MSG_REGION is replaced, the rest kept
        assert_eq!(
            stamp(b"MSG_REGION\x01x\x02K\x01v\x02", ""),
            b"K\x01v\x02MSG_REGION\x01DefaultRegion\x02TRACE_ON\x01true\x02".to_vec()
        );
    }

    #[test]
    fn the_wait_property_is_read_as_python_reads_it() {
        assert!(wants_wait(b""));
        assert!(wants_wait(b"K\x01false"));
        assert!(!wants_wait(b"WAIT\x01FALSE"));
        assert!(wants_wait(b"WAIT\x01false\x02WAIT\x01true"));
        assert!(!wants_wait(b"A\x01b\x02WAIT\x01false\x02"));
    }

    #[test]
    fn offset_message_ids_match_rocketmqs_layout() {
        let mut s = String::new();
        offset_msg_id("::1".parse().expect("ip"), 1, 2, &mut s);
        assert_eq!(s, format!("{}{:08X}{:016X}", "0".repeat(31) + "1", 1, 2));
    }

    #[test]
    fn uniq_key_must_start_a_property() {
        assert_eq!(uniq_key(b"UNIQ_KEY\x01a\x02"), Some("a".into()));
        assert_eq!(uniq_key(b"K\x01v\x02UNIQ_KEY\x01b"), Some("b".into()));
        assert_eq!(uniq_key(b"XUNIQ_KEY\x01a"), None);
        assert_eq!(uniq_key(b"UNIQ_KEY\x01\x02"), None);
    }

    /// One request of the kinds the native path answers itself (none is handed back, so the
    /// answers cannot depend on how the buffer is split), or a non-send frame.
    fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
        (
            0..8u8,
            any::<bool>(),
            0..5i32,
            proptest::collection::vec(any::<u8>(), 0..80),
        )
            .prop_map(|(kind, binary, q, body)| {
                let ser = if binary {
                    SERIALIZE_ROCKETMQ
                } else {
                    SERIALIZE_JSON
                };
                let q = q.to_string();
                match kind {
                    0 => send(SEND_MESSAGE, ser, 1, "T", &q, "UNIQ_KEY\u{1}u", &body),
                    1 | 2 => send(SEND_MESSAGE_V2, ser, 2, "T", &q, "", &body),
                    3 => send(SEND_MESSAGE_V2, ser, 3, "RO", &q, "", &body),
                    4 => send(SEND_MESSAGE_V2, ser, 4, "T", "-1", "", &body),
                    5 => {
                        let b = encode_batch(&[BatchEntry {
                            flag: 1,
                            body: &body,
                            properties: b"",
                        }])
                        .expect("batch");
                        send(SEND_BATCH_MESSAGE, ser, 5, "T", &q, "", &b)
                    }
                    _ => encode_frames([&Frame {
                        code: 34,
                        opaque: 6,
                        ser_type: ser,
                        ..Frame::default()
                    }])
                    .expect("encodes"),
                }
            })
    }

    proptest! {
        #[test]
        fn a_buffer_split_anywhere_answers_as_a_whole(
            frames in proptest::collection::vec(arb_frame(), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let buf: Vec<u8> = frames.concat();
            let mut whole_log = MemLog::default();
            let mut state = st();
            let whole = process(&buf, 1 << 20, true, &mut state, host(),
                                &mut whole_log).expect("decodes");
            prop_assert_eq!(whole.consumed, buf.len());
            let at = cut.index(buf.len() + 1);
            let mut log = MemLog::default();
            let mut state = st();
            let first = process(&buf[..at], 1 << 20, true, &mut state, host(),
                                &mut log).expect("decodes");
            let rest = buf[first.consumed..].to_vec();
            let second = process(&rest, 1 << 20, true, &mut state, host(),
                                 &mut log).expect("decodes");
            prop_assert_eq!(first.consumed + second.consumed, buf.len());
            let mut responses = first.responses.clone();
            responses.extend_from_slice(&second.responses);
            prop_assert_eq!(responses, whole.responses);
            prop_assert_eq!(log.stored, whole_log.stored);
            let fb: Vec<Frame<'static>> = first.fallback.into_iter()
                .chain(second.fallback).map(Frame::into_owned).collect();
            let wfb: Vec<Frame<'static>> =
                whole.fallback.into_iter().map(Frame::into_owned).collect();
            prop_assert_eq!(fb, wfb);
        }
    }
}
