"""Write the bytecode of the modules memprobe and its tests import, once (`make install` runs this).

pip installs with ``--no-compile``. Where PYTHONDONTWRITEBYTECODE is set (as on the build VM) no
process writes a ``.pyc``, and each process that imports torch compiled its ~1,000 modules again:
3.3 CPU-s more per import (5.9 against 2.6 s, measured). Compiling every module of the environment
(``compileall``: ~11,500 files, ~20 s of wall time on 2 cores) compiles ten times what is ever
imported here. This imports what is, once, in one process (the Makefile clears
PYTHONDONTWRITEBYTECODE for it), so Python writes each of those modules' ``.pyc``: ~1,700
modules, ~2,000 files.

What it imports: every module of memprobe (whatever they import at their top), and the libraries
memprobe imports inside functions (a run's process imports torch when it starts, the report
plotly when it draws) or that its users' jobs and the tests start (torchrun, pytest's workers).
A module that is not installed (an optional extra) is passed over; nvImageCodec is left to its
first import (a few Python files, and it prints a loader's error on a machine without nvTIFF). A
module imported by nothing here is compiled by the first process that imports it, as Python does.

    python tools/warm_bytecode.py [--test]    # --test: the test suite's libraries too
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

# Imported inside memprobe's functions, or by the processes a run or a recording starts.
RUNTIME = (
    "torch",
    "torch.utils.data",
    "torch.multiprocessing",
    "torch.distributed.run",  # torchrun
    "torchdata.nodes",
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.parquet",
    "pyarrow.compute",
    "plotly.offline",
    "plotly.graph_objects",
    "jinja2",
    "yaml",
    "PIL.Image",
    "PIL.JpegImagePlugin",
    "simplejpeg",
    "skimage.data",  # the decode benchmark's sample images (the images extra)
    "tensorboard.summary.writer.event_file_writer",  # memprobe export --format tensorboard (the test extra)
    "tensorboard.compat.proto.summary_pb2",
)
# What `make test` adds: pytest and its workers (four processes import them at once as the
# suite starts), psutil, and the trainers the callbacks' tests run.
TEST = (
    "pytest",
    "_pytest.pytester",
    "xdist.plugin",
    "xdist.remote",
    "xdist.scheduler",
    "execnet",
    "psutil",
    # The trainers extra: the callbacks' tests start a Lightning fit and a Hugging Face Trainer
    # (memprobe.integrations imports lightning.pytorch and transformers' callback API with
    # itself) and read TensorBoard's event files back.
    "lightning.pytorch.loggers",
    "transformers.trainer",
    "torch.utils.tensorboard",
    "tensorboard.backend.event_processing.event_accumulator",
)


def warm(names: tuple[str, ...]) -> list[str]:
    """Import each of ``names``; the ones not installed are returned."""
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def memprobe_modules() -> tuple[str, ...]:
    import memprobe

    skip = ("__main__", "pytest_plugin")  # the command's entry, and what pytest loads as a plugin
    return tuple(
        m.name for m in pkgutil.walk_packages(memprobe.__path__, "memprobe.") if not m.name.endswith(skip)
    )


def main(argv: list[str]) -> int:
    if sys.dont_write_bytecode:
        print("warm_bytecode: bytecode writing is off here (PYTHONDONTWRITEBYTECODE or -B): nothing to do")
        return 0
    names = RUNTIME + (TEST if "--test" in argv else ())
    missing = warm(names) + warm(memprobe_modules())
    n = sum(1 for m in sys.modules.values() if getattr(m, "__cached__", None))
    print(
        f"warm_bytecode: {n} modules imported, their bytecode written"
        + (f" (not installed: {', '.join(missing)})" if missing else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
