//! Encoders of what a client writes or a test needs written, in the shape of rust-postgres'
//! `postgres-protocol` `message/frontend.rs`: free functions appending one message to a
//! buffer, so that a caller can reuse one allocation for many messages. The parsers in
//! this crate read what these write (`parse_message(encoded) == message`).

pub mod pgoutput;
pub mod walsender;
