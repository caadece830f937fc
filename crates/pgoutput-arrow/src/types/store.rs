//! Utf8 and Binary storage, as views into the input buffers where possible (zero copy).
//!
//! A value longer than 12 bytes that lies inside a [`Source`] buffer is appended as a
//! view of that buffer: the buffer becomes one data block of the output array (once
//! per buffer id), and the value is not copied. Shorter values are inlined in the view
//! itself, as Arrow's view layout prescribes, and need no block.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, BinaryViewBuilder, StringBuilder, StringViewBuilder};
use arrow_array::ArrayRef;
use arrow_schema::DataType;

use super::value::{Result, Source, ValueError};

/// Values of at most this many bytes live inside the view itself.
const MAX_INLINE: usize = 12;

/// Utf8 and Binary arrays address their values with 32-bit offsets. The decoder cuts a
/// batch long before (see `TableBuilder::full`); a value that would still go past it
/// (text rendered from a much shorter binary value) is an error, not a panic.
fn check_fits(used: usize, len: usize) -> Result<()> {
    if used.saturating_add(len) > i32::MAX as usize {
        return Err(ValueError::new(format!(
            "a value of {len} bytes after {used} bytes already in this batch's column would pass the 2 GiB \
             that utf8 and binary arrays hold; decode with views (the default) or a smaller batch_size"
        )));
    }
    Ok(())
}

pub(crate) fn check_utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| {
        ValueError::new(format!("invalid UTF-8 in a text value at byte {}", e.valid_up_to()))
    })
}

/// Which block of the view builder holds each input buffer already referenced.
#[derive(Default)]
pub(crate) struct Blocks {
    last: Option<(u64, u32)>,
    by_id: HashMap<u64, u32>,
}

impl Blocks {
    /// The block holding `source.buffer`, and the value's offset in it, when a view can
    /// point there: the bytes must be exactly `value` at `source.offset`.
    #[inline]
    fn locate(&mut self, value: &[u8], source: Source<'_>, mut add: impl FnMut() -> u32) -> Option<(u32, u32)> {
        let end = source.offset.checked_add(value.len())?;
        let inside = source.buffer.as_slice().get(source.offset..end)?;
        // Views hold u32 offsets; a value elsewhere than `bytes` would be a caller's mistake.
        if inside.as_ptr() != value.as_ptr() || source.buffer.len() >= u32::MAX as usize {
            return None;
        }
        let offset = u32::try_from(source.offset).ok()?;
        let block = match self.last {
            Some((id, block)) if id == source.buffer_id => block,
            _ => {
                let block = *self.by_id.entry(source.buffer_id).or_insert_with(&mut add);
                self.last = Some((source.buffer_id, block));
                block
            }
        };
        Some((block, offset))
    }

    fn clear(&mut self) {
        self.last = None;
        self.by_id.clear();
    }
}

pub(crate) enum StrStore {
    View(StringViewBuilder, Blocks),
    Plain(StringBuilder),
}

impl StrStore {
    pub(crate) fn new(views: bool) -> Self {
        if views {
            StrStore::View(StringViewBuilder::new(), Blocks::default())
        } else {
            StrStore::Plain(StringBuilder::new())
        }
    }

    pub(crate) fn data_type(&self) -> DataType {
        match self {
            StrStore::View(..) => DataType::Utf8View,
            StrStore::Plain(_) => DataType::Utf8,
        }
    }

    #[inline]
    pub(crate) fn append_null(&mut self) {
        match self {
            StrStore::View(b, _) => b.append_null(),
            StrStore::Plain(b) => b.append_null(),
        }
    }

    /// Appends a UTF-8 value (checked here), as a view of `source` when it is long enough.
    #[inline]
    pub(crate) fn append(&mut self, value: &[u8], source: Option<Source<'_>>) -> Result<()> {
        match self {
            StrStore::View(b, blocks) => {
                if value.len() > MAX_INLINE {
                    if let Some(src) = source {
                        if let Some((block, offset)) =
                            blocks.locate(value, src, || b.append_block(src.buffer.clone()))
                        {
                            // try_append_view checks the UTF-8 of the value.
                            return b.try_append_view(block, offset, value.len() as u32).map_err(|_| {
                                check_utf8(value).err().unwrap_or_else(|| ValueError::new("invalid UTF-8"))
                            });
                        }
                    }
                }
                b.append_value(check_utf8(value)?);
            }
            StrStore::Plain(b) => {
                check_fits(b.values_slice().len(), value.len())?;
                b.append_value(check_utf8(value)?)
            }
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            StrStore::View(b, blocks) => {
                blocks.clear();
                Arc::new(b.finish())
            }
            StrStore::Plain(b) => Arc::new(b.finish()),
        }
    }
}

pub(crate) enum BinStore {
    View(BinaryViewBuilder, Blocks),
    Plain(BinaryBuilder),
}

impl BinStore {
    pub(crate) fn new(views: bool) -> Self {
        if views {
            BinStore::View(BinaryViewBuilder::new(), Blocks::default())
        } else {
            BinStore::Plain(BinaryBuilder::new())
        }
    }

    pub(crate) fn data_type(&self) -> DataType {
        match self {
            BinStore::View(..) => DataType::BinaryView,
            BinStore::Plain(_) => DataType::Binary,
        }
    }

    pub(crate) fn append_null(&mut self) {
        match self {
            BinStore::View(b, _) => b.append_null(),
            BinStore::Plain(b) => b.append_null(),
        }
    }

    #[inline]
    pub(crate) fn append(&mut self, value: &[u8], source: Option<Source<'_>>) -> Result<()> {
        match self {
            BinStore::View(b, blocks) => {
                if value.len() > MAX_INLINE {
                    if let Some(src) = source {
                        if let Some((block, offset)) =
                            blocks.locate(value, src, || b.append_block(src.buffer.clone()))
                        {
                            // Cannot fail: the range was checked inside the block just located.
                            if b.try_append_view(block, offset, value.len() as u32).is_ok() {
                                return Ok(());
                            }
                        }
                    }
                }
                b.append_value(value);
            }
            BinStore::Plain(b) => {
                check_fits(b.values_slice().len(), value.len())?;
                b.append_value(value);
            }
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            BinStore::View(b, blocks) => {
                blocks.clear();
                Arc::new(b.finish())
            }
            BinStore::Plain(b) => Arc::new(b.finish()),
        }
    }
}
