//! The HA replication protocol of RocketMQ 5's controller mode ("AutoSwitch", RIP-44): a raw
//! TCP stream per slave, not remoting frames. Big-endian throughout.
//!
//! ```text
//! slave -> master
//!   handshake  16 B   state i32 (=1) | syncFromLastFile i16 | asyncLearner i16 | slaveBrokerId i64
//!   ack        12 B   state i32 (=2) | slaveMaxPhyOffset i64
//! master -> slave
//!   handshake  20 B   state i32 (=1) | bodySize i32 (=12n) | masterMaxPhyOffset i64
//!                     | masterLastEpoch i32
//!              + n × (epoch i32 | startOffset i64)
//!   transfer   36 B   state i32 (=2) | bodySize i32 | offset i64 | epoch i32
//!                     | epochStartOffset i64 | confirmOffset i64
//!              + bodySize bytes of commitlog (bodySize 0: a heartbeat)
//! ```
//!
//! `state` is a [`HaState`]. Each direction carries only HANDSHAKE and TRANSFER records; any
//! other state is a protocol error.
//!
//! Decoding follows [`crate::remoting::decode_frames`]: the stream decoders
//! ([`decode_slave_packets`], [`decode_master_packets`]) take the bytes received so far and
//! return every complete record plus the bytes those took; an incomplete record at the end is
//! left for the next call, so a TCP read split anywhere never changes what is decoded. The
//! record kind comes from `state`, so a slave's 16-byte handshake is never read as a 12-byte
//! ack (Java's master waits for just 12 bytes before it looks at the state).
//!
//! Malformed input fails as soon as the bytes that show it are there, before the rest of the
//! record arrives: an unexpected state from the first 4 bytes, a bad `bodySize` from the first
//! 8, a negative offset once the fixed header is complete. Checks:
//! - offsets and sizes must not be negative (`masterMaxPhyOffset`, entry `startOffset`,
//!   `offset`, `epochStartOffset`, `confirmOffset`, `slaveMaxPhyOffset`, `bodySize`). Note that
//!   a Java master computes `confirmOffset` as a minimum over its in-sync slaves' ack offsets,
//!   which start at -1, so it can send -1 briefly; we reject it like any negative offset;
//! - a master handshake body must be a whole number of 12-byte entries, at most
//!   [`MAX_EPOCH_ENTRIES`] of them;
//! - a transfer body may not exceed the decoder's limit ([`MAX_TRANSFER_BODY`] by default);
//! - the handshake flags must be 0 or 1 (Java reads `== 1`; we refuse anything else, which
//!   catches a misaligned stream).
//!
//! Epochs (`i32`) and the slave's broker id (`i64`) are carried as they are: Java sends
//! `masterLastEpoch = -1` when its epoch cache is empty, and neither value is a size. Whether
//! epoch entries are ascending is for the caller (the epoch file) to judge.
//!
//! Offsets are `u64` here, as in the store; encoders refuse one above `i64::MAX`.

/// Connection states (`HAConnectionState` ordinals), sent as the `state` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum HaState {
    Ready = 0,
    Handshake = 1,
    Transfer = 2,
    Suspend = 3,
    Shutdown = 4,
}

impl HaState {
    /// Every state, in ordinal order.
    pub const ALL: [HaState; 5] = [
        HaState::Ready,
        HaState::Handshake,
        HaState::Transfer,
        HaState::Suspend,
        HaState::Shutdown,
    ];

    /// The state with this ordinal.
    pub fn from_wire(v: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == v)
    }

    /// The ordinal sent on the wire.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// Java's name of the state.
    pub const fn name(self) -> &'static str {
        match self {
            HaState::Ready => "READY",
            HaState::Handshake => "HANDSHAKE",
            HaState::Transfer => "TRANSFER",
            HaState::Suspend => "SUSPEND",
            HaState::Shutdown => "SHUTDOWN",
        }
    }
}

/// Slave handshake size.
pub const SLAVE_HANDSHAKE_LEN: usize = 4 + 2 + 2 + 8;
/// Slave ack (offset report) size.
pub const SLAVE_ACK_LEN: usize = 4 + 8;
/// Fixed part of the master handshake.
pub const MASTER_HANDSHAKE_HEADER_LEN: usize = 4 + 4 + 8 + 4;
/// One epoch entry of the master handshake body.
pub const EPOCH_ENTRY_LEN: usize = 4 + 8;
/// Transfer header (the body follows).
pub const TRANSFER_HEADER_LEN: usize = 4 + 4 + 8 + 4 + 8 + 8;
/// Most epoch entries a master handshake may carry (RocketMQ's buffer holds 1000; one entry
/// per election, so this is far beyond any real log and still bounds the allocation).
pub const MAX_EPOCH_ENTRIES: usize = 1_000_000;
/// Default largest transfer body a slave accepts (RocketMQ sends at most
/// `haTransferBatchSize`, 32 KiB by default).
pub const MAX_TRANSFER_BODY: usize = 64 << 20;

/// What a slave sends first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlaveHandshake {
    pub sync_from_last_file: bool,
    pub async_learner: bool,
    pub broker_id: i64,
}

/// A record from slave to master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlavePacket {
    Handshake(SlaveHandshake),
    /// The slave's max commitlog offset (a report or an acknowledgement).
    Ack {
        max_offset: u64,
    },
}

/// One `(epoch, startOffset)` entry of the master's epoch cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: u64,
}

/// The master's answer to a slave handshake.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MasterHandshake {
    pub max_offset: u64,
    pub last_epoch: i32,
    pub entries: Vec<EpochEntry>,
}

/// A transfer header without its `bodySize` (the length of the body it goes with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransferHeader {
    /// Commitlog offset of the body's first byte.
    pub offset: u64,
    /// Epoch that wrote the body (a batch never crosses an epoch boundary).
    pub epoch: i32,
    /// Where that epoch starts.
    pub epoch_start_offset: u64,
    /// The master's confirm offset.
    pub confirm_offset: u64,
}

/// A record from master to slave. A transfer body borrows from the decoded buffer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MasterPacket<'a> {
    Handshake(MasterHandshake),
    /// Commitlog bytes (empty: a heartbeat).
    Transfer {
        header: TransferHeader,
        body: &'a [u8],
    },
}

/// Which side sent a record, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sender {
    Slave,
    Master,
}

impl std::fmt::Display for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sender::Slave => "slave",
            Sender::Master => "master",
        })
    }
}

fn state_name(state: &i32) -> &'static str {
    HaState::from_wire(*state).map_or("unknown", HaState::name)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HaError {
    #[error(
        "{from} sent state {state} ({}); only HANDSHAKE (1) and TRANSFER (2) are valid",
        state_name(.state)
    )]
    UnexpectedState { from: Sender, state: i32 },
    #[error("{field} is negative ({value})")]
    Negative { field: &'static str, value: i64 },
    #[error("{field} is {value}, not 0 or 1")]
    BadFlag { field: &'static str, value: i16 },
    #[error(
        "master handshake body of {size} bytes is not a whole number of 12-byte epoch entries"
    )]
    EpochBodyNotAligned { size: usize },
    #[error("master handshake with {count} epoch entries; at most {max} are accepted")]
    TooManyEpochEntries { count: usize, max: usize },
    #[error("transfer body of {size} bytes exceeds the limit of {max}")]
    BodyTooLarge { size: usize, max: usize },
    #[error("{field} = {value} does not fit the wire's {width}")]
    OutOfRange {
        field: &'static str,
        value: u64,
        width: &'static str,
    },
}

/// A decode failure in a stream: `offset` is where the bad record starts in the buffer given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("HA record at byte {offset}: {error}")]
pub struct HaStreamError {
    pub offset: usize,
    pub error: HaError,
}

// ---------------------------------------------------------------------------------------------
// Field access. Callers check the length first (`first_chunk`, `get`), so these index within
// bounds.

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

fn offset(field: &'static str, value: i64) -> Result<u64, HaError> {
    u64::try_from(value).map_err(|_| HaError::Negative { field, value })
}

fn flag(field: &'static str, value: i16) -> Result<bool, HaError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(HaError::BadFlag { field, value }),
    }
}

fn wire_offset(field: &'static str, value: u64) -> Result<i64, HaError> {
    i64::try_from(value).map_err(|_| HaError::OutOfRange {
        field,
        value,
        width: "i64",
    })
}

fn wire_size(field: &'static str, value: usize) -> Result<i32, HaError> {
    i32::try_from(value).map_err(|_| HaError::OutOfRange {
        field,
        value: value as u64,
        width: "i32",
    })
}

// ---------------------------------------------------------------------------------------------
// Slave -> master

/// Encodes a slave handshake.
pub fn encode_slave_handshake(h: &SlaveHandshake) -> [u8; SLAVE_HANDSHAKE_LEN] {
    let mut out = [0u8; SLAVE_HANDSHAKE_LEN];
    out[..4].copy_from_slice(&HaState::Handshake.code().to_be_bytes());
    out[4..6].copy_from_slice(&i16::from(h.sync_from_last_file).to_be_bytes());
    out[6..8].copy_from_slice(&i16::from(h.async_learner).to_be_bytes());
    out[8..].copy_from_slice(&h.broker_id.to_be_bytes());
    out
}

/// Encodes a slave ack (its max commitlog offset).
pub fn encode_slave_ack(max_offset: u64) -> Result<[u8; SLAVE_ACK_LEN], HaError> {
    let v = wire_offset("slaveMaxPhyOffset", max_offset)?;
    let mut out = [0u8; SLAVE_ACK_LEN];
    out[..4].copy_from_slice(&HaState::Transfer.code().to_be_bytes());
    out[4..].copy_from_slice(&v.to_be_bytes());
    Ok(out)
}

/// Appends `p` to `out`; on error `out` is unchanged.
pub fn encode_slave_packet_into(p: &SlavePacket, out: &mut Vec<u8>) -> Result<(), HaError> {
    match p {
        SlavePacket::Handshake(h) => out.extend_from_slice(&encode_slave_handshake(h)),
        SlavePacket::Ack { max_offset } => out.extend_from_slice(&encode_slave_ack(*max_offset)?),
    }
    Ok(())
}

/// Encodes `packets` back to back.
pub fn encode_slave_packets<'p>(
    packets: impl IntoIterator<Item = &'p SlavePacket>,
) -> Result<Vec<u8>, HaError> {
    let mut out = Vec::new();
    for p in packets {
        encode_slave_packet_into(p, &mut out)?;
    }
    Ok(out)
}

/// Decodes the record at the start of `buf` (what a master reads from a slave): `Ok(None)`
/// until the whole record is there, else the record and its size.
pub fn decode_slave_packet(buf: &[u8]) -> Result<Option<(SlavePacket, usize)>, HaError> {
    let Some(state) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    match HaState::from_wire(i32::from_be_bytes(*state)) {
        Some(HaState::Handshake) => {
            let Some(r) = buf.first_chunk::<SLAVE_HANDSHAKE_LEN>() else {
                return Ok(None);
            };
            let h = SlaveHandshake {
                sync_from_last_file: flag("syncFromLastFile", i16_at(r, 4))?,
                async_learner: flag("asyncLearner", i16_at(r, 6))?,
                broker_id: i64_at(r, 8),
            };
            Ok(Some((SlavePacket::Handshake(h), SLAVE_HANDSHAKE_LEN)))
        }
        Some(HaState::Transfer) => {
            let Some(r) = buf.first_chunk::<SLAVE_ACK_LEN>() else {
                return Ok(None);
            };
            let max_offset = offset("slaveMaxPhyOffset", i64_at(r, 4))?;
            Ok(Some((SlavePacket::Ack { max_offset }, SLAVE_ACK_LEN)))
        }
        _ => Err(HaError::UnexpectedState {
            from: Sender::Slave,
            state: i32::from_be_bytes(*state),
        }),
    }
}

/// Decodes every complete record of `buf` (slave -> master); returns them and the bytes they
/// took. A partial record at the end is left for the next call.
pub fn decode_slave_packets(buf: &[u8]) -> Result<(Vec<SlavePacket>, usize), HaStreamError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(rest) = buf.get(pos..) {
        match decode_slave_packet(rest) {
            Ok(Some((p, n))) => {
                out.push(p);
                pos += n;
            }
            Ok(None) => break,
            Err(error) => return Err(HaStreamError { offset: pos, error }),
        }
    }
    Ok((out, pos))
}

// ---------------------------------------------------------------------------------------------
// Master -> slave

/// Encodes a master handshake with all of `entries` (sized exactly: no entry limit but
/// [`MAX_EPOCH_ENTRIES`], which the decoder enforces too).
pub fn encode_master_handshake(
    max_offset: u64,
    last_epoch: i32,
    entries: &[EpochEntry],
) -> Result<Vec<u8>, HaError> {
    let mut out = Vec::new();
    encode_master_handshake_into(max_offset, last_epoch, entries, &mut out)?;
    Ok(out)
}

/// [`encode_master_handshake`] appending to `out`; on error `out` is unchanged.
pub fn encode_master_handshake_into(
    max_offset: u64,
    last_epoch: i32,
    entries: &[EpochEntry],
    out: &mut Vec<u8>,
) -> Result<(), HaError> {
    if entries.len() > MAX_EPOCH_ENTRIES {
        return Err(HaError::TooManyEpochEntries {
            count: entries.len(),
            max: MAX_EPOCH_ENTRIES,
        });
    }
    let body_size = entries.len() * EPOCH_ENTRY_LEN;
    let size_field = wire_size("bodySize", body_size)?;
    let max_field = wire_offset("masterMaxPhyOffset", max_offset)?;
    let start = out.len();
    out.reserve_exact(MASTER_HANDSHAKE_HEADER_LEN + body_size);
    out.extend_from_slice(&HaState::Handshake.code().to_be_bytes());
    out.extend_from_slice(&size_field.to_be_bytes());
    out.extend_from_slice(&max_field.to_be_bytes());
    out.extend_from_slice(&last_epoch.to_be_bytes());
    for e in entries {
        match wire_offset("epoch entry startOffset", e.start_offset) {
            Ok(v) => {
                out.extend_from_slice(&e.epoch.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
            Err(err) => {
                out.truncate(start);
                return Err(err);
            }
        }
    }
    Ok(())
}

/// Encodes a transfer header for a body of `body_len` bytes (sent right after it).
pub fn encode_transfer_header(
    h: &TransferHeader,
    body_len: usize,
) -> Result<[u8; TRANSFER_HEADER_LEN], HaError> {
    let size = wire_size("bodySize", body_len)?;
    let offset = wire_offset("offset", h.offset)?;
    let epoch_start = wire_offset("epochStartOffset", h.epoch_start_offset)?;
    let confirm = wire_offset("confirmOffset", h.confirm_offset)?;
    let mut out = [0u8; TRANSFER_HEADER_LEN];
    out[..4].copy_from_slice(&HaState::Transfer.code().to_be_bytes());
    out[4..8].copy_from_slice(&size.to_be_bytes());
    out[8..16].copy_from_slice(&offset.to_be_bytes());
    out[16..20].copy_from_slice(&h.epoch.to_be_bytes());
    out[20..28].copy_from_slice(&epoch_start.to_be_bytes());
    out[28..36].copy_from_slice(&confirm.to_be_bytes());
    Ok(out)
}

/// Appends `p` (header and body) to `out`; on error `out` is unchanged.
pub fn encode_master_packet_into(p: &MasterPacket<'_>, out: &mut Vec<u8>) -> Result<(), HaError> {
    match p {
        MasterPacket::Handshake(h) => {
            encode_master_handshake_into(h.max_offset, h.last_epoch, &h.entries, out)
        }
        MasterPacket::Transfer { header, body } => {
            let head = encode_transfer_header(header, body.len())?;
            out.reserve(TRANSFER_HEADER_LEN + body.len());
            out.extend_from_slice(&head);
            out.extend_from_slice(body);
            Ok(())
        }
    }
}

/// Encodes `packets` back to back.
pub fn encode_master_packets<'p, 'a: 'p>(
    packets: impl IntoIterator<Item = &'p MasterPacket<'a>>,
) -> Result<Vec<u8>, HaError> {
    let mut out = Vec::new();
    for p in packets {
        encode_master_packet_into(p, &mut out)?;
    }
    Ok(out)
}

/// Decodes the record at the start of `buf` (what a slave reads from its master): `Ok(None)`
/// until the whole record is there, else the record and its size. `max_body` bounds a
/// transfer body.
pub fn decode_master_packet(
    buf: &[u8],
    max_body: usize,
) -> Result<Option<(MasterPacket<'_>, usize)>, HaError> {
    let Some(state) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let state = i32::from_be_bytes(*state);
    let kind = match HaState::from_wire(state) {
        Some(s @ (HaState::Handshake | HaState::Transfer)) => s,
        _ => {
            return Err(HaError::UnexpectedState {
                from: Sender::Master,
                state,
            })
        }
    };
    let Some(size) = buf.get(4..8) else {
        return Ok(None);
    };
    let size = i32_at(size, 0);
    let body_len = usize::try_from(size).map_err(|_| HaError::Negative {
        field: "bodySize",
        value: i64::from(size),
    })?;
    if kind == HaState::Handshake {
        if body_len % EPOCH_ENTRY_LEN != 0 {
            return Err(HaError::EpochBodyNotAligned { size: body_len });
        }
        let count = body_len / EPOCH_ENTRY_LEN;
        if count > MAX_EPOCH_ENTRIES {
            return Err(HaError::TooManyEpochEntries {
                count,
                max: MAX_EPOCH_ENTRIES,
            });
        }
        let Some(head) = buf.first_chunk::<MASTER_HANDSHAKE_HEADER_LEN>() else {
            return Ok(None);
        };
        let max_offset = offset("masterMaxPhyOffset", i64_at(head, 8))?;
        let last_epoch = i32_at(head, 16);
        let total = MASTER_HANDSHAKE_HEADER_LEN + body_len;
        let Some(body) = buf.get(MASTER_HANDSHAKE_HEADER_LEN..total) else {
            return Ok(None);
        };
        let entries = body
            .chunks_exact(EPOCH_ENTRY_LEN)
            .map(|e| {
                Ok(EpochEntry {
                    epoch: i32_at(e, 0),
                    start_offset: offset("epoch entry startOffset", i64_at(e, 4))?,
                })
            })
            .collect::<Result<Vec<_>, HaError>>()?;
        let h = MasterHandshake {
            max_offset,
            last_epoch,
            entries,
        };
        return Ok(Some((MasterPacket::Handshake(h), total)));
    }
    if body_len > max_body {
        return Err(HaError::BodyTooLarge {
            size: body_len,
            max: max_body,
        });
    }
    let Some(head) = buf.first_chunk::<TRANSFER_HEADER_LEN>() else {
        return Ok(None);
    };
    let header = TransferHeader {
        offset: offset("offset", i64_at(head, 8))?,
        epoch: i32_at(head, 16),
        epoch_start_offset: offset("epochStartOffset", i64_at(head, 20))?,
        confirm_offset: offset("confirmOffset", i64_at(head, 28))?,
    };
    let total = TRANSFER_HEADER_LEN + body_len;
    let Some(body) = buf.get(TRANSFER_HEADER_LEN..total) else {
        return Ok(None);
    };
    Ok(Some((MasterPacket::Transfer { header, body }, total)))
}

/// Decodes every complete record of `buf` (master -> slave), transfer bodies of at most
/// [`MAX_TRANSFER_BODY`] bytes; returns them and the bytes they took. A partial record at the
/// end is left for the next call.
pub fn decode_master_packets(buf: &[u8]) -> Result<(Vec<MasterPacket<'_>>, usize), HaStreamError> {
    decode_master_packets_with_limit(buf, MAX_TRANSFER_BODY)
}

/// [`decode_master_packets`] with another body size limit.
pub fn decode_master_packets_with_limit(
    buf: &[u8],
    max_body: usize,
) -> Result<(Vec<MasterPacket<'_>>, usize), HaStreamError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(rest) = buf.get(pos..) {
        match decode_master_packet(rest, max_body) {
            Ok(Some((p, n))) => {
                out.push(p);
                pos += n;
            }
            Ok(None) => break,
            Err(error) => return Err(HaStreamError { offset: pos, error }),
        }
    }
    Ok((out, pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(epoch: i32, start_offset: u64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    #[test]
    fn slave_vectors_are_byte_exact() {
        let h = SlaveHandshake {
            sync_from_last_file: true,
            async_learner: false,
            broker_id: 3,
        };
        #[rustfmt::skip]
        let want = [
            0, 0, 0, 1,             // HANDSHAKE
            0, 1,                   // syncFromLastFile
            0, 0,                   // asyncLearner
            0, 0, 0, 0, 0, 0, 0, 3, // brokerId
        ];
        assert_eq!(encode_slave_handshake(&h), want);
        assert_eq!(
            encode_slave_ack(0x0102_0304_0506).expect("ack"),
            [0, 0, 0, 2, 0, 0, 1, 2, 3, 4, 5, 6]
        );
        let mut both = want.to_vec();
        both.extend_from_slice(&encode_slave_ack(7).expect("ack"));
        let (got, n) = decode_slave_packets(&both).expect("decode");
        assert_eq!(n, 28);
        assert_eq!(
            got,
            vec![
                SlavePacket::Handshake(h),
                SlavePacket::Ack { max_offset: 7 }
            ]
        );
    }

    #[test]
    fn master_vectors_are_byte_exact() {
        let hs = encode_master_handshake(9000, 8, &[entry(7, 7000), entry(8, 8000)]).expect("hs");
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            0, 0, 0, 1,                     // HANDSHAKE
            0, 0, 0, 24,                    // bodySize
            0, 0, 0, 0, 0, 0, 0x23, 0x28,   // masterMaxPhyOffset 9000
            0, 0, 0, 8,                     // masterLastEpoch
            0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0x1B, 0x58,
            0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x1F, 0x40,
        ];
        assert_eq!(hs, want);
        assert_eq!(hs.capacity(), hs.len());
        let t = TransferHeader {
            offset: 100,
            epoch: 8,
            epoch_start_offset: 8000,
            confirm_offset: 90,
        };
        #[rustfmt::skip]
        let head: Vec<u8> = vec![
            0, 0, 0, 2,                     // TRANSFER
            0, 0, 0, 3,                     // bodySize
            0, 0, 0, 0, 0, 0, 0, 100,       // offset
            0, 0, 0, 8,                     // epoch
            0, 0, 0, 0, 0, 0, 0x1F, 0x40,   // epochStartOffset
            0, 0, 0, 0, 0, 0, 0, 90,        // confirmOffset
        ];
        assert_eq!(encode_transfer_header(&t, 3).expect("head").to_vec(), head);
        let mut stream = hs.clone();
        stream.extend_from_slice(&head);
        stream.extend_from_slice(b"abc");
        let (got, n) = decode_master_packets(&stream).expect("decode");
        assert_eq!(n, stream.len());
        assert_eq!(
            got,
            vec![
                MasterPacket::Handshake(MasterHandshake {
                    max_offset: 9000,
                    last_epoch: 8,
                    entries: vec![entry(7, 7000), entry(8, 8000)],
                }),
                MasterPacket::Transfer {
                    header: t,
                    body: b"abc"
                },
            ]
        );
    }

    #[test]
    fn many_epoch_entries() {
        let entries: Vec<_> = (1..=5000).map(|i| entry(i, i as u64 * 1000)).collect();
        let hs = encode_master_handshake(u64::MAX >> 1, 5000, &entries).expect("hs");
        assert_eq!(hs.len(), 20 + 12 * 5000);
        let (got, n) = decode_master_packets(&hs).expect("decode");
        assert_eq!(n, hs.len());
        match &got[..] {
            [MasterPacket::Handshake(h)] => assert_eq!(h.entries, entries),
            other => panic!("{other:?}"),
        }
        let too_many = vec![entry(1, 0); MAX_EPOCH_ENTRIES + 1];
        assert!(matches!(
            encode_master_handshake(0, 1, &too_many),
            Err(HaError::TooManyEpochEntries { .. })
        ));
    }

    #[test]
    fn a_handshake_prefix_waits() {
        let h = encode_slave_handshake(&SlaveHandshake {
            sync_from_last_file: false,
            async_learner: true,
            broker_id: 1,
        });
        // 12 bytes would make a whole ack; a handshake must wait for all 16.
        for cut in 0..SLAVE_HANDSHAKE_LEN {
            assert_eq!(decode_slave_packets(&h[..cut]), Ok((vec![], 0)), "{cut}");
        }
        let ack = encode_slave_ack(5).expect("ack");
        for cut in 0..SLAVE_ACK_LEN {
            assert_eq!(decode_slave_packets(&ack[..cut]), Ok((vec![], 0)));
        }
    }

    fn slave_err(b: &[u8]) -> HaError {
        match decode_slave_packets(b) {
            Err(e) => e.error,
            Ok(r) => panic!("decoded {r:?}"),
        }
    }

    fn master_err(b: &[u8], max_body: usize) -> HaError {
        match decode_master_packets_with_limit(b, max_body) {
            Err(e) => e.error,
            Ok(r) => panic!("decoded {r:?}"),
        }
    }

    #[test]
    fn slave_side_errors() {
        for state in [0, 3, 4, 5, -1, i32::MAX] {
            assert_eq!(
                slave_err(&state.to_be_bytes()),
                HaError::UnexpectedState {
                    from: Sender::Slave,
                    state
                }
            );
        }
        let mut ack = encode_slave_ack(1).expect("ack");
        ack[4] = 0x80;
        assert!(matches!(
            slave_err(&ack),
            HaError::Negative {
                field: "slaveMaxPhyOffset",
                ..
            }
        ));
        let mut h = encode_slave_handshake(&SlaveHandshake {
            sync_from_last_file: false,
            async_learner: false,
            broker_id: -1,
        });
        assert!(decode_slave_packets(&h).is_ok());
        h[5] = 2;
        assert_eq!(
            slave_err(&h),
            HaError::BadFlag {
                field: "syncFromLastFile",
                value: 2
            }
        );
        h[5] = 0;
        h[6] = 0xFF;
        assert!(matches!(
            slave_err(&h),
            HaError::BadFlag {
                field: "asyncLearner",
                ..
            }
        ));
        // The error names where the bad record starts.
        let mut two = encode_slave_ack(1).expect("ack").to_vec();
        two.extend_from_slice(&3i32.to_be_bytes());
        assert_eq!(decode_slave_packets(&two).map_err(|e| e.offset), Err(12));
        assert!(encode_slave_ack(1 << 63).is_err());
    }

    #[test]
    fn master_side_errors() {
        let head = |state: i32, size: i32| {
            let mut v = state.to_be_bytes().to_vec();
            v.extend_from_slice(&size.to_be_bytes());
            v
        };
        for state in [0, 3, 4, 77, i32::MIN] {
            assert!(matches!(
                master_err(&state.to_be_bytes(), 100),
                HaError::UnexpectedState {
                    from: Sender::Master,
                    ..
                }
            ));
        }
        for state in [1, 2] {
            assert_eq!(
                master_err(&head(state, -12), 100),
                HaError::Negative {
                    field: "bodySize",
                    value: -12
                }
            );
        }
        assert_eq!(
            master_err(&head(1, 13), 100),
            HaError::EpochBodyNotAligned { size: 13 }
        );
        assert!(matches!(
            master_err(&head(1, (12 * (MAX_EPOCH_ENTRIES + 1)) as i32), 100),
            HaError::TooManyEpochEntries { .. }
        ));
        // The largest allowed handshake only waits.
        let big = head(1, (12 * MAX_EPOCH_ENTRIES) as i32);
        assert_eq!(decode_master_packets(&big), Ok((vec![], 0)));
        assert_eq!(
            master_err(&head(2, 101), 100),
            HaError::BodyTooLarge {
                size: 101,
                max: 100
            }
        );
        assert_eq!(
            decode_master_packets_with_limit(&head(2, 100), 100),
            Ok((vec![], 0))
        );
        let t = TransferHeader {
            offset: 1,
            epoch: 1,
            epoch_start_offset: 1,
            confirm_offset: 1,
        };
        let good = encode_transfer_header(&t, 0).expect("head");
        for (at, field) in [
            (8, "offset"),
            (20, "epochStartOffset"),
            (28, "confirmOffset"),
        ] {
            let mut b = good;
            b[at] = 0xFF;
            // Fails before the body arrives.
            let mut b = b.to_vec();
            b[7] = 50;
            assert!(
                matches!(master_err(&b, 100), HaError::Negative { field: f, .. } if f == field)
            );
        }
        let mut hs = encode_master_handshake(1, 1, &[entry(1, 1)]).expect("hs");
        hs[8] = 0x80;
        assert!(matches!(
            master_err(&hs[..20], 0),
            HaError::Negative {
                field: "masterMaxPhyOffset",
                ..
            }
        ));
        hs[8] = 0;
        hs[24] = 0x80;
        assert!(matches!(
            master_err(&hs, 0),
            HaError::Negative {
                field: "epoch entry startOffset",
                ..
            }
        ));
        assert!(encode_transfer_header(&t, 1 << 31).is_err());
        let bad = TransferHeader {
            confirm_offset: u64::MAX,
            ..t
        };
        assert!(matches!(
            encode_transfer_header(&bad, 0),
            Err(HaError::OutOfRange {
                field: "confirmOffset",
                ..
            })
        ));
        let mut out = vec![7];
        assert!(
            encode_master_handshake_into(0, 0, &[entry(1, 0), entry(2, u64::MAX)], &mut out)
                .is_err()
        );
        assert_eq!(out, vec![7]);
    }

    #[test]
    fn error_messages_name_the_state() {
        let e = slave_err(&3i32.to_be_bytes());
        assert_eq!(
            e.to_string(),
            "slave sent state 3 (SUSPEND); only HANDSHAKE (1) and TRANSFER (2) are valid"
        );
        for s in HaState::ALL {
            assert_eq!(HaState::from_wire(s.code()), Some(s));
        }
        assert_eq!(HaState::from_wire(5), None);
    }

    // Offsets up to i64::MAX, biased to the edges.
    fn arb_offset() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..10_000,
            Just(0),
            Just(i64::MAX as u64),
            0..=i64::MAX as u64
        ]
    }

    fn arb_slave_packet() -> impl Strategy<Value = SlavePacket> {
        prop_oneof![
            (any::<bool>(), any::<bool>(), any::<i64>()).prop_map(|(s, a, id)| {
                SlavePacket::Handshake(SlaveHandshake {
                    sync_from_last_file: s,
                    async_learner: a,
                    broker_id: id,
                })
            }),
            arb_offset().prop_map(|max_offset| SlavePacket::Ack { max_offset }),
        ]
    }

    /// Master packets owning their bodies (borrowed for encoding).
    #[derive(Debug, Clone)]
    enum OwnedMaster {
        Handshake(MasterHandshake),
        Transfer(TransferHeader, Vec<u8>),
    }

    impl OwnedMaster {
        fn view(&self) -> MasterPacket<'_> {
            match self {
                OwnedMaster::Handshake(h) => MasterPacket::Handshake(h.clone()),
                OwnedMaster::Transfer(h, b) => MasterPacket::Transfer {
                    header: *h,
                    body: b,
                },
            }
        }
    }

    fn arb_master_packet() -> impl Strategy<Value = OwnedMaster> {
        let entry = (any::<i32>(), arb_offset()).prop_map(|(e, s)| entry(e, s));
        prop_oneof![
            (
                arb_offset(),
                any::<i32>(),
                proptest::collection::vec(entry, 0..20)
            )
                .prop_map(|(max_offset, last_epoch, entries)| {
                    OwnedMaster::Handshake(MasterHandshake {
                        max_offset,
                        last_epoch,
                        entries,
                    })
                }),
            (
                arb_offset(),
                any::<i32>(),
                arb_offset(),
                arb_offset(),
                proptest::collection::vec(any::<u8>(), 0..100)
            )
                .prop_map(|(offset, epoch, eso, confirm, body)| {
                    OwnedMaster::Transfer(
                        TransferHeader {
                            offset,
                            epoch,
                            epoch_start_offset: eso,
                            confirm_offset: confirm,
                        },
                        body,
                    )
                }),
        ]
    }

    /// Split points: every single cut, then `cuts` as one multi-way split.
    fn split_points(len: usize, cuts: &[prop::sample::Index]) -> Vec<Vec<usize>> {
        let mut splits: Vec<Vec<usize>> = (0..=len).map(|i| vec![i]).collect();
        let mut multi: Vec<usize> = cuts.iter().map(|c| c.index(len + 1)).collect();
        multi.sort_unstable();
        splits.push(multi);
        splits
    }

    proptest! {
        #[test]
        fn slave_roundtrip(packets in proptest::collection::vec(arb_slave_packet(), 0..8)) {
            let enc = encode_slave_packets(&packets).expect("encode");
            let (dec, n) = decode_slave_packets(&enc).expect("decode");
            prop_assert_eq!(n, enc.len());
            prop_assert_eq!(&dec, &packets);
            for p in &packets {
                let one = encode_slave_packets([p]).expect("encode");
                prop_assert_eq!(decode_slave_packet(&one), Ok(Some((*p, one.len()))));
            }
        }

        #[test]
        fn master_roundtrip(packets in proptest::collection::vec(arb_master_packet(), 0..6)) {
            let views: Vec<_> = packets.iter().map(OwnedMaster::view).collect();
            let enc = encode_master_packets(&views).expect("encode");
            let (dec, n) = decode_master_packets(&enc).expect("decode");
            prop_assert_eq!(n, enc.len());
            prop_assert_eq!(&dec, &views);
            prop_assert_eq!(encode_master_packets(&dec).expect("re-encode"), enc);
        }

        #[test]
        fn slave_split_feeding(packets in proptest::collection::vec(arb_slave_packet(), 1..6),
                               cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6)) {
            let enc = encode_slave_packets(&packets).expect("encode");
            for points in split_points(enc.len(), &cuts) {
                let mut acc: Vec<u8> = Vec::new();
                let mut got = Vec::new();
                let mut last = 0;
                for &p in points.iter().chain(std::iter::once(&enc.len())) {
                    acc.extend_from_slice(&enc[last..p]);
                    last = p;
                    let (ps, n) = decode_slave_packets(&acc).expect("partial decode");
                    got.extend(ps);
                    acc.drain(..n);
                }
                prop_assert!(acc.is_empty());
                prop_assert_eq!(&got, &packets);
            }
        }

        #[test]
        fn master_split_feeding(packets in proptest::collection::vec(arb_master_packet(), 1..4),
                                cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6)) {
            let views: Vec<_> = packets.iter().map(OwnedMaster::view).collect();
            let enc = encode_master_packets(&views).expect("encode");
            for points in split_points(enc.len(), &cuts) {
                let mut acc: Vec<u8> = Vec::new();
                let mut got = Vec::new();
                let mut last = 0;
                for &p in points.iter().chain(std::iter::once(&enc.len())) {
                    acc.extend_from_slice(&enc[last..p]);
                    last = p;
                    let (ps, n) = decode_master_packets(&acc).expect("partial decode");
                    // Re-encode what came out now: the bodies borrow `acc`.
                    got.push(encode_master_packets(&ps).expect("re-encode"));
                    acc.drain(..n);
                }
                prop_assert!(acc.is_empty());
                prop_assert_eq!(got.concat(), enc.clone());
            }
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_slave_packets(&data);
            let _ = decode_master_packets(&data);
            let _ = decode_master_packets_with_limit(&data, 16);
        }

        #[test]
        fn prefixes_never_disagree(packets in proptest::collection::vec(arb_master_packet(), 1..3),
                                   edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
            // Whatever the bytes, a prefix decodes to a prefix of the records, and fails only
            // where the whole fails.
            let views: Vec<_> = packets.iter().map(OwnedMaster::view).collect();
            let mut enc = encode_master_packets(&views).expect("encode");
            for (at, b) in edits {
                let i = at.index(enc.len());
                enc[i] = b;
            }
            let whole = decode_master_packets_with_limit(&enc, 64);
            for cut in 0..=enc.len() {
                match (decode_master_packets_with_limit(&enc[..cut], 64), &whole) {
                    (Ok((ps, n)), Ok((all, m))) => {
                        prop_assert!(n <= *m);
                        prop_assert_eq!(&ps[..], &all[..ps.len()]);
                    }
                    (Ok((_, n)), Err(e)) => prop_assert!(n <= e.offset),
                    (Err(e), Err(w)) => prop_assert_eq!(&e, w),
                    (Err(e), Ok(_)) => prop_assert!(false, "prefix {} fails: {}", cut, e),
                }
            }
        }
    }
}
