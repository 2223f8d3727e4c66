"""The errors memprobe raises for problems a user can act on."""
from __future__ import annotations


class MemprobeError(Exception):
    """A problem the user can fix; the CLI prints it without a traceback."""

    exit_code = 1


class UsageError(MemprobeError):
    """Bad input: a scenario file, a flag, a factory name. Exit code 2."""

    exit_code = 2
