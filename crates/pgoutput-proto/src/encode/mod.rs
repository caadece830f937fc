//! Encoders: free functions writing one message into a buffer, in the shape of
//! rust-postgres' `postgres-protocol/src/message/frontend.rs`. They write what the
//! parser reads, so `parse_message(encoded) == message`.

pub mod pgoutput;
