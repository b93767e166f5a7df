//! Fuzz body of the `send_frames` target: [`rmq_wire::send::process`], the native send path,
//! over a receive buffer (an in-memory log stands in for the store's append).
//!
//! Invariants checked on every input:
//! - **Same frames as the decoder**: `process` fails exactly where `decode_frames` does and
//!   consumes the same bytes; when it fails nothing was appended.
//! - **Accounting**: every decoded frame is handed back or answered natively, never both;
//!   what is handed back is the decoded frames, in order; every native answer is one
//!   well-formed response frame (flag RESPONSE, the request's opaque and serialization),
//!   none for a oneway request; the messages appended are what the per-topic counts say, each
//!   on a queue below the topic's write queue count.
//! - **Split anywhere**: a buffer none of whose sends was handed back gives the same
//!   responses and the same appended messages when fed in two pieces (cut at a point derived
//!   from the input).

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;

use rmq_wire::batch::{encode_batch, BatchEntry};
use rmq_wire::message::MessageIn;
use rmq_wire::remoting::{
    decode_frames, encode_frames, Frame, FLAG_ONEWAY, FLAG_RESPONSE, SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
};
use rmq_wire::send::{
    process, Appender, Placed, SendConfig, SendState, TopicEntry, SEND_BATCH_MESSAGE, SEND_MESSAGE,
    SEND_MESSAGE_V2,
};

use crate::driver::{Target, Verdict};
use crate::XorShift;

/// (topic, queue id, body) of an appended message.
type Stored = (Vec<u8>, i32, Vec<u8>);

#[derive(Default)]
struct MemLog {
    end: u64,
    queues: HashMap<(Vec<u8>, i32), i64>,
    stored: Vec<Stored>,
}

impl Appender for MemLog {
    fn append(&mut self, msgs: &[MessageIn<'_>]) -> Result<Vec<Placed>, String> {
        let mut out = Vec::with_capacity(msgs.len());
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
            self.stored
                .push((m.topic.to_vec(), m.queue_id, m.body.to_vec()));
        }
        Ok(out)
    }
}

fn state() -> SendState {
    let mut table = HashMap::new();
    for (name, n, perm) in [("Topic", 4, 6), ("T", 2, 6), ("RO", 2, 4), ("None", 0, 6)] {
        table.insert(
            name.to_owned(),
            TopicEntry {
                write_queue_nums: n,
                read_queue_nums: n,
                perm,
            },
        );
    }
    SendState {
        table,
        cfg: SendConfig {
            max_message_size: 512,
            store_ip: [127, 0, 0, 1].into(),
            store_port: 10911,
            size_buckets: vec![16, 256],
            cluster: "DefaultCluster".to_owned(),
        },
        rng: 7,
        defer: false,
    }
}

fn host() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 40000))
}

fn is_send(f: &Frame<'_>) -> bool {
    f.flag & FLAG_RESPONSE == 0
        && matches!(f.code, SEND_MESSAGE | SEND_MESSAGE_V2 | SEND_BATCH_MESSAGE)
}

/// The fuzz body.
pub fn check_send_frames(data: &[u8]) -> Verdict {
    let decoded = decode_frames(data);
    let mut log = MemLog::default();
    let mut st = state();
    let got = process(
        data,
        rmq_wire::remoting::MAX_FRAME_LEN,
        true,
        &mut st,
        host(),
        &mut log,
    );
    let o = match (got, &decoded) {
        (Err(e), Err(d)) => {
            assert_eq!(&e, d, "process failed otherwise than decode_frames");
            assert!(log.stored.is_empty(), "appended from a buffer that failed");
            return Verdict::default();
        }
        (Ok(o), Ok((frames, consumed))) => {
            assert_eq!(
                o.consumed, *consumed,
                "consumed other bytes than decode_frames"
            );
            let _ = frames;
            o
        }
        (Ok(_), Err(d)) => panic!("process accepted what decode_frames rejects: {d}"),
        (Err(e), Ok(_)) => panic!("process rejected what decode_frames accepts: {e}"),
    };
    let Ok((frames, _)) = decoded else {
        unreachable!("checked above")
    };

    // Handed back: a subsequence of the frames, in order.
    let mut it = frames.iter();
    for f in &o.fallback {
        assert!(
            it.any(|g| g == f),
            "a handed-back frame is not one of the input's, in order"
        );
    }
    let answered: u64 = o.answered.iter().map(|a| a.2).sum();
    assert_eq!(
        o.fallback.len() as u64 + answered,
        frames.len() as u64,
        "a frame was lost or answered twice"
    );
    let (responses, used) = decode_frames(&o.responses).expect("native responses decode");
    assert_eq!(used, o.responses.len(), "a partial response");
    let native: Vec<&Frame<'_>> = {
        // The natively answered requests: the input minus what was handed back (in order).
        let mut back = o.fallback.iter().peekable();
        frames
            .iter()
            .filter(|f| {
                if back.peek() == Some(f) {
                    back.next();
                    false
                } else {
                    true
                }
            })
            .collect()
    };
    assert!(
        native.iter().all(|f| is_send(f)),
        "answered a frame that is no send"
    );
    let expect: Vec<&&Frame<'_>> = native
        .iter()
        .filter(|f| f.flag & FLAG_ONEWAY == 0)
        .collect();
    assert_eq!(
        responses.len(),
        expect.len(),
        "one response per two-way request"
    );
    for (r, q) in responses.iter().zip(expect) {
        assert_eq!(r.flag, FLAG_RESPONSE);
        assert_eq!((r.opaque, r.ser_type), (q.opaque, q.ser_type));
    }
    let counted: u64 = o.topics.iter().map(|(_, s)| s.messages).sum();
    assert_eq!(
        counted,
        log.stored.len() as u64,
        "counts disagree with the appends"
    );
    for (topic, q, body) in &log.stored {
        let t = std::str::from_utf8(topic).expect("a table topic");
        let e = st.table.get(t).expect("stored to a topic of the table");
        assert!(
            *q >= 0 && *q < e.write_queue_nums,
            "stored to a queue out of range"
        );
        assert!(
            body.len() <= st.cfg.max_message_size,
            "stored an oversized body"
        );
    }

    if !o.fallback.iter().any(is_send) && !data.is_empty() {
        let h = data
            .iter()
            .fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(b as usize));
        let at = h % (data.len() + 1);
        let mut log2 = MemLog::default();
        let mut st2 = state();
        let first = process(&data[..at], 1 << 24, true, &mut st2, host(), &mut log2)
            .expect("a prefix of a good buffer decodes");
        let rest = data[first.consumed..].to_vec();
        let second = process(&rest, 1 << 24, true, &mut st2, host(), &mut log2)
            .expect("the rest of a good buffer decodes");
        let mut both = first.responses.clone();
        both.extend_from_slice(&second.responses);
        assert_eq!(both, o.responses, "split feeding answered otherwise");
        assert_eq!(log2.stored, log.stored, "split feeding stored otherwise");
    }
    Verdict {
        accepted: true,
        items: frames.len(),
        interesting: answered > 0 || !o.fallback.is_empty(),
    }
}

fn send_frame(
    code: i32,
    ser: u8,
    opaque: i32,
    topic: &str,
    queue: &str,
    props: &str,
    body: &[u8],
) -> Frame<'static> {
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
    Frame {
        code,
        language: 0,
        version: 479,
        opaque,
        flag: 0,
        remark: None,
        ext_fields: Some(
            keys.iter()
                .zip(vals)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        body: (!body.is_empty()).then(|| Cow::Owned(body.to_vec())),
        ser_type: ser,
    }
}

/// Buffers of sends the native path answers, refuses and hands back, in both serializations.
pub fn seeds() -> Vec<Vec<u8>> {
    let batch = encode_batch(&[
        BatchEntry {
            flag: 0,
            body: b"one",
            properties: b"KEYS\x01k\x02",
        },
        BatchEntry {
            flag: 1,
            body: b"two",
            properties: b"",
        },
    ])
    .unwrap_or_default();
    let mut out = Vec::new();
    for ser in [SERIALIZE_JSON, SERIALIZE_ROCKETMQ] {
        let fs = [
            send_frame(
                SEND_MESSAGE_V2,
                ser,
                1,
                "Topic",
                "1",
                "UNIQ_KEY\u{1}u1\u{2}",
                b"body",
            ),
            send_frame(SEND_MESSAGE, ser, 2, "T", "-1", "TAGS\u{1}a", b"x"),
            send_frame(SEND_BATCH_MESSAGE, ser, 3, "Topic", "0", "", &batch),
            send_frame(SEND_MESSAGE_V2, ser, 4, "RO", "0", "", b"x"),
            send_frame(SEND_MESSAGE_V2, ser, 5, "T", "7", "", b"x"),
            send_frame(SEND_MESSAGE_V2, ser, 6, "Topic", "0", "", &[b'z'; 600]),
            send_frame(SEND_MESSAGE_V2, ser, 7, "Unknown", "0", "", b"x"),
            send_frame(SEND_MESSAGE_V2, ser, 8, "T", "0", "DELAY\u{1}3", b"x"),
        ];
        for f in &fs {
            if let Ok(b) = encode_frames([f]) {
                out.push(b);
            }
        }
        if let Ok(b) = encode_frames(fs.iter()) {
            out.push(b);
        }
    }
    out
}

/// The frame mutator: edits land in headers (values, names), bodies, frame order.
pub fn mutate(rng: &mut XorShift, input: &mut Vec<u8>, other: &[u8]) {
    crate::frames::mutate(rng, input, other);
}

/// The `send_frames` target for [`crate::driver::replay_target`].
pub const TARGET: Target = Target {
    name: "send_frames",
    seeds,
    check: check_send_frames,
    mutate,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_accepted_and_answered() {
        for s in seeds() {
            assert!(check_send_frames(&s).accepted);
        }
    }

    #[test]
    fn a_short_replay_finds_nothing() {
        let stats = crate::driver::replay_target(&TARGET, std::time::Duration::from_millis(300), 1)
            .map_err(|c| c.message);
        let stats = stats.expect("no crash");
        assert!(stats.accepted > 0);
    }
}
