//! Fuzz bodies for [`rmq_wire::message::decode_record`], shared by the libFuzzer targets in
//! `fuzz_targets/` (nightly, `cargo fuzz run <target> --features fuzz`) and the stable `replay`
//! binary, which runs the same bodies over seed records and deterministic mutations of them.
//!
//! The remoting codecs have their own bodies, seeds and mutators in [`frames`]
//! (`decode_frames` target) and [`batch`] (`decode_batch` target), and so do the HA replication
//! stream decoders in [`ha`] (`decode_ha` target), run by the generic loop in [`driver`]; this
//! file's docs below are about the record targets.
//!
//! The bodies panic on a broken invariant: that is how a fuzzer sees a failure.
//!
//! Decoders: `decode_record_structure` ⊇ `decode_record` ⊇ `decode_record_checked(_, true)` in
//! what they accept, and where two accept they return the same thing; where the structural one
//! rejects, all reject with the same error.
//!
//! Round trip: a decoded record is re-encoded from the view's fields (`MessageIn` +
//! `StoreStamp`) and must give back exactly the bytes it was decoded from: with `encode_record`
//! and the properties as stored, and, when the record ends with a valid whole-record CRC
//! trailer, also with `encode_record_with_crc` and the properties before the trailer.
//!
//! SYSFLAG: `encode_record` recomputes the host-family bits (0x10, 0x20) from the addresses. The
//! decoder chose each address's family from those very bits, so for a decoded record that
//! normalisation is the identity: SYSFLAG is compared byte for byte like every other field, and
//! [`check_record`] asserts the identity first so a regression names the cause.
//!
//! Two spellings the decoder accepts but the encoder never writes are allowed (they fail with
//! the `strict-spelling` or `strict` feature):
//! - topic-length width: the encoder writes V2 (2-byte length) iff the topic is longer than 127
//!   bytes; the decoder takes V2 with any topic and V1 with a topic of up to 255 bytes (RocketMQ
//!   reads V1's length as a signed byte, so it would reject 128..=255). Such a record
//!   re-encodes with the other magic, one byte shorter or longer; every other byte must match
//!   (but the whole-record CRC digits, which cover the header), and the re-encoding must itself
//!   round-trip exactly.
//! - empty topic: decoded, but `encode_record` refuses it with `EmptyTopic`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

pub mod batch;
pub mod driver;
pub mod frames;
pub mod ha;
pub mod send;

use rmq_wire::message::{
    body_crc, decode_record, decode_record_checked, decode_record_structure, encode_blank,
    encode_record, encode_record_with_crc, peek_header, DecodeError, Decoded, EncodeError,
    MessageIn, RecordView, StoreStamp, BLANK_HEADER_LEN, BLANK_MAGIC, MAGIC_V1, MAGIC_V2,
    MAX_RECORD_LEN, MIN_RECORD_LEN, OFF_BODY_CRC, OFF_BORN_HOST, OFF_SYS_FLAG, OFF_TOTAL_SIZE,
    RECORD_CRC_KEY, RECORD_CRC_TRAILER_LEN, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6,
};

const HOST_BITS: i32 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6;
/// The ten CRC digits and the closing separator end the record.
const DIGITS_FROM_END: usize = 11;

/// What [`check_decode_record`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A record that re-encodes byte for byte; `record_crc`: it carries a valid whole-record
    /// CRC trailer (what the store requires).
    Record { record_crc: bool },
    /// A record in one of the allowed non-canonical spellings (see the crate docs).
    NonCanonical,
    /// An end-of-segment filler.
    Blank,
    /// Rejected by the decoder.
    Error,
}

fn topic_len_width(magic: u32) -> usize {
    if magic == MAGIC_V2 {
        2
    } else {
        1
    }
}

/// Offset of the topic-length field, counted back from the end of the record.
fn topic_len_offset(r: &RecordView<'_>) -> usize {
    r.total_size() - (topic_len_width(r.magic) + r.topic.len() + 2 + r.properties.len())
}

/// The encoder's inputs that reproduce a decoded record.
pub fn message_of<'a>(r: &RecordView<'a>) -> (MessageIn<'a>, StoreStamp) {
    (
        MessageIn {
            topic: r.topic,
            queue_id: r.queue_id,
            flag: r.flag,
            sys_flag: r.sys_flag,
            body: r.body,
            properties: r.properties,
            born_timestamp: r.born_timestamp,
            born_host: r.born_host,
            reconsume_times: r.reconsume_times,
            prepared_txn_offset: r.prepared_txn_offset,
        },
        StoreStamp {
            queue_offset: r.queue_offset,
            physical_offset: r.physical_offset,
            store_timestamp: r.store_timestamp,
            store_host: r.store_host,
        },
    )
}

fn allowed(what: &str) -> Outcome {
    if cfg!(feature = "strict-spelling") {
        panic!("strict: the decoder accepted {what}, which encode_record never writes");
    }
    Outcome::NonCanonical
}

/// Fuzz body of the `decode_record` target: decode `data` with the three decoders, check how
/// their answers relate and every invariant of the result.
pub fn check_decode_record(data: &[u8]) -> Outcome {
    let structural = decode_record_structure(data);
    let plain = decode_record(data);
    let required = decode_record_checked(data, true);
    match &structural {
        Err(_) => {
            assert_eq!(
                plain, structural,
                "decode_record and the structural decode disagree"
            );
            assert_eq!(
                required, structural,
                "the checked and structural decodes disagree"
            );
        }
        Ok(Decoded::Blank(_)) => {
            assert_eq!(plain, structural, "a filler decoded differently");
            assert_eq!(required, structural, "a filler decoded differently");
        }
        Ok(Decoded::Record(sv)) => {
            match &plain {
                Ok(_) => assert_eq!(
                    plain, structural,
                    "decode_record and the structural decode disagree"
                ),
                Err(e) => {
                    assert!(
                        matches!(
                            e,
                            DecodeError::CrcMismatch { .. } | DecodeError::Inconsistent(_)
                        ),
                        "the structural decode accepted what decode_record rejects as {e}"
                    );
                    check_structure(sv);
                }
            }
            if required.is_ok() {
                assert_eq!(
                    required, plain,
                    "the checked decode and decode_record disagree"
                );
            }
        }
    }
    match plain {
        Err(_) => Outcome::Error,
        Ok(Decoded::Blank(n)) => {
            assert_eq!(n, data.len(), "a filler must cover the rest of the buffer");
            assert!(n >= BLANK_HEADER_LEN, "filler shorter than its header");
            assert_eq!(peek_header(data), Ok((n as i64, BLANK_MAGIC)));
            Outcome::Blank
        }
        Ok(Decoded::Record(r)) => check_record(data, &r, required.is_ok()),
    }
}

/// A record only the structural decode accepted (a CRC is wrong): every byte but the body CRC
/// must still come back from `encode_record`, so the structure checks alone are sound.
fn check_structure(r: &RecordView<'_>) {
    let canonical = (r.magic == MAGIC_V2) == (r.topic.len() > 127);
    if !canonical || r.topic.is_empty() {
        return; // the allowed spellings; decode_record's path checks them
    }
    let (msg, stamp) = message_of(r);
    let mut buf = Vec::new();
    match encode_record(&msg, &stamp, &mut buf) {
        Ok(_) => {
            assert_eq!(
                buf.len(),
                r.total_size(),
                "structural re-encoding length differs"
            );
            assert_eq!(buf[..OFF_BODY_CRC], r.raw[..OFF_BODY_CRC]);
            assert_eq!(
                buf[OFF_BODY_CRC + 4..],
                r.raw[OFF_BODY_CRC + 4..],
                "a structurally decoded record does not re-encode"
            );
        }
        Err(e) => panic!("a structurally decoded record does not re-encode: {e}"),
    }
}

/// The store's write path, forward: `encode_record_with_crc` stamps any message that decoded
/// (its properties as they are) with a record CRC, and `decode_record_checked(_, true)` must
/// accept the result with the same fields. Properties that do not end with the 0x02 separator
/// get one before the trailer (this harness found the bug where they did not).
fn check_stamped(msg: &MessageIn<'_>, stamp: &StoreStamp) {
    let mut buf = Vec::new();
    match encode_record_with_crc(msg, stamp, &mut buf) {
        Ok(len) => assert_eq!(
            len,
            buf.len(),
            "encode_record_with_crc returned a wrong length"
        ),
        Err(
            EncodeError::EmptyTopic
            | EncodeError::PropertiesTooLong(_)
            | EncodeError::RecordTooLarge(_),
        ) => return,
        Err(e) => panic!("encode_record_with_crc refused a decodable message: {e}"),
    }
    match decode_record_checked(&buf, true) {
        Ok(Decoded::Record(v)) => {
            let (m2, s2) = message_of(&v);
            assert_eq!(s2, *stamp, "stamp changed through encode_record_with_crc");
            let n = v.properties.len() - RECORD_CRC_TRAILER_LEN;
            let mut expected = msg.properties.to_vec();
            if expected.last().is_some_and(|&b| b != 2) {
                expected.push(2);
            }
            assert_eq!(&v.properties[..n], &expected[..], "properties changed");
            assert_eq!(
                MessageIn {
                    properties: msg.properties,
                    ..m2
                },
                *msg,
                "message changed through encode_record_with_crc"
            );
        }
        other => panic!(
            "encode_record_with_crc wrote a record decode_record_checked(_, true) rejects: \
             {other:?}"
        ),
    }
}

/// Invariants of a record that `decode_record` decoded from the start of `data`, including the
/// re-encoding round trip. `record_crc`: `decode_record_checked(data, true)` accepted it too.
pub fn check_record(data: &[u8], r: &RecordView<'_>, record_crc: bool) -> Outcome {
    let n = r.total_size();
    assert!(
        (MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&n),
        "total size {n} out of bounds"
    );
    assert!(n <= data.len(), "record of {n} bytes from {}", data.len());
    assert_eq!(r.raw, &data[..n], "raw is not the input prefix");
    assert_eq!(peek_header(data), Ok((n as i64, r.magic)));
    assert!(
        r.magic == MAGIC_V1 || r.magic == MAGIC_V2,
        "bad magic served"
    );
    assert_eq!(
        body_crc(r.body),
        r.body_crc,
        "served a body whose CRC does not match"
    );

    // What encode_record does to SYSFLAG; the identity for anything the decoder accepted.
    let mut normalised = r.sys_flag & !HOST_BITS;
    if r.born_host.is_ipv6() {
        normalised |= SYSFLAG_BORNHOST_V6;
    }
    if r.store_host.is_ipv6() {
        normalised |= SYSFLAG_STOREHOST_V6;
    }
    assert_eq!(
        normalised, r.sys_flag,
        "host address families disagree with SYSFLAG"
    );

    let canonical = (r.magic == MAGIC_V2) == (r.topic.len() > 127);
    let (msg, stamp) = message_of(r);
    let mut buf = Vec::new();
    let outcome = match encode_record(&msg, &stamp, &mut buf) {
        Ok(len) => {
            assert_eq!(len, buf.len(), "encode_record returned a wrong length");
            if canonical {
                assert_eq!(buf, r.raw, "re-encoding differs from the decoded bytes");
                Outcome::Record { record_crc }
            } else {
                check_respelled(r, &buf, record_crc);
                allowed("a topic-length width other than the canonical one")
            }
        }
        Err(EncodeError::EmptyTopic) if r.topic.is_empty() => allowed("an empty topic"),
        Err(EncodeError::RecordTooLarge(len)) if !canonical && len == n + 1 => {
            allowed("a V1 record of maximum size whose topic needs V2")
        }
        Err(e) => panic!("a decoded record does not re-encode: {e}"),
    };
    check_stamped(&msg, &stamp);
    if record_crc && outcome == (Outcome::Record { record_crc }) {
        // The store's path: the same record from encode_record_with_crc and the properties
        // before the trailer.
        let props = &r.properties[..r.properties.len() - RECORD_CRC_TRAILER_LEN];
        let msg = MessageIn {
            properties: props,
            ..msg
        };
        buf.clear();
        match encode_record_with_crc(&msg, &stamp, &mut buf) {
            Ok(len) => {
                assert_eq!(
                    len,
                    buf.len(),
                    "encode_record_with_crc returned a wrong length"
                );
                assert_eq!(buf, r.raw, "re-encoding with the record CRC differs");
            }
            Err(e) => panic!("a record with a valid record CRC does not re-encode: {e}"),
        }
    }
    outcome
}

/// `buf` re-encodes the non-canonical record `r`: only TOTALSIZE, MAGIC, the width of the
/// topic-length field and the whole-record CRC digits (if `r` has a trailer) may differ, and
/// `buf` itself must round-trip exactly.
fn check_respelled(r: &RecordView<'_>, buf: &[u8], record_crc: bool) {
    let at = topic_len_offset(r);
    let old_w = topic_len_width(r.magic);
    let new_magic = if r.magic == MAGIC_V1 {
        MAGIC_V2
    } else {
        MAGIC_V1
    };
    let new_w = topic_len_width(new_magic);
    assert_eq!(buf.len(), r.total_size() - old_w + new_w);
    assert_eq!(buf[0..4], (buf.len() as i32).to_be_bytes());
    assert_eq!(buf[4..8], new_magic.to_be_bytes());
    assert_eq!(
        buf[8..at],
        r.raw[8..at],
        "fixed fields, hosts or body differ"
    );
    let tl = r.topic.len();
    if new_w == 2 {
        assert_eq!(buf[at..at + 2], (tl as i16).to_be_bytes());
    } else {
        assert_eq!(buf[at], tl as u8);
    }
    // The trailer's CRC covers the header, so re-encoding leaves stale digits: compare around
    // them, and let the re-encoding with a fresh trailer be checked below.
    let skip = if record_crc { DIGITS_FROM_END } else { 0 };
    let (new_tail, old_tail) = (&buf[at + new_w..], &r.raw[at + old_w..]);
    assert_eq!(
        new_tail[..new_tail.len() - skip],
        old_tail[..old_tail.len() - skip],
        "topic or properties differ"
    );
    assert_eq!(new_tail.last(), old_tail.last());
    if record_crc {
        let props = &r.properties[..r.properties.len() - RECORD_CRC_TRAILER_LEN];
        let (msg, stamp) = message_of(r);
        let msg = MessageIn {
            properties: props,
            ..msg
        };
        let mut fresh = Vec::new();
        match encode_record_with_crc(&msg, &stamp, &mut fresh) {
            Ok(_) => {
                assert_eq!(fresh[..fresh.len() - skip], buf[..buf.len() - skip]);
                assert_eq!(
                    check_decode_record(&fresh),
                    Outcome::Record { record_crc: true },
                    "the canonical re-encoding does not round-trip"
                );
            }
            Err(e) => panic!("a respelled record does not re-encode with its CRC: {e}"),
        }
    } else {
        assert_eq!(
            check_decode_record(buf),
            Outcome::Record { record_crc: false },
            "the canonical re-encoding does not round-trip"
        );
    }
}

/// How a walk over a buffer ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    pub records: usize,
    /// Records whose PHYSICALOFFSET is not their position (recovery stops there; the walk
    /// goes on, to reach more decoder states).
    pub offset_mismatches: usize,
    pub ended_with_blank: bool,
    /// Bytes consumed by records and the filler.
    pub consumed: usize,
}

/// Fuzz body of the `decode_stream` target: walk `data` record after record like the store's
/// recovery and scans do (`decode_record_checked(_, true)`, advance by TOTALSIZE, stop at a
/// filler or an error). Panics if a step does not advance or the walk takes more steps than
/// the buffer can hold records.
pub fn check_decode_stream(data: &[u8]) -> Walk {
    let mut walk = Walk::default();
    let mut pos = 0usize;
    // Every record is at least MIN_RECORD_LEN bytes; one more step ends the walk.
    let max_steps = data.len() / MIN_RECORD_LEN + 1;
    for _ in 0..max_steps {
        let rest = &data[pos..];
        match decode_record_checked(rest, true) {
            Ok(Decoded::Record(r)) => {
                check_record(rest, &r, true);
                if r.physical_offset != pos as i64 {
                    walk.offset_mismatches += 1;
                }
                assert!(r.total_size() > 0, "a record that does not advance");
                pos += r.total_size();
                walk.records += 1;
            }
            Ok(Decoded::Blank(n)) => {
                assert_eq!(n, rest.len(), "a filler must cover the rest of the buffer");
                walk.ended_with_blank = true;
                walk.consumed = pos + n;
                return walk;
            }
            Err(_) => {
                // Recovery tells "end of data" (an all-zero header) from corruption this way.
                let _ = peek_header(rest);
                walk.consumed = pos;
                return walk;
            }
        }
    }
    panic!(
        "the walk did not end within {max_steps} steps over {} bytes",
        data.len()
    );
}

fn v4(a: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)), port)
}

fn v6(a: u8, port: u16) -> SocketAddr {
    SocketAddr::new(
        IpAddr::from([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, a]),
        port,
    )
}

fn message<'a>(
    topic: &'a [u8],
    body: &'a [u8],
    props: &'a [u8],
    born: SocketAddr,
) -> MessageIn<'a> {
    MessageIn {
        topic,
        queue_id: 3,
        flag: 9,
        sys_flag: 0x4,
        body,
        properties: props,
        born_timestamp: 1_700_000_000_000,
        born_host: born,
        reconsume_times: 2,
        prepared_txn_offset: 77,
    }
}

fn stamp(physical_offset: usize, store: SocketAddr) -> StoreStamp {
    StoreStamp {
        queue_offset: 41,
        physical_offset: physical_offset as i64,
        store_timestamp: 1_700_000_000_123,
        store_host: store,
    }
}

/// Rewrites a valid record with another magic and topic (TOTALSIZE and a record-CRC trailer
/// fixed up): forges the non-canonical spellings the encoder refuses to write. `None` if `record` does not decode or
/// the topic does not fit the magic's length field.
pub fn respell(record: &[u8], magic: u32, topic: &[u8]) -> Option<Vec<u8>> {
    let Ok(Decoded::Record(r)) = decode_record(record) else {
        return None;
    };
    let at = topic_len_offset(&r);
    let tail = &r.raw[at + topic_len_width(r.magic) + r.topic.len()..];
    let mut out = Vec::with_capacity(r.total_size() + topic.len() + 2);
    out.extend_from_slice(&r.raw[..at]);
    if magic == MAGIC_V2 {
        out.extend_from_slice(&i16::try_from(topic.len()).ok()?.to_be_bytes());
    } else {
        out.push(u8::try_from(topic.len()).ok()?);
    }
    out.extend_from_slice(topic);
    out.extend_from_slice(tail);
    let total = i32::try_from(out.len()).ok()?;
    out[OFF_TOTAL_SIZE..OFF_TOTAL_SIZE + 4].copy_from_slice(&total.to_be_bytes());
    out[4..8].copy_from_slice(&magic.to_be_bytes());
    repair_crcs(&mut out);
    Some(out)
}

fn be_i32(buf: &[u8], at: usize) -> Option<i32> {
    let b = buf.get(at..at + 4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// If `input` starts with something shaped like a record, rewrites its body CRC and, when its
/// properties end in a whole-record CRC trailer, the trailer's digits, so that a mutant gets
/// past the CRC checks to the ones behind them. Parses only as far as it needs; never panics.
pub fn repair_crcs(input: &mut [u8]) {
    let Ok((size, magic)) = peek_header(input) else {
        return;
    };
    let Ok(n) = usize::try_from(size) else {
        return;
    };
    if (magic != MAGIC_V1 && magic != MAGIC_V2) || n < MIN_RECORD_LEN || n > input.len() {
        return;
    }
    let raw = &mut input[..n];
    let Some(sys_flag) = be_i32(raw, OFF_SYS_FLAG) else {
        return;
    };
    let host = |bit: i32| if sys_flag & bit != 0 { 20 } else { 8 };
    let body_len_at =
        OFF_BORN_HOST + host(SYSFLAG_BORNHOST_V6) + 8 + host(SYSFLAG_STOREHOST_V6) + 4 + 8;
    let Some(body_len) = be_i32(raw, body_len_at).and_then(|l| usize::try_from(l).ok()) else {
        return;
    };
    let Some(body) = raw.get(body_len_at + 4..body_len_at + 4 + body_len) else {
        return;
    };
    let crc = body_crc(body);
    put(raw, OFF_BODY_CRC, &crc.to_be_bytes());
    if n >= MIN_RECORD_LEN + RECORD_CRC_TRAILER_LEN {
        let t = &raw[n - RECORD_CRC_TRAILER_LEN..];
        if t.starts_with(RECORD_CRC_KEY) && t[RECORD_CRC_KEY.len()] == 1 && t[t.len() - 1] == 2 {
            let crc = crc32fast::hash(&raw[..n - DIGITS_FROM_END]);
            put(raw, n - DIGITS_FROM_END, format!("{crc:010}").as_bytes());
        }
    }
}

/// Valid inputs to start from: single records of every host/magic combination, the allowed
/// non-canonical spellings, fillers, and segment-like streams.
pub fn seeds() -> Vec<Vec<u8>> {
    let t127 = vec![b'm'; 127];
    let t128 = vec![b'n'; 128];
    let t200 = vec![b'l'; 200];
    let body1k: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut wrong_flags = message(b"TopicF", b"flags", b"", v4(9, 1));
    wrong_flags.sys_flag = -1; // host bits set although both hosts are IPv4
    let msgs: Vec<(MessageIn<'_>, SocketAddr)> = vec![
        (
            message(b"TopicA", b"hello", b"TAGS\x01a\x02", v4(7, 5555)),
            v4(1, 10911),
        ),
        (message(b"T", b"", b"", v6(7, 5555)), v4(1, 10911)),
        (
            message(&t200, &body1k, b"K\x01V\x02", v4(7, 0)),
            v6(1, 10911),
        ),
        (message(b"TopicD", b"x", b"", v6(7, 65535)), v6(1, 10911)),
        (message(&t127, b"edge", b"", v4(7, 1)), v4(1, 2)),
        (message(&t128, b"edge", b"", v4(7, 1)), v4(1, 2)),
        (wrong_flags, v4(1, 3)),
    ];
    // Seeds are tiny and valid; an encoding error would only drop a seed.
    let mut out = Vec::new();
    let mut with_crc = Vec::new();
    let mut stream = Vec::new(); // what the store writes: every record with its record CRC
    for (msg, store) in &msgs {
        let mut one = Vec::new();
        if encode_record(msg, &stamp(0, *store), &mut one).is_ok() {
            out.push(one);
        }
        let mut one = Vec::new();
        if encode_record_with_crc(msg, &stamp(0, *store), &mut one).is_ok() {
            with_crc.push(one);
        }
        let at = stream.len();
        let _ = encode_record_with_crc(msg, &stamp(at, *store), &mut stream);
    }
    let base = out.first().cloned().unwrap_or_default();
    let long = out.get(2).cloned().unwrap_or_default();
    let base_crc = with_crc.first().cloned().unwrap_or_default();
    out.extend(respell(&base, MAGIC_V2, b"TopicA")); // V2 with a short topic
    out.extend(respell(&base_crc, MAGIC_V2, b"TopicA")); // the same with a record CRC
    out.extend(respell(&long, MAGIC_V1, &t200)); // V1 with a 200-byte topic
    out.extend(respell(&base, MAGIC_V1, b"")); // empty topic
    out.append(&mut with_crc);
    for len in [BLANK_HEADER_LEN, 100] {
        let mut b = Vec::new();
        encode_blank(len, &mut b);
        out.push(b);
    }
    let mut with_blank = stream.clone();
    encode_blank(64, &mut with_blank);
    out.push(with_blank);
    let mut with_zeros = stream.clone();
    with_zeros.resize(with_zeros.len() + 64, 0); // unwritten tail: "end of data"
    out.push(with_zeros);
    out.push(stream);
    out
}

/// Deterministic xorshift64* generator.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

const MAX_INPUT: usize = 64 * 1024;

const INTERESTING_I32: [i32; 20] = [
    0,
    1,
    -1,
    8,
    0x10,
    0x20,
    0x30,
    127,
    128,
    255,
    256,
    32767,
    -32768,
    65535,
    65536,
    i32::MAX,
    i32::MIN,
    MIN_RECORD_LEN as i32,
    MAX_RECORD_LEN as i32,
    MAX_RECORD_LEN as i32 + 1,
];

const MAGICS: [u32; 3] = [MAGIC_V1, MAGIC_V2, BLANK_MAGIC];

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if let Some(slot) = buf.get_mut(at + i) {
            *slot = *b;
        }
    }
}

/// Applies 1..=4 random edits to `input`, sometimes splicing in part of `other`; then, half of
/// the time, fixes the CRCs (see [`repair_crcs`]).
pub fn mutate(rng: &mut XorShift, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        // Half the edits land in the fixed header, where the lengths and flags are.
        let at = if rng.below(2) == 0 {
            rng.below(len.min(120))
        } else {
            rng.below(len)
        };
        match rng.below(12) {
            0 => {
                if let Some(b) = input.get_mut(at) {
                    *b ^= 1 << rng.below(8);
                }
            }
            1 => {
                if let Some(b) = input.get_mut(at) {
                    *b = rng.next_u64() as u8;
                }
            }
            2 => {
                let v = INTERESTING_I32[rng.below(INTERESTING_I32.len())];
                put(input, at & !3, &v.to_be_bytes());
            }
            3 => {
                let v = INTERESTING_I32[rng.below(INTERESTING_I32.len())];
                put(input, at, &(v as i16).to_be_bytes());
            }
            4 => {
                // A field relative to the record: TOTALSIZE = what is left from `at`.
                let v = (len - at.min(len)) as i32 + rng.below(3) as i32 - 1;
                put(input, at, &v.to_be_bytes());
            }
            5 => {
                let m = MAGICS[rng.below(MAGICS.len())];
                put(input, at, &m.to_be_bytes());
            }
            6 => {
                let v = INTERESTING_I32[rng.below(9)];
                put(input, OFF_SYS_FLAG, &v.to_be_bytes());
            }
            7 => {
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                let at = at.min(len);
                input.splice(at..at, bytes);
            }
            8 => {
                let end = (at + 1 + rng.below(32)).min(len);
                if at < end {
                    input.drain(at..end);
                }
            }
            9 => input.truncate(rng.below(len + 1)),
            10 => {
                let from = rng.below(other.len());
                input.truncate(at.min(len));
                input.extend_from_slice(&other[from.min(other.len())..]);
            }
            _ => {
                // Make TOTALSIZE cover the whole input.
                let v = len as i32;
                put(input, OFF_TOTAL_SIZE, &v.to_be_bytes());
            }
        }
    }
    input.truncate(MAX_INPUT);
    if rng.below(2) == 0 {
        repair_crcs(input);
    }
}

/// Counts from [`replay`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub execs: u64,
    pub records: u64,
    /// Of `records`, those with a valid whole-record CRC trailer.
    pub records_with_crc: u64,
    pub non_canonical: u64,
    pub blanks: u64,
    pub errors: u64,
    /// Records seen by the stream walks (beyond the first of each input).
    pub stream_records: u64,
    pub elapsed: Duration,
}

/// An input on which a fuzz body panicked.
#[derive(Debug, Clone)]
pub struct Crash {
    pub input: Vec<u8>,
    pub message: String,
}

/// Runs both fuzz bodies on `input`, turning a panic into a [`Crash`].
pub fn run_one(input: &[u8], stats: &mut Stats) -> Result<(Outcome, Walk), Crash> {
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        (check_decode_record(input), check_decode_stream(input))
    }));
    match result {
        Ok((outcome, walk)) => {
            stats.execs += 1;
            match outcome {
                Outcome::Record { record_crc } => {
                    stats.records += 1;
                    stats.records_with_crc += u64::from(record_crc);
                }
                Outcome::NonCanonical => stats.non_canonical += 1,
                Outcome::Blank => stats.blanks += 1,
                Outcome::Error => stats.errors += 1,
            }
            stats.stream_records += walk.records.saturating_sub(1) as u64;
            Ok((outcome, walk))
        }
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".to_string());
            Err(Crash {
                input: input.to_vec(),
                message,
            })
        }
    }
}

/// Runs the fuzz bodies over [`seeds`], then over mutants of them until `budget` has passed.
/// Mutants that decode to a record (or walk over more than one) join the pool mutated from, so
/// later mutants start deeper in the format. Deterministic for a given `seed`, up to where the
/// time budget cuts it.
pub fn replay(budget: Duration, seed: u64) -> Result<Stats, Crash> {
    const POOL_MAX: usize = 512;
    let start = Instant::now();
    let mut stats = Stats::default();
    let mut pool = seeds();
    for s in &pool {
        if run_one(s, &mut stats)?.0 == Outcome::Error {
            return Err(Crash {
                input: s.clone(),
                message: "a seed (a valid encoding) was rejected by decode_record".to_string(),
            });
        }
    }
    let n_seeds = pool.len();
    let mut rng = XorShift::new(seed);
    let mut input = Vec::with_capacity(MAX_INPUT);
    loop {
        if stats.execs % 1024 == 0 && start.elapsed() >= budget {
            break;
        }
        let base = &pool[rng.below(pool.len())];
        let other = &pool[rng.below(pool.len())];
        input.clear();
        input.extend_from_slice(base);
        mutate(&mut rng, &mut input, other);
        let (outcome, walk) = run_one(&input, &mut stats)?;
        let interesting =
            matches!(outcome, Outcome::Record { .. } | Outcome::NonCanonical) || walk.records > 1;
        if interesting && rng.below(8) == 0 {
            if pool.len() < POOL_MAX {
                pool.push(input.clone());
            } else {
                // Keep the seeds; replace a mutant.
                let i = n_seeds + rng.below(POOL_MAX - n_seeds);
                pool[i] = input.clone();
            }
        }
    }
    stats.elapsed = start.elapsed();
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_decode_and_four_are_non_canonical() {
        let mut stats = Stats::default();
        let mut strict_failures = 0;
        for s in seeds() {
            match run_one(&s, &mut stats) {
                Ok((outcome, _)) => assert_ne!(outcome, Outcome::Error),
                Err(c) => {
                    let strict = cfg!(feature = "strict-spelling");
                    assert!(strict, "seed crashed: {}", c.message);
                    strict_failures += 1;
                }
            }
        }
        assert_eq!(stats.non_canonical + strict_failures, 4);
        assert!(stats.records_with_crc >= 7);
    }

    #[test]
    fn the_store_like_stream_walks_to_its_filler() {
        let seeds = seeds();
        let stream = seeds
            .iter()
            .find(|s| s.len() > 200 && peek_header(&s[s.len() - 64..]) == Ok((64, BLANK_MAGIC)))
            .expect("a stream seed ending with a filler");
        let walk = check_decode_stream(stream);
        assert_eq!(walk.records, 7);
        assert_eq!(walk.offset_mismatches, 0);
        assert_eq!(walk.consumed, stream.len());
    }

    #[test]
    fn mutation_is_deterministic() {
        let seeds = seeds();
        let mut a = XorShift::new(7);
        let mut b = XorShift::new(7);
        for _ in 0..1000 {
            let (mut x, mut y) = (seeds[0].clone(), seeds[0].clone());
            mutate(&mut a, &mut x, &seeds[1]);
            mutate(&mut b, &mut y, &seeds[1]);
            assert_eq!(x, y);
        }
    }
}
