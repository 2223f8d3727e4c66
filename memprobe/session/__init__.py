"""What both pipelines need to start, signal and end a process group, to name the writer and the
machine, and to finish a results folder: :mod:`memprobe.session.group` (a process group of its
own, ended together), :mod:`memprobe.session.signals` (SIGINT, SIGTERM, SIGHUP taken note of),
:mod:`memprobe.session.identity` (the machine and memprobe's own process, for the manifest) and
:mod:`memprobe.session.finish` (the folder finished, analysed, summary.json and the page written).
The run pipeline (``memprobe run``, ``profile()``) and the record pipeline (``record``, ``watch``,
``top``) import it; it imports neither. Importing the package imports nothing.
"""
