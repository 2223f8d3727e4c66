"""Which of the dataset's structures the forked workers copied: the table the terminal, the report
and ``cure`` show, from what the run's process measured (its meta's
``dataset_info.attribution``, written by :func:`memprobe.probe.attribution.attribute_workers`).

One row per path of the dataset (the most copied first; at most :data:`SHOWN`, the rest folded
into one row), then what lies outside the dataset: between its objects on the pages they share,
and on pages without any of them (the interpreter's own objects, the rest of the heap). Each row
gives every worker's MB, their mean and their sum ("together": what the workers copied between
them), and its share of the copied total; the rows add up to that total (each figure was rounded
to 1 kB, so within 1 kB a row).
"""

from __future__ import annotations

from typing import Any

from memprobe.core.vocabulary import COPY_KINDS

SHOWN = 12  # path rows shown; the rest are one row
OTHER = "other paths of the dataset"
BETWEEN = "outside: between the dataset's objects"  # on the pages they lie on
ELSEWHERE = "outside: interpreter's objects, rest of heap"  # on pages without any of them


def attribution(meta: dict) -> dict[str, Any] | None:
    """The attribution table of a run's meta; ``None`` where the run did not ask for it, and
    ``{"error": ...}`` where it could not be taken."""
    found = (meta.get("dataset_info") or {}).get("attribution")
    if not found:
        return None
    if found.get("error"):
        return {"error": str(found["error"])}
    workers = sorted(found.get("workers") or [], key=lambda w: w["worker"])
    if not workers:
        return {"error": "no worker's pages could be read (the workers had ended)"}
    paths, held = found["paths"], found["held_mb"]
    n = min(len(paths), len(held), *(len(w["paths_mb"]) for w in workers))
    rows = [_row(paths[i], held[i], [w["paths_mb"][i] for w in workers]) for i in range(n)]
    rows.sort(key=lambda r: (-r["together_mb"], -(r["held_mb"] or 0.0)))
    shown, folded = rows[:SHOWN], rows[SHOWN:]
    other = [w["other_paths_mb"] + sum(r["workers_mb"][k] for r in folded) for k, w in enumerate(workers)]
    copied = [w["copied_mb"] for w in workers]
    together = sum(copied)
    table = [*shown]
    if any(other) or folded or found.get("other_paths"):
        count = len(folded) + int(found.get("other_paths") or 0)
        table.append(_row(f"{OTHER} ({count:,})", None, other, kind="other"))
    table.append(_row(BETWEEN, None, [w["outside_on_dataset_pages_mb"] for w in workers], kind="outside"))
    table.append(_row(ELSEWHERE, None, [w["outside_elsewhere_mb"] for w in workers], kind="outside"))
    for r in table:
        r["share"] = r["together_mb"] / together if together > 0 else None
    top = shown[0] if shown and shown[0]["together_mb"] > 0 else None
    walk = found.get("walk") or {}
    return {
        "workers": [{"worker": w["worker"], "pid": w["pid"], "copied_mb": w["copied_mb"]} for w in workers],
        "method": workers[0]["method"],
        "copied_mb": copied,
        "copied_together_mb": together,
        "copied_mean_mb": together / len(workers),
        "rows": table,
        "top_path": top["path"] if top else None,
        "top_share": top["share"] if top else None,
        "sentence": _sentence(top, together, len(workers)),
        "walk": walk,
        "incomplete": walk.get("stopped"),
        # Objects held by two paths count to the first: where the second holds many, it is said.
        "also_held": [
            f"{a['path']} also holds {a['objects']:,} of the containers counted to {a['counted_to']} (the first path to them)"
            for a in walk.get("also_held") or []
        ],
        "unread_workers": found.get("unread_workers") or [],
        "pagemap_s": found.get("pagemap_s"),
        # A recorded job's (memprobe.record.copies): the marking process shown, how many marked.
        "parent": found.get("parent"),
        "marked_by": found.get("marked_by"),
        "by_process": _by_process(found.get("by_process") or [], meta.get("ranks") or {}),
    }


def _by_process(found: list[dict], ranks: dict) -> list[dict[str, Any]]:
    """Each marking process's workers (a torchrun job's ranks): its rank where the recording
    knows it, the path they copied most and its share of their copies."""
    rank_of = {pid: int(rank) for rank, pid in ranks.items() if str(rank).isdigit()}
    out = []
    for p in found:
        rank = rank_of.get(p["parent"])
        share = p["path_mb"] / p["copied_mb"] if p["copied_mb"] > 0 else None
        said = f" ({share:.0%})" if share is not None else ""
        sentence = (
            f"{'process' if rank is None else f'rank {rank}'} (pid {p['parent']}): {p['path']} holds "
            f"{p['path_mb']:,.1f} of the {p['copied_mb']:,.1f} MB its workers copied{said}"
        )
        out.append({**p, "rank": rank, "share": share, "sentence": sentence})
    return out


def copied_by_kind(meta: dict) -> list[dict[str, Any]] | None:
    """Each parent of forked workers in a recorded job: the mean MB per worker its workers copied,
    by where the pages lie (memprobe.core.vocabulary.COPY_KINDS), most first; None without any."""
    found = (meta.get("dataset_info") or {}).get("copied_by_kind")
    if not found:
        return None
    rank_of = {pid: int(rank) for rank, pid in (meta.get("ranks") or {}).items() if str(rank).isdigit()}
    out = []
    for p in found:
        workers = p["workers"]
        if not workers:
            continue
        kinds = sorted({k for w in workers for k in w["kinds_mb"]})
        mean = {k: sum(w["kinds_mb"].get(k, 0.0) for w in workers) / len(workers) for k in kinds}
        mean = dict(sorted(mean.items(), key=lambda kv: -kv[1]))
        rank = rank_of.get(p["parent"])
        who = f"rank {rank} (pid {p['parent']})" if rank is not None else f"pid {p['parent']}"
        parts = ", ".join(f"{COPY_KINDS.get(k, k)} {mb:,.1f} MB" for k, mb in mean.items())
        out.append(
            {
                "parent": p["parent"],
                "rank": rank,
                "workers": len(workers),
                "mean_mb": mean,
                "total_mean_mb": sum(mean.values()),
                "sentence": f"The {len(workers)} forked worker(s) of {who} copied, each (mean): {parts}",
            }
        )
    return out or None


def _row(path: str, held: float | None, per: list[float], *, kind: str = "path") -> dict[str, Any]:
    return {
        "path": path,
        "kind": kind,
        "held_mb": held,
        "workers_mb": per,
        "mean_mb": sum(per) / len(per),
        "together_mb": sum(per),
    }


def _sentence(top: dict | None, together: float, workers: int) -> str:
    who = "the worker" if workers == 1 else f"the {workers} workers"
    if top is None:
        return f"none of the {together:,.1f} MB {who} copied lies on the dataset's objects"
    return (
        f"{top['path']} holds {top['together_mb']:,.1f} MB of the {together:,.1f} MB {who} copied "
        f"({top['share']:.0%})"
    )
