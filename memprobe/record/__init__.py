"""The record path: ``memprobe record -- CMD`` and ``memprobe watch PID`` on a job memprobe did not
write (``command``: the command's life cycle; ``recording``: sampling, marks, the meta, the
finish; ``unreadable``: what is said of a process memprobe cannot read), the ``memprobe.mark()``
hook (``marks``) and ``memprobe.record_command`` (``api``). What a recording means is computed
from its results folder by :mod:`memprobe.analysis.recorded`.

Importing this package imports nothing: ``memprobe.mark`` is imported by every training script."""
