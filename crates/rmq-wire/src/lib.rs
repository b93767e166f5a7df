//! Pure-Rust RocketMQ encodings used by rmq_ha.
//!
//! Today: the stored-message (CommitLog record) layout. The remoting frame codec and the HA
//! handshake/transfer formats join this crate with their own issues.

pub mod message;

pub use message::{
    body_crc, decode_record, decode_record_checked, decode_record_structure, encode_record,
    encode_record_with_crc, encoded_len, encoded_len_with_crc, DecodeError, Decoded, EncodeError,
    MessageIn, RecordView, StoreStamp, BLANK_MAGIC, MAGIC_V1, MAGIC_V2,
};
