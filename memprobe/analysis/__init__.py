"""Everything a results folder's figures are computed by, read from the folder alone (never from
/proc or a running pipeline): :mod:`memprobe.analysis.runs` chooses each run's analysis by what
wrote it, a scenario run's (:mod:`memprobe.analysis.scenario`) or a recorded job's
(:mod:`memprobe.analysis.recorded`: each process's own growth over the window of its kind, the
verdict in words, the projection, the job against its memory limit and the time to it). The
report, the terminal and the live view format what these compute. Importing the package imports
nothing.
"""
