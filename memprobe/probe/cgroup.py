"""The memory cgroup a process is charged to, read-only: the limit that kills the job (the lowest
limit on its cgroup and every cgroup above it), what is charged to it now, and how many times the
kernel's OOM killer acted in it. Kubernetes and SLURM enforce a job's memory through its cgroup, and
the OOM killer acts on the cgroup's charge: neither the sum of RSS nor total PSS (page cache,
shared memory and kernel memory are charged too).

Both hierarchies: cgroup v1 (the ``memory`` controller's own mount; ``hierarchical_memory_limit`` in
memory.stat is the effective limit) and cgroup v2 (one mount; ``memory.max`` on each level up to the
mount, the lowest applies). The process's cgroup comes from ``/proc/PID/cgroup``, the mounts from
memprobe's own ``/proc/self/mountinfo`` (the files are read in memprobe's mount namespace).
:func:`locate` finds it as the job starts (the job may have ended when it is read again,
:func:`read`); :func:`follow` finds it again where the job moved itself into another one as it
started (``cgexec -g memory:G CMD``, ``systemd-run --scope -p MemoryMax=... CMD``: the command
memprobe started enters the cgroup, then runs the job). memprobe never creates, moves or changes a
cgroup.

Whether the cgroup holds the job alone: :func:`others` reads its process list (``cgroup.procs``
of it and of every cgroup below it, whose charge is its own too) and the resident memory of each
process that is neither the job's nor memprobe's; the sampler reads it at its first tick, where
the job enters another cgroup, and every :data:`OTHERS_INTERVAL_S` after
(:mod:`memprobe.analysis.forecast` says what it changes).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from memprobe.core.system import PAGE_SIZE, mem_total_mb
from memprobe.core.vocabulary import CGROUP_PARTS
from memprobe.probe.procfs import read_text

UNLIMITED = 1 << 62  # v1 writes "no limit" as 9223372036854771712 (the page-aligned largest long)
MiB = 1024 * 1024
# A cgroup's name is any bytes but "/": one that is not UTF-8 must open again (decoded with
# "replace", the path named a directory that does not exist, and the job was shown against the
# machine's memory). results/files.py escapes the lone surrogates where the path is written.
_PATHS = "surrogateescape"


@dataclass(frozen=True)
class CgroupLocation:
    """Where a process's memory cgroup is: its hierarchy's version, its path in the hierarchy
    (as /proc/PID/cgroup says it) and its directory under the mount, with the mount's."""

    version: int
    path: str
    directory: Path
    mount: Path


@dataclass(frozen=True)
class CgroupMemory:
    """A memory cgroup read at one moment; ``None``: not known (a file this kernel lacks)."""

    version: int
    path: str
    limit_bytes: int | None  # the lowest limit on it and above it; None: unlimited
    usage_bytes: int | None  # charged to it now
    oom_kills: int | None  # processes the OOM killer killed in it, since it was made
    # What the charge is made of (bytes; :func:`breakdown`), where memory.stat says.
    parts: dict[str, int] | None = None

    def to_dict(self) -> dict:
        mb = lambda b: None if b is None else round(b / MiB, 1)  # noqa: E731
        out = {
            "version": self.version,
            "path": self.path,
            "limit_mb": mb(self.limit_bytes),
            "usage_mb": mb(self.usage_bytes),
            "oom_kills": self.oom_kills,
        }
        if self.parts is not None:
            out["parts_mb"] = {k: mb(v) for k, v in self.parts.items()}
        return out


def breakdown(stat: dict[str, int], usage: int | None, version: int) -> dict[str, int] | None:
    """What a cgroup's charge is made of, from its memory.stat: anonymous memory (what the
    processes' PSS and USS count), page cache (files read or written, which the kernel may
    reclaim), shared memory (/dev/shm, memfd, tmpfs: charged to whoever first touched it) and the
    rest (kernel memory: page tables, slab, sockets), in bytes; None where memory.stat lacks
    them. v1 counts the hierarchy under ``total_*`` (its page cache includes shared memory);
    v2's ``file`` includes ``shmem`` too."""
    keys = ("total_rss", "total_cache", "total_shmem") if version == 1 else ("anon", "file", "shmem")
    anon, file, shmem = (stat.get(k) for k in keys)
    if anon is None or file is None or shmem is None or usage is None:
        return None
    return dict(
        zip(CGROUP_PARTS, (anon, max(file - shmem, 0), shmem, max(usage - anon - file, 0)), strict=True)
    )


def locate(pid: int | str, proc: Path = Path("/proc")) -> CgroupLocation | None:
    """The memory cgroup of process ``pid`` (``"self"`` for memprobe), or None: no cgroup file,
    no memory controller mounted, or the process is gone."""
    text = read_text(str(proc / str(pid) / "cgroup"), _PATHS)
    mounts = read_text(str(proc / "self" / "mountinfo"), _PATHS)
    if text is None or mounts is None:
        return None
    v1, v2 = _paths(text)
    for version, path in ((1, v1), (2, v2)):  # the controller sits on v1 where it is mounted there
        mount = _mount(mounts, version)
        if path is not None and mount is not None:
            root, point = mount
            inside = path[len(root) :] if root != "/" and (path + "/").startswith(root + "/") else path
            return CgroupLocation(version, path, point / inside.lstrip("/"), point)
    return None


def follow(where: CgroupLocation, pid: int, proc: Path = Path("/proc")) -> CgroupLocation:
    """The memory cgroup of ``pid`` now, given ``where`` it was: ``where`` itself while the
    process stays in it (one small read, /proc/PID/cgroup), the new one where it moved (and
    ``where`` where the process is gone: its last cgroup is the one that counted)."""
    text = read_text(str(proc / str(pid) / "cgroup"), _PATHS)
    if text is None or _paths(text)[where.version - 1] == where.path:
        return where
    return locate(pid, proc) or where


@dataclass(frozen=True)
class Entered:
    """The memory cgroup a job is in, as read when memprobe first saw the job in it: at the
    start, or where the job's first process moved into another (:func:`follow`), ``t`` seconds
    after the start. Its charge and OOM kills count from then on."""

    where: CgroupLocation
    at_entry: CgroupMemory
    t: float = 0.0

    @classmethod
    def of(cls, pid: int, proc: Path = Path("/proc")) -> Entered | None:
        where = locate(pid, proc)
        return None if where is None else cls(where, read(where))

    def followed(self, pid: int, t: float, proc: Path = Path("/proc")) -> Entered:
        """Itself while ``pid`` stays in its cgroup; the cgroup it moved into, entered at ``t``."""
        where = follow(self.where, pid, proc)
        return self if where is self.where else Entered(where, read(where), t)


def _paths(text: str) -> tuple[str | None, str | None]:
    """The memory controller's path on cgroup v1 and the unified (v2) path in a /proc/PID/cgroup."""
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return v1, v2


def _mount(mountinfo: str, version: int) -> tuple[str, Path] | None:
    """The root and mount point of the memory hierarchy of ``version`` (proc(5), mountinfo)."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if not sep or len(fields) < 5 or len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        if (version == 2 and fstype == "cgroup2") or (
            version == 1 and fstype == "cgroup" and "memory" in options
        ):
            return _unescape(fields[3]), Path(_unescape(fields[4]))
    return None


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in a path as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def read(where: CgroupLocation) -> CgroupMemory:
    """Its limit, charge and OOM kills now (a file that cannot be read gives None)."""
    d = where.directory
    stat = _keyed(d / "memory.stat")
    if where.version == 1:
        limit = stat.get("hierarchical_memory_limit", _number(d / "memory.limit_in_bytes"))
    else:
        limits = []
        level = d
        while True:  # memory.max on it and each cgroup above it, up to the mount
            limits.append(_number(level / "memory.max"))
            if level == where.mount or where.mount not in level.parents:
                break
            level = level.parent
        known = [x for x in limits if x is not None]
        limit = min(known) if known else None
    usage, kills = charge(where)
    return CgroupMemory(
        where.version,
        where.path,
        limit if limit is not None and limit < UNLIMITED else None,
        usage,
        kills,
        breakdown(stat, usage, where.version),
    )


def charge(where: CgroupLocation) -> tuple[int | None, int | None]:
    """What is charged to it now (bytes) and its OOM kills so far: the two that move, read
    each second with MemAvailable (two small files, no walk up the hierarchy)."""
    d = where.directory
    if where.version == 1:
        return _number(d / "memory.usage_in_bytes"), _keyed(d / "memory.oom_control").get("oom_kill")
    return _number(d / "memory.current"), _keyed(d / "memory.events").get("oom_kill")


def _ppid(proc: Path, pid: int) -> int | None:
    """A process's parent (/proc/PID/stat's fourth field, after the name in parentheses)."""
    text = read_text(str(proc / str(pid) / "stat")) or ""
    fields = text[text.rfind(")") + 1 :].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def file_cache(where: CgroupLocation) -> int | None:
    """The cgroup's page cache of files, shared memory left out (bytes, from memory.stat; None
    where it lacks the counts): what the kernel reclaims before its OOM killer acts, so no part of
    how close the cgroup is to a kill. Files read or written and left in the cache (a job reading
    its dataset from disk fills it up to the limit, and is not killed for it), and files mapped
    (the interpreter, torch's libraries: evicted and read again when used; a job 47 MB short of
    its limit by the charge less its unmapped cache ran four epochs more, its main process
    mapping 95 MB of files)."""
    stat = _keyed(where.directory / "memory.stat")
    keys = ("total_cache", "total_shmem") if where.version == 1 else ("file", "shmem")
    cache, shmem = (stat.get(k) for k in keys)
    if cache is None or shmem is None:
        return None
    return max(cache - shmem, 0)


def machine_oom_kills(proc: Path = Path("/proc")) -> int | None:
    """The machine's OOM kills since boot (``oom_kill`` of /proc/vmstat: every OOM killer, the
    machine's and every cgroup's, machine-wide), None where the kernel does not count them."""
    return _keyed(proc / "vmstat").get("oom_kill")


def _number(path: Path) -> int | None:
    """A one-number file; v2's ``max`` (no limit) and anything else unreadable give None."""
    text = read_text(str(path))
    return int(text.strip()) if text is not None and text.strip().isdigit() else None


def _keyed(path: Path) -> dict[str, int]:
    """A ``key value`` per line file (memory.stat, memory.events, memory.oom_control)."""
    out: dict[str, int] = {}
    for line in (read_text(str(path)) or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value.strip())
    return out


OTHERS_INTERVAL_S = 5.0  # the sampler reads who else is in the job's cgroup this often
OTHERS_MAX_CGROUPS = 256  # cgroups below the job's walked at most (a machine's root holds hundreds)
OTHERS_MAX_READ = 1024  # other processes whose memory is read at most; the rest are counted
OTHERS_NAMED = 5  # the largest others kept by name


@dataclass(frozen=True)
class Others:
    """The processes in a memory cgroup (and the cgroups below it) that are neither the job's nor
    memprobe's, with resident memory of their own (kernel threads have none): how many, their
    RSS summed (bytes; of the first :data:`OTHERS_MAX_READ`), the largest by name (comm, pid,
    RSS bytes)."""

    processes: int
    rss_bytes: int
    largest: tuple[tuple[str, int, int], ...] = ()


def members(where: CgroupLocation, cap: int = OTHERS_MAX_CGROUPS) -> list[int]:
    """Every process charged to the cgroup: its ``cgroup.procs`` and those of the cgroups below
    it (their charge is counted in its own), ``cap`` cgroups at most."""
    pids: list[int] = []
    for walked, (directory, subdirs, _) in enumerate(os.walk(where.directory), start=1):
        text = read_text(str(Path(directory) / "cgroup.procs")) or ""
        pids.extend(int(x) for x in text.split() if x.isdigit())
        if walked >= cap:
            break
        subdirs.sort()
    return pids


def others(where: CgroupLocation, ours: Collection[int], proc: Path = Path("/proc")) -> Others:
    """The processes charged to ``where`` that are not in ``ours`` (the job's processes and
    memprobe's own) nor children of theirs (a DataLoader's new workers, forked since the sampler
    last walked the tree: a new epoch's four were once counted as others, and the job not
    alone) and hold resident memory (:class:`Others`)."""
    mine = set(ours)
    rest = [pid for pid in members(where) if pid not in mine]
    parent = {pid: _ppid(proc, pid) for pid in rest}
    for _ in range(len(rest)):  # a new child's own new child: as far as the chain goes
        new = {pid for pid in rest if pid not in mine and parent[pid] in mine}
        if not new:
            break
        mine |= new
    count, total, seen = 0, 0, []
    for pid in rest:
        if pid in mine:
            continue
        if count >= OTHERS_MAX_READ:
            count += 1  # counted, not read: a machine's root cgroup
            continue
        statm = read_text(str(proc / str(pid) / "statm"))
        fields = statm.split() if statm else []
        rss = int(fields[1]) * PAGE_SIZE if len(fields) > 1 and fields[1].isdigit() else 0
        if rss <= 0:
            continue  # gone, or a kernel thread: no memory of its own
        count += 1
        total += rss
        name = (read_text(str(proc / str(pid) / "comm")) or "?").strip()
        seen.append((name, pid, rss))
    seen.sort(key=lambda x: -x[2])
    return Others(count, total, tuple(seen[:OTHERS_NAMED]))


def memory_limit_mb() -> int:
    """The machine's memory, or memprobe's memory cgroup's limit where that is lower (a
    container; cgroup v1 or v2)."""
    mb = mem_total_mb()
    where = locate("self")
    limit = read(where).limit_bytes if where is not None else None
    return min(mb or 2**62, limit // 2**20) if limit is not None else mb
