"""``svcctl``: the operator's command-line tool for the licensing authority.

Online subcommands are clients of the HTTP admin API (the same code path as any other
API client; no database access). ``mint``, ``inspect``, ``keygen``, ``root-keygen`` and
``certify`` work offline with files only. Standard library + ``cryptography``; no Django.
"""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class OfflineError(Exception):
    """An offline operation (mint, inspect, keygen, certify...) that cannot be done; the
    message says why."""
