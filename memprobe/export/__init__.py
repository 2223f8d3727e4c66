"""A results folder written in other tools' formats (``memprobe export``): a Chrome/Perfetto
trace (:mod:`memprobe.export.trace`), TensorBoard scalars (:mod:`memprobe.export.tensorboard`)
and OpenMetrics text (:mod:`memprobe.export.openmetrics`). Each formats what the analysis
computed (:mod:`memprobe.export.source`), and computes no figure."""
