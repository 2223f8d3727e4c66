from memprobe.cli import entry

entry()
