"""A results folder's life: created, described by its manifest, finished, opened and loaded back.

Layout of a results folder::

    manifest.json          schema version, kind, name, environment, status, timing, writer
    scenario.yaml          the scenario file as run (``memprobe run`` only)
    runs/<run_id>/meta.json      the run's spec and outcome (written via a temp file + rename)
    runs/<run_id>/*.jsonl        append-only while running: samples, system, progress, events
    samples.parquet  system.parquet  progress.parquet  threads.parquet  runs.parquet
                           (all runs, one table each, a run_id column)
    summary.json           one entry per run: the figures and the verdict
    report.html

How the files are written and read safely is :mod:`memprobe.results.files`'; how the rows go from
JSON lines into Parquet, :mod:`memprobe.results.gather`'s.

:class:`ResultsFolder` is the one owner of a folder's life: it creates the folder (one naming
rule for every kind), writes the manifest (the same fields for ``run``, ``record``, ``watch`` and
``profile()``), finishes it, and opens it again, refusing a schema version it cannot read.
Older versions are read in today's shape, never rewritten: every upgrade is
:mod:`memprobe.results.upgrade`'s (each meta as read, :func:`memprobe.results.upgrade.upgraded`;
a recorded job's process list once its samples are loaded,
:func:`memprobe.results.upgrade.complete_processes`).
:class:`ResultSet` is a folder loaded back for the analysis and the report. This module knows
files, not processes: who writes a folder (the manifest's ``writer``) and whether that process
still runs are given by the caller (:func:`memprobe.probe.procfs.process_identity`,
:func:`memprobe.probe.procfs.still_running`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from memprobe.core.errors import SchemaVersionError, UsageError
from memprobe.core.safe_read import MAX_SCENARIO_CHARS, display_path, read_regular
from memprobe.core.scaling import scaling_dicts
from memprobe.results import reduce
from memprobe.results.files import (
    IN_FOLDER,
    read_json,
    run_dirs,
    write_json_atomic,
    write_json_exclusive,
    write_text_atomic,
)
from memprobe.results.gather import PARQUET_TABLES, consolidate, run_frame
from memprobe.results.schema import check_manifest, check_meta, check_table
from memprobe.results.upgrade import PROCESSES_COMPLETE, complete_processes, upgraded

if TYPE_CHECKING:  # analysis reads results; results only names its summaries' type
    from memprobe.core.summary import RunSummary

SCHEMA_VERSION = PROCESSES_COMPLETE
# Every schema version this memprobe reads, and what it changed. A folder of an older version is
# read in the new shape (memprobe.results.upgrade); it is never rewritten.
SCHEMA_VERSIONS = {
    1: "run milestones (warm, done, ...) under the key 'marks' of meta.json",
    2: "run milestones under 'milestones'; every manifest has kind, description, started, finished",
    3: "a recorded job's meta.json holds its own fields (start_method, max_workers, verdict, sampling, "
    "command), not a scenario-like spec (upgraded on load: results.upgrade.upgrade_recorded)",
    4: "a recorded job's meta.json lists every process sampled with its kind, parent, rank, worker "
    "index and generation (older lists completed on load: results.upgrade.complete_processes)",
}
KINDS = ("scenario", "record", "watch", "profile")  # what wrote a folder: run, record, watch, profile()
DEFAULT_BASE = Path("reports")


def default_out_dir(name: str, base: Path = DEFAULT_BASE) -> Path:
    """A new, empty ``<base>/<name>-<UTC time>``, created here: two sessions started in the same
    second get ``...Z`` and ``...Z-2`` instead of refusing each other."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        out = base / f"{name}-{stamp}{'' if n == 1 else f'-{n}'}"
        try:
            base.mkdir(parents=True, exist_ok=True)
            out.mkdir()
            return out
        except FileExistsError:
            if not base.is_dir():
                raise UsageError(
                    f"{base}: exists and is not a folder; choose a results folder (-o)"
                ) from None
        except OSError as exc:
            raise UsageError(
                f"{out}: cannot create the results folder: {exc.strerror}; choose one (-o)"
            ) from None
    raise UsageError(f"{base}: 1,000 results folders named {name}-{stamp}*; choose one (-o)")


def check_output(out: Path) -> None:
    """``out`` can take a new session's results: it does not exist yet, or is an empty folder."""
    try:
        if out.is_dir():
            if (out / "manifest.json").exists():
                raise UsageError(
                    f"{out}: already holds results; choose another output folder (-o) or remove it"
                )
            if any(out.iterdir()):
                raise UsageError(
                    f"{out}: a folder that is not empty; allowed: a new or empty folder for the results"
                )
        elif out.exists() or out.is_symlink():
            raise UsageError(
                f"{out}: exists and is not a folder; allowed: a new or empty folder for the results"
            )
    except OSError as exc:
        raise UsageError(f"{out}: cannot use it for results: {exc.strerror}") from None


def make_output(out: Path) -> Path:
    """Check ``out`` (:func:`check_output`), create it and return it."""
    check_output(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the results folder: {exc.strerror}") from None
    return out


def check_schema(path: Path, manifest: dict) -> int:
    """The schema version of ``manifest`` (read from ``path``) if this memprobe reads it, else a
    :class:`SchemaVersionError` naming the file, the version found and the versions it reads."""
    found = manifest.get("schema_version")
    version = found if isinstance(found, int) and not isinstance(found, bool) else None
    if version is not None and version in SCHEMA_VERSIONS:
        return version
    readable = ", ".join(map(str, SCHEMA_VERSIONS))
    if "schema_version" not in manifest:
        what = "no schema_version (not a results folder memprobe wrote)"
    elif version is not None and version > SCHEMA_VERSION:
        what = f"schema version {version}, written by a newer memprobe (upgrade memprobe to read it)"
    else:
        what = f"schema version {found!r}, which no memprobe writes"
    raise SchemaVersionError(f"{display_path(path)}: {what}; this memprobe reads schema versions {readable}")


def is_results_folder(path: Path) -> bool:
    """Whether ``path`` holds a results folder's manifest (a node's folder of a job, or a folder
    of node folders: :mod:`memprobe.results.job`)."""
    return (path / "manifest.json").is_file()


def own_file(name: str) -> bool:
    """Whether ``name`` at a results folder's top level is (or could be) one of the folder's own
    files: its manifest, summary, scenario, page, runs folder, tables and JSON lines. Nothing
    written into a folder from outside it (``memprobe export``'s default outputs) may take one."""
    return name in ("manifest.json", "summary.json", "scenario.yaml", "report.html", "runs") or name.endswith(
        (".parquet", ".jsonl")
    )


class ResultsFolder:
    """The one owner of a results folder: its creation, its manifest (the same fields whether
    ``run``, ``record``, ``watch`` or ``profile()`` wrote it, told apart by ``kind``), its end, and
    reading it back with the schema check. Used by :mod:`memprobe.run.session`,
    :mod:`memprobe.record.recording` and :mod:`memprobe.run.api`."""

    def __init__(self, root: Path, manifest: dict) -> None:
        self.root = root
        self.manifest = manifest

    @classmethod
    def create(
        cls,
        out: Path | None,
        *,
        kind: str,
        name: str,
        description: str,
        environment: dict,
        runs: Sequence[str],
        writer: dict,
        scenario_path: str | None = None,
        scenario_text: str | None = None,
        base: Path = DEFAULT_BASE,
    ) -> ResultsFolder:
        """A new folder with its manifest, status ``running``: ``out`` (new or empty), or
        ``<base>/<name>-<UTC time>`` when ``out`` is None. The manifest is created exclusively:
        of two sessions given one folder, one gets it and the other a clear error, never a mix.
        ``writer``: the process that writes it (:func:`memprobe.probe.procfs.process_identity`),
        so that `memprobe report` tells a session still going from one whose memprobe was killed."""
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}; allowed: {', '.join(KINDS)}")
        root = default_out_dir(name, base) if out is None else make_output(out)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "scenario": name,
            "scenario_path": scenario_path,
            "description": description,
            "status": "running",
            "started": time.time(),
            "finished": None,
            "environment": environment,
            "runs": list(runs),
            "writer": writer,
        }
        if not write_json_exclusive(root / "manifest.json", manifest):
            raise UsageError(f"{root}: already holds results; choose another output folder (-o) or remove it")
        if scenario_text is not None:
            write_text_atomic(root / "scenario.yaml", scenario_text)
        return cls(root, manifest)

    @classmethod
    def open(cls, root: str | Path) -> ResultsFolder:
        """A folder written before, or a :class:`UsageError`: not a results folder, a damaged
        manifest, or a schema version this memprobe does not read (:class:`SchemaVersionError`)."""
        root = Path(root)
        path = root / "manifest.json"
        if not path.exists():
            raise UsageError(f"{display_path(root)}: not a memprobe results folder (no manifest.json)")
        manifest = read_json(path, root)
        check_schema(path, manifest)
        check_manifest(path, manifest)
        return cls(root, manifest)

    @property
    def schema_version(self) -> int:
        return int(self.manifest["schema_version"])

    def save(self) -> None:
        write_json_atomic(self.root / "manifest.json", self.manifest)

    def finish(self, status: str, **fields: Any) -> None:
        """Say how the session ended (``complete`` or ``interrupted``) and when, then gather
        the runs' rows into Parquet. Safe to repeat (a full disk part-way). The status changes
        under the folder's lock (:meth:`write_while_running`): a page `memprobe report` made of
        the session so far is written before it or not at all, never over the session's own."""
        self.manifest.update(status=status, finished=time.time(), **fields)
        with self.locked():
            self.save()
        consolidate(self.root)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The folder's advisory lock (flock on the folder itself), held only around a status
        change, the writes of a page of the session so far, and `memprobe report`'s finishing of
        a folder whose memprobe was killed (two reports at once: one finishes, the other reads
        what it finished). Never a reason to fail: a folder that cannot be opened, or a file
        system that refuses the lock, goes unlocked. Not taken twice by one holder (a second
        ``flock`` of the folder would wait for the first)."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # the folder gone: the write that follows says so
            yield
            return
        try:
            with contextlib.suppress(OSError):  # a file system without locks: written unlocked
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the folder's descriptor releases the lock

    def write_while_running(self, write: Callable[[], object]) -> bool:
        """Call ``write`` (the summary and page of a session still going, which its writer
        replaces at its end) only if the manifest on disk still says ``running``, under the
        lock :meth:`finish` changes the status under; False, and nothing written, once the
        session has ended (its writer's own summary and page come, or came, after)."""
        with self.locked():
            if read_json(self.root / "manifest.json", self.root).get("status") != "running":
                return False
            write()
            return True

    def metas(self) -> list[dict]:
        """Every run's record, in run order, in the current schema's shape, its values checked
        (see :mod:`memprobe.results.schema`)."""
        metas = []
        for d in run_dirs(self.root):
            meta = upgraded(read_json(d / "meta.json", self.root), self.schema_version)
            check_meta(d / "meta.json", meta)
            metas.append(meta)
        return metas

    def load(self) -> ResultSet:
        return ResultSet.of(self)

    def write_summary(self, summaries: Sequence[RunSummary], extra: dict | None = None) -> None:
        """summary.json: the session's facts from the manifest, one entry per run, how each
        (mode, backend) scaled with its worker count (:mod:`memprobe.core.scaling`), and
        ``extra``: what the analysis computed of the session as a whole (its repeats' medians
        and spreads, the worker-count frontier: :meth:`memprobe.analysis.workers.Sweep.to_dict`)."""
        m = self.manifest
        write_json_atomic(
            self.root / "summary.json",
            {
                "schema_version": SCHEMA_VERSION,
                "kind": m.get("kind"),
                "scenario": m.get("scenario"),
                "status": m.get("status"),
                "started": m.get("started"),
                "finished": m.get("finished"),
                "environment": m.get("environment"),
                "runs": [s.to_dict() for s in summaries],
                "scaling": scaling_dicts(summaries),
                **(extra or {}),
            },
        )

    def finish_abandoned(self, *, writer_running: bool) -> bool:
        """Mark a session whose memprobe was killed (SIGKILL, the OOM killer, a crash) as such:
        status ``interrupted``, the run it was in ``interrupted`` too, its rows gathered into
        Parquet. Its processes are gone already (each run's process ends its group when memprobe
        ends). False, and nothing changed, while that memprobe still runs (``writer_running``: the
        caller asked, :func:`memprobe.probe.procfs.still_running` of the manifest's writer)."""
        root, manifest = self.root, self.manifest
        if manifest.get("status") != "running" or writer_running:
            return False
        ended = _last_write(root) or time.time()
        finished = []
        for d in run_dirs(root):
            meta = read_json(d / "meta.json", root)
            if _interrupted(meta):
                write_json_atomic(d / "meta.json", meta)
            else:
                finished.append(meta.get("run_id"))
        _ended(manifest, finished, ended, "'memprobe report' finished the folder from what was saved")
        self.save()
        consolidate(root)
        return True

    def load_as_ended(self) -> ResultSet:
        """The folder loaded as :meth:`finish_abandoned` would leave it, with nothing written: a
        session whose memprobe was killed, in a folder memprobe may not write (read-only) or
        whose page goes elsewhere (``memprobe report DIR -o PAGE``). Its rows are read where they
        are (JSON lines not gathered); a folder that is not ``running`` is loaded as it is."""
        results = self.load()
        if results.manifest.get("status") != "running":
            return results
        manifest = dict(results.manifest)
        metas = [dict(m) for m in results.metas]
        finished = [m.get("run_id") for m in metas if not _interrupted(m)]
        _ended(
            manifest,
            finished,
            _last_write(self.root) or time.time(),
            "reported from what was saved, the folder left as it was",
        )
        results.manifest, results.metas = manifest, metas
        return results


def _interrupted(meta: dict) -> bool:
    """A run record of a session whose memprobe was killed: marked ``interrupted`` if it was
    still going (True), else left as it is (False)."""
    if meta.get("status") != "running":
        return False
    meta.update(
        status="interrupted",
        error={
            "type": "Interrupted",
            "message": "memprobe ended while this run was going (killed?); what was measured until then is kept",
        },
    )
    return True


def _ended(manifest: dict, finished: list, ended: float, how: str) -> None:
    """The manifest of a session whose memprobe was killed, said so: ``complete`` if every run
    had finished (killed after its last run had ended, while saving: nothing was cut short),
    else ``interrupted``; when it ended, and ``how`` it was read."""
    whole = finished == list(manifest.get("runs") or [None])
    manifest.update(
        status="complete" if whole else "interrupted",
        finished=manifest.get("finished") or ended,
        ended=f"memprobe ended before finishing this session (killed?); {how}",
    )


def read_scenario_copy(root: Path) -> str | None:
    """The scenario file as run, copied into the folder (``memprobe run`` only), else None.
    Shown as it is: a byte that is not UTF-8 becomes U+FFFD."""
    try:
        data = read_regular(root / "scenario.yaml", limit=MAX_SCENARIO_CHARS, root=root, allowed=IN_FOLDER)
    except FileNotFoundError:
        return None
    return data.decode("utf-8", "replace")


def _last_write(root: Path) -> float | None:
    """When a file of ``root`` was last written (following no link, reading no file; one that
    goes away meanwhile is passed over)."""
    times = []
    for d, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(d, name))
                if stat.S_ISREG(st.st_mode):
                    times.append(st.st_mtime)
    return max(times, default=None)


class ResultSet:
    """A results folder loaded back: everything the analysis and the report need."""

    def __init__(
        self,
        root: Path,
        manifest: dict,
        metas: list[dict],
        tables: dict[str, pd.DataFrame],
        scenario_text: str | None = None,
    ) -> None:
        self.root = root
        self.manifest = manifest
        self.metas = metas
        self.tables = tables
        self.scenario_text = scenario_text  # scenario.yaml as run (`memprobe run` only)

    @classmethod
    def load(cls, root: str | Path) -> ResultSet:
        """Everything saved in ``root``, opened with :meth:`ResultsFolder.open` (the schema
        version is checked; older run records are read in the current shape)."""
        return cls.of(ResultsFolder.open(root))

    @classmethod
    def of(cls, folder: ResultsFolder) -> ResultSet:
        root = folder.root
        metas = folder.metas()
        moments = {str(m.get("run_id")): reduce.moments(m) for m in metas}
        tables = {t: cls._load_table(root, t, moments) for t in PARQUET_TABLES}
        # An older recorded meta's process list completed, now that its samples are known.
        samples = tables["samples"]
        metas = [
            complete_processes(
                m,
                samples[samples["run_id"] == m["run_id"]] if "run_id" in samples else samples,
                folder.schema_version,
            )
            for m in metas
        ]
        tables["events"] = pd.concat(
            [run_frame(d, "events") for d in run_dirs(root)] or [pd.DataFrame()], ignore_index=True
        )
        return cls(root, folder.manifest, metas, tables, read_scenario_copy(root))

    @staticmethod
    def _load_table(root: Path, table: str, moments: dict[str, list[float]] | None = None) -> pd.DataFrame:
        frames = []
        path = root / f"{table}.parquet"
        done: set[str] = set()
        if path.exists():  # a long run's series reduced to what the analysis needs (memprobe.results.reduce)
            frames.append(reduce.load_table(path, table, root, moments or {}))
            if "run_id" in frames[0]:  # a table with no rows has no columns either
                done = set(frames[0]["run_id"].unique())
        # Rows not yet consolidated (a crash, or a run still going) live in JSON lines; a run
        # already in the Parquet file (consolidation stopped between the two) is not read twice.
        frames += [
            check_table(d / f"{table}.jsonl", run_frame(d, table, (moments or {}).get(d.name)), table)
            for d in run_dirs(root)
            if d.name not in done
        ]
        frames = [f for f in frames if not f.empty]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def run_table(self, table: str, run_id: str) -> pd.DataFrame:
        df = self.tables.get(table, pd.DataFrame())
        if df.empty or "run_id" not in df:
            return pd.DataFrame()
        return df[df["run_id"] == run_id].reset_index(drop=True)
