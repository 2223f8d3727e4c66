"""memprobe inside a training loop: :mod:`memprobe.integrations.watching` (a plain loop, and what
the callbacks share), :mod:`memprobe.integrations.lightning` (Lightning's ``Trainer``) and
:mod:`memprobe.integrations.hf` (Hugging Face's ``Trainer``). Importing this package imports
nothing; each callback module imports its trainer library, and only it."""
