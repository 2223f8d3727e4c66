"""A fork run's process leaves CPython's warning about fork() in a process with threads out of its
output (child.log), and only that warning (docs/pythons.md)."""

from __future__ import annotations

import warnings

from memprobe.run import child

# CPython 3.12+'s words (os.fork in a process with other threads), with the pid it names.
FORK_WARNING = "This process (pid=4242) is multi-threaded, use of fork() may lead to deadlocks in the child."


def shown(message: str, module: str, category: type[Warning] = DeprecationWarning) -> list[str]:
    """What a run's process shows of one warning raised from ``module``, with every warning shown
    (as PYTHONWARNINGS=always or -X dev would have it) and the fork run's filter added."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        child.quiet_fork_with_threads()
        warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 73, module=module)
    return [str(w.message) for w in caught]


def test_the_warning_multiprocessing_s_fork_raises_is_left_out() -> None:
    assert shown(FORK_WARNING, "multiprocessing.popen_fork") == []


def test_other_warnings_are_shown_as_before() -> None:
    # The same words from the user's own os.fork (their dataset's module), another deprecation
    # from multiprocessing, and a dataset's own warning: all shown.
    assert shown(FORK_WARNING, "user_data") == [FORK_WARNING]
    assert shown("something else", "multiprocessing.popen_fork") == ["something else"]
    assert shown(FORK_WARNING, "multiprocessing.popen_fork", UserWarning) == [FORK_WARNING]
