"""``pgoutput-dump``: print or store the changes of a pgoutput capture or of a live
replication slot.

One pipeline serves both (:mod:`.pipeline`): a source (:mod:`.capture_source`,
:mod:`.live_source`) yields decoded batches in groups of whole committed transactions,
:mod:`.filters` keep what was asked for, and sinks print (:mod:`.render`: jsonl and pretty,
rendered by the crates), store (:mod:`.file_sinks`) or count (:mod:`.stats`) them.
:mod:`.arguments` is the command line, :mod:`.main` the exit status and error line.
"""

from .arguments import PROG, UsageError, build_parser
from .file_sinks import read_checkpoint
from .main import main
from .pipeline import run

__all__ = ["PROG", "UsageError", "build_parser", "main", "read_checkpoint", "run"]
