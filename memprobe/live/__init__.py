"""The live view of a recording, for ``memprobe top`` and ``memprobe record --live``: its model
(:mod:`memprobe.live.model`: fed the sampler's rows, the figures so far by the analysis' rules),
its displays (:mod:`memprobe.live.view`: the alternate screen, a line every few seconds;
:mod:`memprobe.live.panel`: the foot of the terminal a job shares) and the writer that never waits
for the terminal (:mod:`memprobe.live.outlet`). The commands wire it to a recording as its
observer; the record pipeline knows it only as that. Importing the package imports nothing.
"""
