//! What a [`Decoder`](crate::Decoder) is asked to do.

use std::path::PathBuf;

use crate::types::TypeOptions;

/// When changes come out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EmitMode {
    /// Only changes of committed transactions, in commit order (the default).
    #[default]
    Committed,
    /// Every change as it arrives, with a `_status` column (`committed` for a
    /// transaction sent whole at its commit, `prepared` for one sent at its PREPARE,
    /// `in-progress` for a streamed one) and `_subxid`; the fate of each transaction
    /// is in the Transactions table (including `subtransaction-aborted` rows).
    Arrived,
}

#[allow(non_upper_case_globals)]
impl EmitMode {
    /// Another name of [`EmitMode::Arrived`].
    pub const Immediate: EmitMode = EmitMode::Arrived;
}

/// Options of a [`Decoder`](crate::Decoder).
#[derive(Clone, Debug)]
pub struct DecoderOptions {
    /// How columns are typed (special values, views, binary mode).
    pub types: TypeOptions,
    /// Rows per output batch (default 65536).
    pub batch_size: usize,
    /// Bytes of buffered messages of open transactions beyond which the largest
    /// are written to a temporary file (default 256 MiB). A transaction sent whole
    /// keeps up to half of it as decoded rows awaiting its Commit, then the rest of it
    /// as messages.
    pub memory_limit: usize,
    /// Where spill files go (default: the system's temporary directory).
    pub spill_dir: Option<PathBuf>,
    pub emit: EmitMode,
    /// Take `types.binary` from the stream (default true): the first value cell of the
    /// first change, sent as text ('t') or binary ('b'), says how the slot was started.
    /// Tables whose first rows held only nulls keep `types.binary` as given.
    pub detect_binary: bool,
}

impl Default for DecoderOptions {
    fn default() -> Self {
        DecoderOptions {
            types: TypeOptions::default(),
            batch_size: 65536,
            memory_limit: 256 << 20,
            spill_dir: None,
            emit: EmitMode::Committed,
            detect_binary: true,
        }
    }
}
