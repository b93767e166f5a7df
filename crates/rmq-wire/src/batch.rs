//! The body of a SEND_BATCH_MESSAGE request (RocketMQ's `MessageDecoder.encodeMessages`):
//! messages back to back, each
//!
//! ```text
//! TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | FLAG i32 | BODYLEN i32 + BODY |
//! PROPLEN i16 + PROPERTIES
//! ```
//!
//! Java clients write 0 for MAGICCODE and BODYCRC, and the Java broker ignores TOTALSIZE,
//! MAGICCODE and BODYCRC. We check more, since nothing valid is lost by it:
//! - TOTALSIZE must equal the entry's real size (Java clients always write it so);
//! - BODYCRC 0 means "not given" (what Java clients send); any other value must equal the
//!   body's CRC ([`crate::message::body_crc`], CRC32 masked to 31 bits);
//! - MAGICCODE is not checked (nothing defines it here); [`encode_batch`] writes 0 as Java does,
//!   and the real body CRC.

use crate::message::body_crc;

/// Size of an entry with an empty body and no properties.
pub const BATCH_ENTRY_MIN_LEN: usize = 4 + 4 + 4 + 4 + 4 + 2;
/// MAGICCODE written by [`encode_batch`] (and by Java clients).
pub const BATCH_MAGIC: i32 = 0;

/// One message of a batch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchEntry<'a> {
    pub flag: i32,
    pub body: &'a [u8],
    pub properties: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("message {index} at byte {offset}: need {need} bytes, {have} left")]
    Truncated {
        index: usize,
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error("message {index} at byte {offset}: TOTALSIZE {total} but its fields take {actual}")]
    SizeMismatch {
        index: usize,
        offset: usize,
        total: i32,
        actual: usize,
    },
    #[error("message {index} at byte {offset}: negative {field} length {len}")]
    NegativeLength {
        index: usize,
        offset: usize,
        field: &'static str,
        len: i32,
    },
    #[error("message {index} at byte {offset}: body CRC {stored} but the body's is {computed}")]
    CrcMismatch {
        index: usize,
        offset: usize,
        stored: u32,
        computed: u32,
    },
    #[error("message {index}: properties of {len} bytes exceed 32767")]
    PropertiesTooLong { index: usize, len: usize },
    #[error("message {index}: entry of {len} bytes does not fit TOTALSIZE (i32)")]
    EntryTooLarge { index: usize, len: usize },
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes one entry from the start of `buf` (`index`/`offset` only label errors).
fn decode_entry(
    buf: &[u8],
    index: usize,
    offset: usize,
) -> Result<(BatchEntry<'_>, usize), BatchError> {
    let truncated = |need: usize| BatchError::Truncated {
        index,
        offset,
        need,
        have: buf.len(),
    };
    if buf.len() < 4 * 5 {
        return Err(truncated(4 * 5));
    }
    let total = i32_at(buf, 0);
    let stored_crc = i32_at(buf, 8) as u32;
    let flag = i32_at(buf, 12);
    let body_len = i32_at(buf, 16);
    let body_len = usize::try_from(body_len).map_err(|_| BatchError::NegativeLength {
        index,
        offset,
        field: "body",
        len: body_len,
    })?;
    let body_end = 20usize.saturating_add(body_len);
    let props_at = body_end.saturating_add(2);
    let Some(pl) = buf.get(body_end..props_at) else {
        return Err(truncated(props_at));
    };
    let prop_len = i16::from_be_bytes([pl[0], pl[1]]);
    let prop_len = usize::try_from(prop_len).map_err(|_| BatchError::NegativeLength {
        index,
        offset,
        field: "properties",
        len: i32::from(prop_len),
    })?;
    let end = props_at + prop_len;
    let Some(properties) = buf.get(props_at..end) else {
        return Err(truncated(end));
    };
    if usize::try_from(total).ok() != Some(end) {
        return Err(BatchError::SizeMismatch {
            index,
            offset,
            total,
            actual: end,
        });
    }
    let body = &buf[20..body_end];
    if stored_crc != 0 {
        let computed = body_crc(body);
        if computed != stored_crc {
            return Err(BatchError::CrcMismatch {
                index,
                offset,
                stored: stored_crc,
                computed,
            });
        }
    }
    Ok((
        BatchEntry {
            flag,
            body,
            properties,
        },
        end,
    ))
}

/// Decodes a whole batch body; every byte must belong to an entry.
pub fn decode_batch(buf: &[u8]) -> Result<Vec<BatchEntry<'_>>, BatchError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let (e, n) = decode_entry(&buf[pos..], out.len(), pos)?;
        out.push(e);
        pos += n;
    }
    Ok(out)
}

/// Encoded size of one entry.
pub fn entry_len(e: &BatchEntry<'_>) -> usize {
    BATCH_ENTRY_MIN_LEN + e.body.len() + e.properties.len()
}

/// Appends `entries` to `out` (MAGICCODE 0, the real body CRC). On error `out` is unchanged.
pub fn encode_batch_into(entries: &[BatchEntry<'_>], out: &mut Vec<u8>) -> Result<(), BatchError> {
    let mut total = 0usize;
    for (index, e) in entries.iter().enumerate() {
        if e.properties.len() > i16::MAX as usize {
            return Err(BatchError::PropertiesTooLong {
                index,
                len: e.properties.len(),
            });
        }
        let len = entry_len(e);
        if i32::try_from(len).is_err() {
            return Err(BatchError::EntryTooLarge { index, len });
        }
        total = total.saturating_add(len);
    }
    out.reserve(total);
    for e in entries {
        // Both lengths were checked to fit above.
        out.extend_from_slice(&(entry_len(e) as i32).to_be_bytes());
        out.extend_from_slice(&BATCH_MAGIC.to_be_bytes());
        out.extend_from_slice(&body_crc(e.body).to_be_bytes());
        out.extend_from_slice(&e.flag.to_be_bytes());
        out.extend_from_slice(&(e.body.len() as i32).to_be_bytes());
        out.extend_from_slice(e.body);
        out.extend_from_slice(&(e.properties.len() as i16).to_be_bytes());
        out.extend_from_slice(e.properties);
    }
    Ok(())
}

/// Encodes `entries` as a batch body.
pub fn encode_batch(entries: &[BatchEntry<'_>]) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    encode_batch_into(entries, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn java_style_entry_decodes() {
        // What MessageDecoder.encodeMessage writes: magic 0, CRC 0.
        #[rustfmt::skip]
        let raw: Vec<u8> = vec![
            0, 0, 0, 30,    // TOTALSIZE = 22 + 3 + 5
            0, 0, 0, 0,     // MAGICCODE
            0, 0, 0, 0,     // BODYCRC (not given)
            0, 0, 0, 9,     // FLAG
            0, 0, 0, 3, b'a', b'b', b'c',
            0, 5, b'K', 1, b'V', 2, b'x',
        ];
        let d = decode_batch(&raw).expect("decode");
        assert_eq!(
            d,
            vec![BatchEntry {
                flag: 9,
                body: b"abc",
                properties: b"K\x01V\x02x"
            }]
        );
        let enc = encode_batch(&d).expect("encode");
        assert_eq!(enc[..8], raw[..8]);
        assert_eq!(enc[8..12], body_crc(b"abc").to_be_bytes());
        assert_eq!(enc[12..], raw[12..]);
        assert_eq!(decode_batch(&[]), Ok(vec![]));
    }

    #[test]
    fn errors() {
        let e = BatchEntry {
            flag: 1,
            body: b"hello",
            properties: b"p",
        };
        let good = encode_batch(&[e, e]).expect("enc");
        let n = entry_len(&e);
        assert!(matches!(
            decode_batch(&good[..good.len() - 1]),
            Err(BatchError::Truncated { index: 1, .. })
        ));
        assert!(matches!(
            decode_batch(&good[..10]),
            Err(BatchError::Truncated { index: 0, .. })
        ));
        let mut b = good.clone();
        b[3] += 1;
        assert!(matches!(
            decode_batch(&b),
            Err(BatchError::SizeMismatch { .. })
        ));
        let mut b = good.clone();
        b[n + 20] ^= 1; // second body
        assert!(matches!(
            decode_batch(&b),
            Err(BatchError::CrcMismatch { index: 1, offset, .. }) if offset == n
        ));
        let mut b = good.clone();
        b[16..20].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode_batch(&b),
            Err(BatchError::NegativeLength { field: "body", .. })
        ));
        let mut b = good.clone();
        b[16..20].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_batch(&b),
            Err(BatchError::Truncated { .. })
        ));
        let mut b = good.clone();
        b[25..27].copy_from_slice(&(-1i16).to_be_bytes());
        assert!(matches!(
            decode_batch(&b),
            Err(BatchError::NegativeLength {
                field: "properties",
                ..
            })
        ));
        let long = vec![b'x'; 40000];
        let mut out = vec![7];
        let r = encode_batch_into(
            &[
                e,
                BatchEntry {
                    flag: 0,
                    body: b"",
                    properties: &long,
                },
            ],
            &mut out,
        );
        assert_eq!(
            r,
            Err(BatchError::PropertiesTooLong {
                index: 1,
                len: 40000
            })
        );
        assert_eq!(out, vec![7]);
    }

    proptest! {
        #[test]
        fn roundtrip(msgs in proptest::collection::vec(
            (any::<i32>(), proptest::collection::vec(any::<u8>(), 0..300),
             proptest::collection::vec(any::<u8>(), 0..100)), 0..8)) {
            let entries: Vec<BatchEntry<'_>> = msgs
                .iter()
                .map(|(flag, body, props)| BatchEntry { flag: *flag, body, properties: props })
                .collect();
            let enc = encode_batch(&entries).expect("encode");
            prop_assert_eq!(enc.len(), entries.iter().map(entry_len).sum::<usize>());
            let dec = decode_batch(&enc).expect("decode");
            prop_assert_eq!(dec, entries);
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(d) = decode_batch(&data) {
                prop_assert_eq!(d.iter().map(entry_len).sum::<usize>(), data.len());
            }
        }
    }
}
