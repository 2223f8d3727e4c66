"""List the scenarios that come with memprobe, or copy one out as a start for your own.

`memprobe run NAME` runs a shipped scenario by name (a path to a YAML file wins when the file
exists). `memprobe scenarios copy NAME [DEST]` writes its YAML to DEST (default: ./NAME.yaml; a
folder: DEST/NAME.yaml), with the factory modules it imports by name next to it; nothing that
exists is ever overwritten.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import textwrap
from pathlib import Path

from memprobe.core.errors import UsageError

NAME = "scenarios"
HELP = "list the shipped scenarios, or copy one out to start your own"
EPILOG = """examples:
  memprobe scenarios                                   # each shipped scenario: name, runs, what it shows
  memprobe run lists_vs_arrays --quick                 # run one by name
  memprobe scenarios copy lists_vs_arrays my.yaml      # a copy to edit; then: memprobe run my.yaml
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    copy = sub.add_parser(
        "copy",
        help="copy a shipped scenario to a file of your own (never overwriting)",
        description="Write the shipped scenario NAME to DEST (default: ./NAME.yaml; a folder: "
        "DEST/NAME.yaml), with the factory modules it imports by name next to it. Nothing that "
        "exists is overwritten.",
    )
    copy.add_argument("name", metavar="NAME", help="a shipped scenario (memprobe scenarios lists them)")
    copy.add_argument("dest", metavar="DEST", nargs="?", help="the file (or folder) to write")


def main(args: argparse.Namespace) -> int:
    if args.action == "copy":
        return _copy(args.name, args.dest)
    return _list()


def _list() -> int:
    from memprobe.cli.console import say
    from memprobe.run.scenario import load_scenario
    from memprobe.run.scenario_file import SHIPPED_DIR, shipped_scenarios

    shipped = shipped_scenarios()
    text_width = max(40, min(100, shutil.get_terminal_size().columns - 7))
    lines = ["shipped scenarios (run one: memprobe run NAME [--quick]):"]
    for name, path in shipped.items():
        scenario = load_scenario(path)
        runs = len(scenario.runs())
        lines += ["", f"  {name} ({runs} run{'s' if runs != 1 else ''})"]
        lines += [
            "      " + line for line in textwrap.wrap(" ".join(scenario.description.split()), text_width)
        ]
    lines += [
        "",
        f"files: {SHIPPED_DIR.resolve()}",
        "start your own: memprobe scenarios copy NAME my.yaml, then memprobe run my.yaml",
    ]
    say("\n".join(lines))
    return 0


def _copy(name: str, dest: str | None) -> int:
    from memprobe.cli.console import say
    from memprobe.run.scenario import load_scenario
    from memprobe.run.scenario_file import display_path, shipped_scenario, shown_path

    source = shipped_scenario(name)
    target = Path(dest) if dest else Path(f"{name}.yaml")
    if target.is_dir():
        target = target / f"{name}.yaml"
    elif dest and dest.endswith(os.sep):
        raise UsageError(f"scenarios copy: {shown_path(dest)}: no such folder; nothing was written")
    # The factory modules the scenario imports by name from its own folder go next to the copy,
    # where the copy looks for them (its folder is on the import path).
    files = [(source, target)]
    for factory in load_scenario(source).factories:
        module = source.parent / f"{factory.factory.split(':', 1)[0].split('.', 1)[0]}.py"
        if module.is_file() and (module, target.parent / module.name) not in files:
            files.append((module, target.parent / module.name))
    todo = []
    for src, dst in files:
        if os.path.lexists(dst):
            if src != source and dst.is_file() and src.read_bytes() == dst.read_bytes():
                continue  # the same module is already there: nothing to write
            raise UsageError(
                f"scenarios copy: {shown_path(dst)}: exists; nothing was written (never overwritten)"
            )
        todo.append((src, dst))
    written: list[Path] = []
    try:
        for src, dst in todo:
            with open(dst, "xb") as f:  # x: fails rather than overwrite what appeared meanwhile
                written.append(dst)
                f.write(src.read_bytes())
    except OSError as exc:
        for path in written:  # ours: created by this copy
            path.unlink(missing_ok=True)
        raise UsageError(
            f"scenarios copy: {shown_path(exc.filename or dst)}: cannot write: {exc.strerror}; nothing was written"
        ) from None
    shown_target = shown_path(target)  # quoted for the shell when printable, else escaped
    say(
        f"memprobe: wrote {', '.join(shown_path(p) for p in written)}\n"
        "edit it (its name: names the results folder), then run it: memprobe run "
        + (shlex.quote(shown_target) if shown_target == display_path(target) else shown_target)
    )
    return 0
