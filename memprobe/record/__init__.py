"""The record path: ``memprobe record -- CMD`` and ``memprobe watch PID`` on a job memprobe did not
write (``command``: the command's life cycle; ``recording``: sampling, marks, the meta, the
finish), the ``memprobe.mark()`` hook (``marks``), and the analysis of a recorded tree
(``process``, ``processes``: what each process is, as the meta lists it, an older version's list
completed on load by :mod:`memprobe.results.upgrade`;
``windows``, ``tree_analysis``, ``table``: each process's own growth over the window of its
kind; ``culprit``, ``projection``, ``summary``: the verdict in words, other worker and rank
counts, the job's summary).

Importing this package imports nothing: ``memprobe.mark`` is imported by every training script."""
