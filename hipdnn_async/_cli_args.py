"""Command-line checks shared by ``hipdnn-async``'s commands (``cli``, ``_bench``, the
demo): an output file is checked before minutes of work, not after."""
from __future__ import annotations

import os

__all__ = ["check_output_file", "check_output_folder"]


def check_output_file(parser, flag: str, path: str) -> None:
    """``parser.error`` (exit 2) unless ``path``, the value of option ``flag``, names a
    file (not a directory) in an existing folder this process may write to; an empty
    ``path`` is an error too."""
    if not path:
        parser.error(f"{flag} needs a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        parser.error(f"{flag} {path}: folder {folder} does not exist or is not writable")
    if os.path.isdir(path):
        parser.error(f"{flag} {path}: is a directory; give a file name")


def check_output_folder(parser, flag: str, path: str) -> None:
    """``parser.error`` (exit 2) unless ``path``, the value of option ``flag``, is an
    existing folder this process may write to; the message says which of the three fails."""
    if not os.path.exists(path):
        parser.error(f"{flag} {path}: folder does not exist (create it first)")
    if not os.path.isdir(path):
        parser.error(f"{flag} {path}: is not a folder")
    if not os.access(path, os.W_OK):
        parser.error(f"{flag} {path}: folder is not writable")
