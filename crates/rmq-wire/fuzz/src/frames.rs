//! Fuzz body of the `decode_frames` target: [`rmq_wire::remoting::decode_frames`] over a
//! receive buffer.
//!
//! Invariants checked on every input:
//! - **Accounting**: what decodes covers exactly `consumed` bytes, frame after frame as their
//!   length fields say; the rest is a partial frame (decoding it alone gives nothing); an error
//!   names the offset of a frame boundary, the frames before it decode alone, and the error
//!   reappears when decoding from that offset.
//! - **Incremental feeding**: the same bytes fed in chunks (split at points derived from the
//!   input) give the same frames and the same error at the same absolute offset.
//! - **Round trip**: a ROCKETMQ (binary) frame re-encodes to exactly its input bytes. A JSON
//!   frame re-encodes canonically: the re-encoding decodes to the same frame, and is a fixed
//!   point (JSON has many spellings of one header, so the input bytes may differ).
//! - **Limit**: with a small frame limit nothing larger is returned.

use std::borrow::Cow;

use rmq_wire::remoting::{
    decode_frames, decode_frames_with_limit, encode_frame_into, encode_frames, Frame, FrameError,
    MAX_FRAME_LEN, SERIALIZE_JSON, SERIALIZE_ROCKETMQ,
};

use crate::driver::{mutate_bytes, put, Target, Verdict};
use crate::XorShift;

/// Frame limit of the second decode in [`check_decode_frames`].
const SMALL_LIMIT: usize = 96;
const MAX_INPUT: usize = 64 * 1024;

fn frame_size_at(data: &[u8], at: usize) -> usize {
    let b = &data[at..at + 4];
    i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize + 4
}

/// Decodes `data` fed in chunks ending at `cuts` (ascending): the frames, the bytes left over,
/// and the first error with its absolute offset.
fn feed(data: &[u8], cuts: &[usize]) -> (Vec<Frame<'static>>, usize, Option<FrameError>) {
    let mut acc: Vec<u8> = Vec::new();
    let mut base = 0; // absolute offset of acc[0]
    let mut frames = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&data.len())) {
        let c = c.clamp(last, data.len());
        acc.extend_from_slice(&data[last..c]);
        last = c;
        match decode_frames(&acc) {
            Ok((fs, n)) => {
                frames.extend(fs.into_iter().map(Frame::into_owned));
                acc.drain(..n);
                base += n;
            }
            Err(e) => {
                // The frames before the bad one in this call are not returned: take them
                // from the prefix, as a caller that wants them would.
                if let Ok((fs, _)) = decode_frames(&acc[..e.offset]) {
                    frames.extend(fs.into_iter().map(Frame::into_owned));
                }
                let e = FrameError {
                    offset: base + e.offset,
                    error: e.error,
                };
                return (frames, acc.len(), Some(e));
            }
        }
    }
    (frames, acc.len(), None)
}

fn check_round_trip(f: &Frame<'_>, raw: &[u8]) {
    let mut enc = Vec::new();
    match encode_frame_into(f, &mut enc) {
        Ok(n) => assert_eq!(n, enc.len(), "encode_frame_into returned a wrong size"),
        Err(e) => panic!("a decoded frame does not re-encode: {e}"),
    }
    if f.ser_type == SERIALIZE_ROCKETMQ {
        assert_eq!(enc, raw, "a binary frame does not re-encode to its bytes");
        return;
    }
    assert_eq!(f.ser_type, SERIALIZE_JSON);
    match decode_frames(&enc) {
        Ok((again, n)) => {
            assert_eq!(n, enc.len(), "the re-encoding is not one whole frame");
            assert_eq!(again.len(), 1, "the re-encoding is not one frame");
            assert_eq!(&again[0], f, "a JSON frame changed through re-encoding");
            let mut twice = Vec::new();
            let _ = encode_frame_into(&again[0], &mut twice);
            assert_eq!(twice, enc, "the JSON re-encoding is not a fixed point");
        }
        Err(e) => panic!("the re-encoding of a decoded frame does not decode: {e}"),
    }
}

/// Fuzz body of the `decode_frames` target.
pub fn check_decode_frames(data: &[u8]) -> Verdict {
    let whole = decode_frames(data);
    // The frames before the end or the bad frame, and where they end.
    let (frames, consumed, error) = match &whole {
        Ok((fs, n)) => (fs.clone(), *n, None),
        Err(e) => {
            // The frames before the bad one decode alone, exactly up to it ...
            let fs = match decode_frames(&data[..e.offset]) {
                Ok((fs, n)) => {
                    assert_eq!(n, e.offset, "an error not at a frame boundary");
                    fs
                }
                Err(e2) => panic!("the prefix before an error at {} fails: {e2}", e.offset),
            };
            // ... and the bad one fails alone the same way.
            match decode_frames(&data[e.offset..]) {
                Err(e2) => {
                    assert_eq!(e2.offset, 0);
                    assert_eq!(e2.error, e.error, "the error changed when decoded alone");
                }
                Ok(_) => panic!(
                    "the frame at {} decodes alone but not in the buffer",
                    e.offset
                ),
            }
            (fs, e.offset, Some(e))
        }
    };
    assert!(consumed <= data.len(), "consumed more than the buffer");
    let mut pos = 0;
    for f in &frames {
        let size = frame_size_at(data, pos);
        assert!(size <= MAX_FRAME_LEN, "a frame above the limit");
        check_round_trip(f, &data[pos..pos + size]);
        pos += size;
    }
    assert_eq!(pos, consumed, "frame sizes do not add up to consumed");
    if error.is_none() {
        assert_eq!(
            decode_frames(&data[consumed..]),
            Ok((vec![], 0)),
            "the rest is not a partial frame"
        );
    }

    // Incremental feeding from a few split points derived from the input.
    let n = data.len();
    let h = data
        .iter()
        .fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(b as usize));
    let mut cuts = vec![n / 2, h % (n + 1), (h / 7) % (n + 1), n / 3];
    cuts.sort_unstable();
    let (got, left, err) = feed(data, &cuts);
    let owned: Vec<Frame<'static>> = frames.iter().cloned().map(Frame::into_owned).collect();
    assert_eq!(got, owned, "incremental feeding decoded other frames");
    assert_eq!(err.as_ref(), error, "incremental feeding failed otherwise");
    if error.is_none() {
        assert_eq!(left, n - consumed, "incremental feeding left other bytes");
    }

    // A small limit: nothing larger comes back, and it stops no later than the default.
    match decode_frames_with_limit(data, SMALL_LIMIT) {
        Ok((fs, n)) => {
            let mut pos = 0;
            for _ in &fs {
                let size = frame_size_at(data, pos);
                assert!(size <= SMALL_LIMIT, "a frame above the small limit");
                pos += size;
            }
            assert_eq!(pos, n);
            assert!(n <= consumed, "the small limit decoded more");
        }
        Err(e) => assert!(e.offset <= consumed, "the small limit failed later"),
    }

    let interesting = frames.len() > 1
        || frames
            .iter()
            .any(|f| f.ext_fields.is_some() || f.remark.is_some() || f.body.is_some());
    Verdict {
        accepted: whole.is_ok(),
        items: frames.len(),
        interesting,
    }
}

fn ext(pairs: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn raw_frame(ser: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + header.len() + body.len()) as i32).to_be_bytes());
    v.extend_from_slice(&((u32::from(ser) << 24) | header.len() as u32).to_be_bytes());
    v.extend_from_slice(header);
    v.extend_from_slice(body);
    v
}

/// Valid receive buffers: single frames of both serializations, coalesced writes, lenient JSON
/// spellings, and a buffer ending in a partial frame.
pub fn seeds() -> Vec<Vec<u8>> {
    let route = Frame {
        code: 105,
        version: 479,
        opaque: 7,
        ext_fields: ext(&[("topic", "T")]),
        ..Frame::default()
    };
    let send = Frame {
        code: 310,
        language: 3,
        version: 479,
        opaque: 8,
        ext_fields: ext(&[
            ("a", "group"),
            ("b", "Topic"),
            ("e", "0"),
            ("i", "KEYS\u{1}k\u{2}"),
            ("", ""),
        ]),
        body: Some(Cow::Borrowed(b"hello body")),
        ..Frame::default()
    };
    let resp = Frame {
        code: 17,
        flag: 1,
        opaque: 8,
        remark: Some("topic not exist: \"x\" \\ é \u{7}".into()),
        body: Some(Cow::Borrowed(b"{\"a\":1}")),
        ..Frame::default()
    };
    let oneway = Frame {
        code: -1,
        language: 200,
        version: -2,
        opaque: i32::MIN,
        flag: 2,
        remark: Some(String::new()),
        ..Frame::default()
    };
    let plain = [route, send, resp, oneway];
    let mut out = Vec::new();
    let mut all = Vec::new();
    for ser in [SERIALIZE_JSON, SERIALIZE_ROCKETMQ] {
        for f in &plain {
            let f = Frame {
                ser_type: ser,
                ..f.clone()
            };
            if let Ok(b) = encode_frames([&f]) {
                all.extend_from_slice(&b);
                out.push(b);
            }
        }
    }
    let mut partial = all.clone();
    if let Some(first) = out.first() {
        partial.extend_from_slice(&first[..first.len() / 2]);
    }
    out.push(all);
    out.push(partial);
    for header in [
        &br#"{"code":"105","language":9,"opaque":"7","extFields":{"topic":"T","n":5,"t":true,"z":null}}"#[..],
        br#" { "code" : 1 , "unknown" : [ 1 , { "x" : null } ] , "remark" : 12 , "serializeTypeCurrentRPC" : "JSON" } "#,
        br#"{"code":2,"language":"KLINGON","flag":null,"extFields":{"o":{"p":[1,2]},"\u0041":"\u00e9"}}"#,
        br#"{"code":3,"extFields":{},"remark":null,"version":479}"#,
    ] {
        out.push(raw_frame(SERIALIZE_JSON, header, b"b"));
    }
    out.push(Vec::new());
    out
}

const TOKENS: [&[u8]; 22] = [
    b"\"code\":",
    b"\"extFields\":{",
    b"\"language\":\"GO\"",
    b"\"language\":300",
    b"\"remark\":",
    b"\"opaque\":-2147483649",
    b"null",
    b"true",
    b"1e999",
    b"-0",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"\\",
    b",",
    b":",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\xff",
    b"\xc3\xa9",
];

/// A frame taken apart: (ser_type, header, body).
type RawFrame = (u8, Vec<u8>, Vec<u8>);

/// The frames `buf` starts with (ser_type, header, body) as far as the lengths are sane, and
/// the rest.
fn split(buf: &[u8]) -> (Vec<RawFrame>, Vec<u8>) {
    let mut frames = Vec::new();
    let mut pos = 0;
    while let Some(h) = buf.get(pos..pos + 8) {
        let total = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let word = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let hl = (word & 0xFF_FFFF) as usize;
        let Ok(total) = usize::try_from(total) else {
            break;
        };
        if total < 4 || hl > total - 4 || pos + 4 + total > buf.len() {
            break;
        }
        let header = buf[pos + 8..pos + 8 + hl].to_vec();
        let body = buf[pos + 8 + hl..pos + 4 + total].to_vec();
        frames.push(((word >> 24) as u8, header, body));
        pos += 4 + total;
    }
    (frames, buf[pos..].to_vec())
}

/// Mutates a receive buffer: most edits land inside one frame's header (byte edits and JSON
/// tokens), after which the length fields are usually fixed up so the edit reaches the header
/// parser; some edit the raw buffer, reorder or duplicate frames, or change a serialize type.
pub fn mutate(rng: &mut XorShift, input: &mut Vec<u8>, other: &[u8]) {
    let (mut frames, rest) = split(input);
    if frames.is_empty() || rng.below(5) == 0 {
        for _ in 0..1 + rng.below(3) {
            mutate_bytes(rng, input, other, &TOKENS);
        }
        input.truncate(MAX_INPUT);
        return;
    }
    let i = rng.below(frames.len());
    match rng.below(8) {
        0 => {
            let f = frames[i].clone();
            frames.insert(rng.below(frames.len() + 1), f);
        }
        1 => {
            let j = rng.below(frames.len());
            frames.swap(i, j);
        }
        2 => frames[i].0 = [0, 1, 2, 0xFF][rng.below(4)],
        3 => {
            let body = &mut frames[i].2;
            mutate_bytes(rng, body, other, &[]);
        }
        _ => {
            let header = &mut frames[i].1;
            for _ in 0..1 + rng.below(3) {
                mutate_bytes(rng, header, other, &TOKENS);
            }
        }
    }
    let fix = rng.below(4) != 0;
    let old = std::mem::take(input);
    for (ser, header, body) in &frames {
        let at = input.len();
        input.extend_from_slice(&raw_frame(*ser, header, body));
        if !fix {
            // Keep the original length fields where they were.
            if let Some(orig) = old.get(at..at + 8) {
                put(input, at, orig);
            }
        }
    }
    input.extend_from_slice(&rest);
    input.truncate(MAX_INPUT);
}

/// The `decode_frames` target for [`crate::driver::replay_target`].
pub const TARGET: Target = Target {
    name: "decode_frames",
    seeds,
    check: check_decode_frames,
    mutate,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_accepted() {
        for s in seeds() {
            assert!(check_decode_frames(&s).accepted);
        }
    }

    #[test]
    fn a_short_replay_finds_nothing() {
        let stats = crate::driver::replay_target(&TARGET, std::time::Duration::from_millis(300), 1)
            .map_err(|c| c.message);
        let stats = stats.expect("no crash");
        assert!(stats.accepted > 0 && stats.rejected > 0);
    }
}
