//! Arbitrary streams into the Arrow decoder: the input is a sequence of messages in
//! the golden captures' framing (u64 BE lsn, u32 BE xid, u32 BE length, bytes; a length
//! past the end takes what is left), decoded with options chosen by the first byte.
//! Any error is fine; a panic is not.
#![no_main]

use arrow_buffer::Buffer;
use libfuzzer_sys::fuzz_target;
use pgoutput_arrow::{Decoder, DecoderOptions, EmitMode, SpecialValues, TypeOptions};

fn options(flags: u8) -> DecoderOptions {
    let special_values = match flags >> 4 & 3 {
        0 => SpecialValues::Error,
        1 => SpecialValues::Null,
        2 => SpecialValues::Text,
        _ => SpecialValues::Keep,
    };
    DecoderOptions {
        types: TypeOptions { views: flags & 1 == 0, binary: flags & 2 != 0, special_values, ..Default::default() },
        // Small batches so that cuts inside transactions and carries are exercised.
        batch_size: if flags & 4 != 0 { 3 } else { 65536 },
        emit: if flags & 8 != 0 { EmitMode::Arrived } else { EmitMode::Committed },
        detect_binary: flags & 64 == 0,
        ..Default::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else { return };
    let mut decoder = Decoder::new(options(flags));
    while rest.len() >= 16 {
        let lsn = u64::from_be_bytes(rest[..8].try_into().unwrap());
        let len = u32::from_be_bytes(rest[12..16].try_into().unwrap()) as usize;
        let end = 16 + len.min(rest.len() - 16);
        let message = Buffer::from(rest[16..end].to_vec());
        rest = &rest[end..];
        // After an error the decoder goes on (a bad message is skipped) or refuses the
        // rest with an error each time (its state is not sound): both are fine here.
        let _ = decoder.push(lsn, &message);
        let _ = decoder.take_ready();
    }
    let _ = decoder.finish();
});
