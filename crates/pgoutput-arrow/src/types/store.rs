//! Utf8 and Binary storage, as views into the input buffers where possible (zero copy).
//!
//! A value longer than 12 bytes that lies inside a [`Source`] buffer is appended as a
//! view of that buffer: the buffer becomes one data block of the output array (once
//! per buffer id), and the value is not copied. Shorter values are inlined in the view
//! itself, as Arrow's view layout prescribes, and need no block.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, BinaryViewBuilder, StringViewBuilder};
use arrow_array::{ArrayRef, StringArray};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::DataType;

use super::render::{render_scalar, StrKind};
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
        ValueError::new(format!(
            "invalid UTF-8 in a text value at byte {} (PostgreSQL sends text in the session's client_encoding: \
             take a capture with client_encoding UTF8)",
            e.valid_up_to()
        ))
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

/// A Utf8 column built as its three buffers. Arrow's `StringBuilder` takes a `&str`, which
/// costs a `from_utf8` call per value; here an ASCII value (nearly every one) is checked
/// inline, and text this crate rendered is not checked again.
pub(crate) struct Utf8Out {
    values: Vec<u8>,
    offsets: Vec<i32>,
    nulls: NullBufferBuilder,
    /// Bytes of the last batch's values (see [`StrStore::reserve`]).
    last_bytes: usize,
}

impl Utf8Out {
    fn new() -> Self {
        Utf8Out { values: Vec::new(), offsets: vec![0], nulls: NullBufferBuilder::new(0), last_bytes: 0 }
    }

    #[inline]
    fn append_checked(&mut self, value: &[u8]) -> Result<()> {
        if !value.is_ascii() {
            check_utf8(value)?;
        }
        self.append_unchecked(value)
    }

    /// `value` is known to be UTF-8.
    #[inline]
    fn append_unchecked(&mut self, value: &[u8]) -> Result<()> {
        check_fits(self.values.len(), value.len())?;
        self.values.extend_from_slice(value);
        // Cannot truncate: check_fits kept the values within i32::MAX bytes.
        self.offsets.push(self.values.len() as i32);
        self.nulls.append_non_null();
        Ok(())
    }

    /// Appends the text `render` writes straight after the values so far (UTF-8 only, and
    /// nothing when it fails): no scratch `String`, no copy.
    #[inline]
    fn append_rendered(&mut self, render: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
        let start = self.values.len();
        if let Err(e) = render(&mut self.values) {
            self.values.truncate(start);
            return Err(e);
        }
        if let Err(e) = check_fits(start, self.values.len() - start) {
            self.values.truncate(start);
            return Err(e);
        }
        // Cannot truncate: check_fits kept the values within i32::MAX bytes.
        self.offsets.push(self.values.len() as i32);
        self.nulls.append_non_null();
        Ok(())
    }

    #[inline]
    fn append_null(&mut self) {
        self.offsets.push(self.values.len() as i32);
        self.nulls.append_null();
    }

    fn finish(&mut self) -> StringArray {
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        self.last_bytes = self.values.len();
        let values = Buffer::from_vec(std::mem::take(&mut self.values));
        // The offsets grow from 0 to the values' length, and every value was checked as it
        // came (try_new checks the whole buffer once more, in one pass).
        match StringArray::try_new(OffsetBuffer::new(ScalarBuffer::from(offsets)), values, self.nulls.finish()) {
            Ok(a) => a,
            Err(e) => panic!("utf8 offsets or values inconsistent: {e}"),
        }
    }
}

pub(crate) enum StrStore {
    View(StringViewBuilder, Blocks),
    Plain(Utf8Out),
}

impl StrStore {
    pub(crate) fn new(views: bool) -> Self {
        if views {
            StrStore::View(StringViewBuilder::new(), Blocks::default())
        } else {
            StrStore::Plain(Utf8Out::new())
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
            StrStore::Plain(b) => b.append_checked(value)?,
        }
        Ok(())
    }

    /// Makes room for `rows` values and as many bytes as the last batch had, before the first
    /// value of a batch.
    pub(crate) fn reserve(&mut self, rows: usize) {
        match self {
            StrStore::View(..) => {}
            StrStore::Plain(b) => {
                b.offsets.reserve(rows);
                b.values.reserve(b.last_bytes);
            }
        }
    }

    /// Appends ASCII text this crate rendered in bytes (a uuid's).
    #[inline]
    pub(crate) fn append_ascii(&mut self, value: &[u8]) -> Result<()> {
        debug_assert!(value.is_ascii());
        match self {
            StrStore::View(b, _) => b.append_value(check_utf8(value)?),
            StrStore::Plain(b) => b.append_unchecked(value)?,
        }
        Ok(())
    }

    /// Appends a binary value of a [scalar kind](StrKind::is_scalar) rendered as its text:
    /// straight into a plain column's bytes, through `scratch` into a view column.
    #[inline]
    pub(crate) fn append_scalar(&mut self, kind: StrKind, bytes: &[u8], scratch: &mut String) -> Result<()> {
        match self {
            StrStore::View(b, _) => {
                scratch.clear();
                render_scalar(kind, bytes, scratch)?;
                b.append_value(scratch.as_str());
                Ok(())
            }
            StrStore::Plain(b) => b.append_rendered(|v| render_scalar(kind, bytes, v)),
        }
    }

    /// Appends text this crate rendered (UTF-8 already).
    #[inline]
    pub(crate) fn append_str(&mut self, value: &str) -> Result<()> {
        match self {
            StrStore::View(b, _) => b.append_value(value),
            StrStore::Plain(b) => b.append_unchecked(value.as_bytes())?,
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
