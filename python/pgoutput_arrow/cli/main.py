"""``pgoutput-dump``'s entry point: the exit status and the one line on stderr that says
what went wrong (``--debug`` for the traceback)."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Sequence

import pyarrow as pa

from ..exceptions import PgoutputError
from .arguments import PROG, UsageError, build_parser
from .pipeline import run
from .slot_commands import is_slot_command, run_slot_command

__all__ = ["main"]


#: The pip package that provides a module imported only by some ways in.
_PACKAGE_OF_MODULE = {"psycopg2": "psycopg2-binary", "pyspark": "pyspark", "pandas": "pandas"}


def _missing_package(e: ImportError) -> str:
    """One line naming what to install, for an optional module that is not there."""
    if not e.name:
        return _one_line(e)
    module = e.name.split(".")[0]
    package = _PACKAGE_OF_MODULE.get(module, module)
    return (f"the Python package {package} is not installed (import of {e.name} failed): "
            f"pip install {package}")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text


def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None) -> None:
    """A warning of the package as one line like the others (``--debug``: Python's own form,
    with the file and line that warned)."""
    sys.stderr.write(f"{PROG}: warning: {' '.join(str(message).split())}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The package's notices (a keyless table appended to Delta, ...) as our other lines.
    logging.basicConfig(format=f"{PROG}: %(message)s",
                        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING)
    if not getattr(args, "debug", False):
        warnings.showwarning = _warning_line
    try:
        if is_slot_command(args):
            return run_slot_command(args, sys.stdout)
        return run(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except BrokenPipeError:
        # The reader went away (| head): not an error. Point stdout at /dev/null so that
        # the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except ImportError as e:  # an optional dependency (psycopg2 for --dsn) is missing
        if args.debug:
            raise
        sys.stderr.write(f"{PROG}: error: {_missing_package(e)}\n")
        return 1
    except (PgoutputError, OSError, pa.ArrowException, ValueError, TypeError) as e:
        if args.debug:
            raise
        where = f"{args.input}: " if isinstance(e, PgoutputError) and args.input not in ("-", None) \
            and not str(e).startswith(str(args.input)) else ""
        sys.stderr.write(f"{PROG}: error: {where}{_one_line(e)}\n")
        return 1
