//! Pure-Rust RocketMQ encodings used by rmq_ha.
//!
//! * [`message`]: the stored-message (CommitLog record) layout, with the whole-record CRC;
//! * [`remoting`]: remoting frames with JSON and ROCKETMQ binary headers;
//! * [`batch`]: the SEND_BATCH_MESSAGE body;
//! * [`ha`]: the controller-mode HA replication records (handshakes, transfer, ack).

pub mod batch;
pub mod ha;
pub mod message;
pub mod remoting;
pub mod send;

pub use message::{
    body_crc, decode_record, decode_record_checked, decode_record_structure, encode_record,
    encode_record_with_crc, encoded_len, encoded_len_with_crc, DecodeError, Decoded, EncodeError,
    MessageIn, RecordView, StoreStamp, BLANK_MAGIC, MAGIC_V1, MAGIC_V2,
};
