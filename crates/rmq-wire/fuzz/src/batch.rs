//! Fuzz body of the `decode_batch` target: [`rmq_wire::batch::decode_batch`] over a
//! SEND_BATCH_MESSAGE body.
//!
//! Invariants: accepted entries cover the whole input, back to back, each TOTALSIZE bytes;
//! re-encoding them gives the input byte for byte except MAGICCODE and BODYCRC (we write 0 and
//! the real CRC; the input may carry anything for the magic and 0 for the CRC), and the
//! re-encoding decodes to the same entries. A rejected input fails again from the entry the
//! error names.

use rmq_wire::batch::{decode_batch, encode_batch, entry_len, BatchEntry, BatchError};
use rmq_wire::message::body_crc;

use crate::driver::{mutate_bytes, put, Target, Verdict};
use crate::XorShift;

const MAX_INPUT: usize = 64 * 1024;

/// (offset, index) of the entry a decode error names.
fn error_at(e: &BatchError) -> Option<(usize, usize)> {
    match e {
        BatchError::Truncated { offset, index, .. }
        | BatchError::SizeMismatch { offset, index, .. }
        | BatchError::NegativeLength { offset, index, .. }
        | BatchError::CrcMismatch { offset, index, .. } => Some((*offset, *index)),
        BatchError::PropertiesTooLong { .. } | BatchError::EntryTooLarge { .. } => None,
    }
}

/// Fuzz body of the `decode_batch` target.
pub fn check_decode_batch(data: &[u8]) -> Verdict {
    match decode_batch(data) {
        Ok(entries) => {
            let mut pos = 0;
            for e in &entries {
                let n = entry_len(e);
                let total =
                    i32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]);
                assert_eq!(usize::try_from(total).ok(), Some(n), "TOTALSIZE disagrees");
                pos += n;
            }
            assert_eq!(pos, data.len(), "entries do not cover the body");
            let enc = match encode_batch(&entries) {
                Ok(enc) => enc,
                Err(e) => panic!("decoded entries do not re-encode: {e}"),
            };
            assert_eq!(enc.len(), data.len());
            let mut pos = 0;
            for e in &entries {
                let n = entry_len(e);
                let (a, b) = (&enc[pos..pos + n], &data[pos..pos + n]);
                assert_eq!(a[..4], b[..4]);
                assert_eq!(a[12..], b[12..], "an entry re-encodes to other bytes");
                assert_eq!(a[8..12], body_crc(e.body).to_be_bytes());
                pos += n;
            }
            assert_eq!(
                decode_batch(&enc).as_ref(),
                Ok(&entries),
                "re-encoding differs"
            );
            Verdict {
                accepted: true,
                items: entries.len(),
                interesting: entries.len() > 1,
            }
        }
        Err(e) => {
            let (at, index) =
                error_at(&e).unwrap_or_else(|| panic!("a decode error without a position: {e}"));
            assert!(at < data.len(), "error offset {at} outside the input");
            match decode_batch(&data[..at]) {
                Ok(v) => assert_eq!(v.len(), index, "the error names another entry"),
                Err(e2) => panic!("entries before an error at {at} fail: {e2}"),
            }
            let again = decode_batch(&data[at..]);
            assert!(again.is_err(), "the bad entry at {at} decodes alone");
            Verdict::default()
        }
    }
}

/// Valid batch bodies: ours (real CRCs) and Java's (magic 0, CRC 0).
pub fn seeds() -> Vec<Vec<u8>> {
    let big: Vec<u8> = (0..700u32).map(|i| (i * 13) as u8).collect();
    let entries = [
        BatchEntry {
            flag: 0,
            body: b"hello",
            properties: b"KEYS\x01k1\x02TAGS\x01t\x02",
        },
        BatchEntry {
            flag: -1,
            body: b"",
            properties: b"",
        },
        BatchEntry {
            flag: 7,
            body: &big,
            properties: b"UNIQ_KEY\x01ABC\x02",
        },
    ];
    let mut out = Vec::new();
    for n in 1..=entries.len() {
        if let Ok(b) = encode_batch(&entries[..n]) {
            out.push(b);
        }
    }
    if let Some(mut java) = out.last().cloned() {
        // Zero every CRC, as Java clients send.
        let mut pos = 0;
        while let Some(t) = java.get(pos..pos + 4) {
            let n = i32::from_be_bytes([t[0], t[1], t[2], t[3]]) as usize;
            put(&mut java, pos + 8, &[0; 4]);
            pos += n.max(1);
        }
        out.push(java);
    }
    out.push(Vec::new());
    out
}

/// Fixes TOTALSIZE and BODYCRC of every entry whose lengths are sane, so mutants get past
/// those checks.
fn repair(buf: &mut [u8]) {
    let mut pos = 0;
    while let Some(h) = buf.get(pos..pos + 20) {
        let body_len = i32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        let Ok(body_len) = usize::try_from(body_len) else {
            return;
        };
        let Some(p) = buf.get(pos + 20 + body_len..pos + 22 + body_len) else {
            return;
        };
        let Ok(prop_len) = usize::try_from(i16::from_be_bytes([p[0], p[1]])) else {
            return;
        };
        let n = 22 + body_len + prop_len;
        if pos + n > buf.len() {
            return;
        }
        let crc = body_crc(&buf[pos + 20..pos + 20 + body_len]);
        put(buf, pos, &(n as i32).to_be_bytes());
        put(buf, pos + 8, &crc.to_be_bytes());
        pos += n;
    }
}

/// Byte edits, then (usually) [`repair`].
pub fn mutate(rng: &mut XorShift, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..1 + rng.below(3) {
        mutate_bytes(rng, input, other, &[&[0, 0], &[0, 0, 0, 0], &[0xFF, 0xFF]]);
    }
    input.truncate(MAX_INPUT);
    if rng.below(4) != 0 {
        repair(input);
    }
}

/// The `decode_batch` target for [`crate::driver::replay_target`].
pub const TARGET: Target = Target {
    name: "decode_batch",
    seeds,
    check: check_decode_batch,
    mutate,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_accepted() {
        for s in seeds() {
            assert!(check_decode_batch(&s).accepted);
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
