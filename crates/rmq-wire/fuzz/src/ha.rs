//! Fuzz body of the `decode_ha` target: the HA replication stream decoders
//! ([`rmq_wire::ha::decode_slave_packets`], what a master reads, and
//! [`rmq_wire::ha::decode_master_packets_with_limit`], what a slave reads).
//!
//! Input: one direction byte (even: slave -> master, odd: master -> slave), then the stream.
//!
//! Invariants checked on every input:
//! - **Round trip**: every decoded record re-encodes to exactly the bytes it was decoded from
//!   (the format has one spelling per record), so the records cover `consumed` bytes back to
//!   back; the rest decodes to nothing (a partial record).
//! - **Errors**: an error names a record boundary; the records before it decode alone, and the
//!   same error comes back when decoding from that boundary, from no more bytes than the field
//!   that shows it needs (4 for a state; 8 for a body size; the fixed header for a header
//!   field; the whole record for an epoch entry or a slave record) — so a bad header fails
//!   before its body arrives.
//! - **Incremental feeding**: the stream fed in chunks, including one byte at a time, gives
//!   the same records and the same error at the same absolute offset.
//! - **Limits**: a master handshake holds at most `MAX_EPOCH_ENTRIES` entries, a transfer body
//!   at most the limit; with a small limit the decoder stops no later than with the default.

use rmq_wire::ha::{
    decode_master_packets_with_limit, decode_slave_packets, encode_master_handshake,
    encode_master_packet_into, encode_slave_ack, encode_slave_handshake, encode_slave_packet_into,
    encode_transfer_header, EpochEntry, HaError, HaStreamError, MasterPacket, SlaveHandshake,
    TransferHeader, MASTER_HANDSHAKE_HEADER_LEN, MAX_EPOCH_ENTRIES, MAX_TRANSFER_BODY,
    SLAVE_ACK_LEN, SLAVE_HANDSHAKE_LEN, TRANSFER_HEADER_LEN,
};

use crate::driver::{mutate_bytes, put, Target, Verdict};
use crate::XorShift;

/// Body limit of the second master-side decode.
const SMALL_LIMIT: usize = 64;
const MAX_INPUT: usize = 64 * 1024;

/// Which stream decoder an input drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// What a master reads (slave records).
    Master,
    /// What a slave reads (master records), with this body limit.
    Slave(usize),
}

/// Decodes `buf` into each record's re-encoding, and the bytes consumed.
fn decode(side: Side, buf: &[u8]) -> Result<(Vec<Vec<u8>>, usize), HaStreamError> {
    let mut out = Vec::new();
    match side {
        Side::Master => {
            let (ps, n) = decode_slave_packets(buf)?;
            for p in &ps {
                let mut enc = Vec::new();
                if let Err(e) = encode_slave_packet_into(p, &mut enc) {
                    panic!("a decoded slave record does not re-encode: {e}");
                }
                out.push(enc);
            }
            Ok((out, n))
        }
        Side::Slave(limit) => {
            let (ps, n) = decode_master_packets_with_limit(buf, limit)?;
            for p in &ps {
                match p {
                    MasterPacket::Handshake(h) => {
                        assert!(h.entries.len() <= MAX_EPOCH_ENTRIES, "too many entries");
                    }
                    MasterPacket::Transfer { body, .. } => {
                        assert!(body.len() <= limit, "a body above the limit");
                    }
                }
                let mut enc = Vec::new();
                if let Err(e) = encode_master_packet_into(p, &mut enc) {
                    panic!("a decoded master record does not re-encode: {e}");
                }
                out.push(enc);
            }
            Ok((out, n))
        }
    }
}

/// Bytes from the record start that show `e`, or None when any prefix may (not fixed).
fn bytes_needed(side: Side, e: &HaError, record: &[u8]) -> Option<usize> {
    Some(match (side, e) {
        (_, HaError::UnexpectedState { .. }) => 4,
        (
            Side::Slave(_),
            HaError::Negative {
                field: "bodySize", ..
            },
        )
        | (Side::Slave(_), HaError::EpochBodyNotAligned { .. })
        | (Side::Slave(_), HaError::TooManyEpochEntries { .. })
        | (Side::Slave(_), HaError::BodyTooLarge { .. }) => 8,
        (Side::Slave(_), HaError::Negative { field, .. }) => match *field {
            "masterMaxPhyOffset" => MASTER_HANDSHAKE_HEADER_LEN,
            "offset" | "epochStartOffset" | "confirmOffset" => TRANSFER_HEADER_LEN,
            "epoch entry startOffset" => {
                let b = record.get(4..8)?;
                let size = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                MASTER_HANDSHAKE_HEADER_LEN + usize::try_from(size).ok()?
            }
            other => panic!("unexpected negative field {other} from a master"),
        },
        (Side::Master, HaError::BadFlag { .. }) => SLAVE_HANDSHAKE_LEN,
        (Side::Master, HaError::Negative { field, .. }) => {
            assert_eq!(*field, "slaveMaxPhyOffset");
            SLAVE_ACK_LEN
        }
        (side, e) => panic!("{side:?} decoder returned {e}"),
    })
}

/// `data` fed in chunks ending at `cuts` (ascending): the records, the bytes left over, and
/// the first error with its absolute offset.
fn feed(
    side: Side,
    data: &[u8],
    cuts: impl IntoIterator<Item = usize>,
) -> (Vec<Vec<u8>>, usize, Option<HaStreamError>) {
    let mut acc: Vec<u8> = Vec::new();
    let mut base = 0;
    let mut records = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain(std::iter::once(data.len())) {
        let c = c.clamp(last, data.len());
        acc.extend_from_slice(&data[last..c]);
        last = c;
        match decode(side, &acc) {
            Ok((rs, n)) => {
                records.extend(rs);
                acc.drain(..n);
                base += n;
            }
            Err(e) => {
                if let Ok((rs, _)) = decode(side, &acc[..e.offset]) {
                    records.extend(rs);
                }
                let e = HaStreamError {
                    offset: base + e.offset,
                    error: e.error,
                };
                return (records, acc.len(), Some(e));
            }
        }
    }
    (records, acc.len(), None)
}

/// What [`check_stream`] saw: records decoded, where decoding stopped (bytes consumed or the
/// error's offset), and whether it failed.
struct Seen {
    items: usize,
    end: usize,
    failed: bool,
}

fn check_stream(side: Side, data: &[u8]) -> Seen {
    let whole = decode(side, data);
    let (records, end, error) = match &whole {
        Ok((rs, n)) => {
            assert!(*n <= data.len());
            let rest = &data[*n..];
            assert_eq!(
                decode(side, rest).map(|(r, m)| (r.len(), m)),
                Ok((0, 0)),
                "the bytes left over are not a partial record"
            );
            (rs.clone(), *n, None)
        }
        Err(e) => {
            assert!(e.offset < data.len(), "error offset outside the input");
            let before = match decode(side, &data[..e.offset]) {
                Ok((rs, n)) => {
                    assert_eq!(n, e.offset, "the records before an error do not reach it");
                    rs
                }
                Err(e2) => panic!("the records before an error at {} fail: {e2}", e.offset),
            };
            let rec = &data[e.offset..];
            assert_eq!(
                decode(side, rec).map(|(r, _)| r.len()),
                Err(HaStreamError {
                    offset: 0,
                    error: e.error.clone()
                }),
                "the bad record decodes differently alone"
            );
            if let Some(k) = bytes_needed(side, &e.error, rec) {
                assert!(
                    k <= rec.len(),
                    "{} shown by {k} bytes, {} given",
                    e.error,
                    rec.len()
                );
                assert_eq!(
                    decode(side, &rec[..k]).map(|(r, _)| r.len()),
                    Err(HaStreamError {
                        offset: 0,
                        error: e.error.clone()
                    }),
                    "the error needs more bytes than the field that shows it"
                );
                if k > 0 {
                    assert_eq!(
                        decode(side, &rec[..k - 1]).map(|(r, n)| (r.len(), n)),
                        Ok((0, 0)),
                        "an error before the field that shows it"
                    );
                }
            }
            (before, e.offset, Some(e.clone()))
        }
    };
    assert_eq!(
        records.concat(),
        data[..end],
        "records do not re-encode to the bytes they came from"
    );

    // Byte by byte, then at points derived from the input.
    let len = data.len();
    let splits: [Vec<usize>; 3] = [
        (1..len).collect(),
        vec![len / 2],
        data.iter()
            .take(6)
            .scan(0usize, |at, b| {
                *at = (*at + usize::from(*b) * 7) % (len + 1);
                Some(*at)
            })
            .collect::<Vec<_>>(),
    ];
    for mut cuts in splits {
        cuts.sort_unstable();
        let (rs, left, err) = feed(side, data, cuts.iter().copied());
        assert_eq!(rs, records, "split feeding decodes other records");
        assert_eq!(err, error, "split feeding fails differently");
        if error.is_none() {
            assert_eq!(left, len - end, "split feeding leaves other bytes");
        }
    }
    Seen {
        items: records.len(),
        end,
        failed: error.is_some(),
    }
}

/// Fuzz body of the `decode_ha` target.
pub fn check_decode_ha(data: &[u8]) -> Verdict {
    let Some((&dir, stream)) = data.split_first() else {
        return Verdict {
            accepted: true,
            ..Verdict::default()
        };
    };
    let seen = if dir % 2 == 0 {
        check_stream(Side::Master, stream)
    } else {
        let seen = check_stream(Side::Slave(MAX_TRANSFER_BODY), stream);
        // The small limit decodes a prefix of the same records and stops no later.
        let small = check_stream(Side::Slave(SMALL_LIMIT), stream);
        assert!(small.end <= seen.end, "the small limit decoded further");
        assert!(
            small.items <= seen.items,
            "the small limit decoded more records"
        );
        seen
    };
    Verdict {
        accepted: !seen.failed,
        items: seen.items,
        interesting: seen.items > usize::from(!seen.failed),
    }
}

fn slave_records() -> Vec<Vec<u8>> {
    let mut out = vec![
        encode_slave_handshake(&SlaveHandshake {
            sync_from_last_file: false,
            async_learner: false,
            broker_id: 2,
        })
        .to_vec(),
        encode_slave_handshake(&SlaveHandshake {
            sync_from_last_file: true,
            async_learner: true,
            broker_id: -1,
        })
        .to_vec(),
    ];
    for off in [0, 4096, i64::MAX as u64] {
        if let Ok(a) = encode_slave_ack(off) {
            out.push(a.to_vec());
        }
    }
    out
}

fn master_records() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let entries = [
        EpochEntry {
            epoch: 1,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 3,
            start_offset: 5000,
        },
        EpochEntry {
            epoch: 4,
            start_offset: 9000,
        },
    ];
    for (max, last, n) in [(12_000, 4, 3), (0, -1, 0), (5000, 1, 1)] {
        if let Ok(h) = encode_master_handshake(max, last, &entries[..n]) {
            out.push(h);
        }
    }
    let bodies: [&[u8]; 3] = [b"", b"commitlog bytes", &[0xAB; 80]];
    for (i, body) in bodies.iter().enumerate() {
        let h = TransferHeader {
            offset: 9000 + i as u64 * 100,
            epoch: 4,
            epoch_start_offset: 9000,
            confirm_offset: 9000,
        };
        if let Ok(head) = encode_transfer_header(&h, body.len()) {
            let mut v = head.to_vec();
            v.extend_from_slice(body);
            out.push(v);
        }
    }
    out
}

/// Valid streams of both directions, one record each, several, and one ending mid-record.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (dir, records) in [(0u8, slave_records()), (1, master_records())] {
        for r in &records {
            let mut v = vec![dir];
            v.extend_from_slice(r);
            out.push(v);
        }
        let mut all = vec![dir];
        for r in &records {
            all.extend_from_slice(r);
        }
        let mut partial = all.clone();
        if let Some(first) = records.first() {
            partial.extend_from_slice(&first[..first.len() / 2]);
        }
        out.push(all);
        out.push(partial);
    }
    out.push(Vec::new());
    out
}

const TOKENS: [&[u8]; 10] = [
    &[0, 0, 0, 0],
    &[0, 0, 0, 1],
    &[0, 0, 0, 2],
    &[0, 0, 0, 3],
    &[0, 0, 0, 4],
    &[0, 0, 0, 12],
    &[0, 0, 0, 24],
    &[0xFF, 0xFF, 0xFF, 0xF4],
    &[0x80, 0, 0, 0, 0, 0, 0, 0],
    &[0, 2],
];

/// A random record of the input's direction, fields drawn to hit the edges.
fn random_record(rng: &mut XorShift, master: bool) -> Vec<u8> {
    let mut pick = |vals: &[i64]| -> i64 {
        if rng.below(4) == 0 {
            rng.next_u64() as i64
        } else {
            vals[rng.below(vals.len())]
        }
    };
    let state = pick(&[1, 2, 1, 2, 0, 3, 4]) as i32;
    let mut v = state.to_be_bytes().to_vec();
    if !master {
        if state == 1 {
            v.extend_from_slice(&(pick(&[0, 1, 2, -1]) as i16).to_be_bytes());
            v.extend_from_slice(&(pick(&[0, 1]) as i16).to_be_bytes());
        }
        v.extend_from_slice(&pick(&[0, 1, 1 << 40, -1]).to_be_bytes());
        return v;
    }
    let body_len = pick(&[0, 12, 24, 5, 64, 65]) as i32;
    v.extend_from_slice(&body_len.to_be_bytes());
    v.extend_from_slice(&pick(&[0, 100, -1]).to_be_bytes());
    v.extend_from_slice(&(pick(&[1, 2, -1]) as i32).to_be_bytes());
    if state == 2 {
        v.extend_from_slice(&pick(&[0, 100, -1]).to_be_bytes());
        v.extend_from_slice(&pick(&[0, 100, -1]).to_be_bytes());
    }
    let n = usize::try_from(body_len).unwrap_or(0).min(256);
    let n = if rng.below(4) == 0 {
        rng.below(n + 1)
    } else {
        n
    };
    for i in 0..n {
        v.push(if state == 1 {
            [0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 1, 0][i % 12]
        } else {
            i as u8
        });
    }
    v
}

/// Byte edits with HA tokens (states, sizes, negative offsets), or a random record spliced in
/// at a boundary the decoder found, or the direction byte flipped.
pub fn mutate(rng: &mut XorShift, input: &mut Vec<u8>, other: &[u8]) {
    if input.is_empty() {
        input.push(rng.below(2) as u8);
    }
    match rng.below(6) {
        0 => input[0] ^= 1,
        1 | 2 => {
            let master = input[0] % 2 == 1;
            let side = if master {
                Side::Slave(MAX_TRANSFER_BODY)
            } else {
                Side::Master
            };
            // Record boundaries of the valid prefix.
            let mut bounds = vec![0];
            let stream = &input[1..];
            let prefix = match decode(side, stream) {
                Ok((rs, _)) => rs,
                Err(e) => decode(side, &stream[..e.offset])
                    .map(|(rs, _)| rs)
                    .unwrap_or_default(),
            };
            for r in &prefix {
                let last = bounds.last().copied().unwrap_or(0);
                bounds.push(last + r.len());
            }
            let at = 1 + bounds[rng.below(bounds.len())];
            let rec = random_record(rng, master);
            input.splice(at..at, rec);
        }
        _ => {
            for _ in 0..1 + rng.below(3) {
                mutate_bytes(rng, input, other, &TOKENS);
            }
            if rng.below(4) == 0 {
                // A size field at a likely position.
                let at = 1 + 4 + 12 * rng.below(4);
                put(input, at, &(rng.below(100) as i32).to_be_bytes());
            }
        }
    }
    input.truncate(MAX_INPUT);
}

/// The `decode_ha` target for [`crate::driver::replay_target`].
pub const TARGET: Target = Target {
    name: "decode_ha",
    seeds,
    check: check_decode_ha,
    mutate,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_accepted() {
        for s in seeds() {
            assert!(check_decode_ha(&s).accepted);
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
