"""The record path: ``memprobe record -- CMD`` and ``memprobe watch PID`` on a job memprobe did not
write (``command``), the ``memprobe.mark()`` hook (``marks``), and the analysis of a recorded tree
(``tree_analysis``: each process's growth over the window of its kind; ``tree_verdict``: the
culprit and the projection; ``summary``: the job's summary from them).

Importing this package imports nothing: ``memprobe.mark`` is imported by every training script."""
