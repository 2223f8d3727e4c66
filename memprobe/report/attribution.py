"""Which of the dataset's structures the workers copied, on the scenario page: the analysis' table
(:func:`memprobe.analysis.attribution.attribution`) in words and numbers for the template, next to
the verdict. Computes nothing: every figure, the shares included, is the analysis'."""

from __future__ import annotations

from dataclasses import dataclass

from memprobe.core.summary import RunSummary

MAX_EACH = 4  # workers shown one by one; beyond, their mean


@dataclass(frozen=True)
class Row:
    path: str
    kind: str  # path | other | outside
    held: str
    per_worker: list[str]
    together: str
    share: str
    bar_pct: float  # the bar's width: the share of the copied total, in percent


@dataclass(frozen=True)
class View:
    run_id: str
    sentence: str
    method: str
    heads: list[str]
    rows: list[Row]
    total: list[str]
    total_together: str
    note: str | None
    error: str | None = None


def _mb(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}"


def view(s: RunSummary) -> View | None:
    """The table of one run, or None where it did not ask for one."""
    a = s.attribution
    if not a:
        return None
    if a.get("error"):
        return View(s.run_id, "", "", [], [], [], "", None, error=str(a["error"]))
    workers = a["workers"]
    each = len(workers) <= MAX_EACH
    heads = [f"worker {w['worker']}" for w in workers] if each else [f"mean of {len(workers)} workers"]
    rows = [
        Row(
            r["path"],
            r["kind"],
            _mb(r["held_mb"]),
            [_mb(x) for x in r["workers_mb"]] if each else [_mb(r["mean_mb"])],
            _mb(r["together_mb"]),
            "–" if r["share"] is None else f"{r['share']:.0%}",
            0.0 if r["share"] is None else round(100 * r["share"], 1),
        )
        for r in a["rows"]
    ]
    method = (
        "a page counts as copied where its frame differs from the parent's at the same address (pagemap, as root)"
        if a["method"] == "frames"
        else "a page counts as copied where the worker maps it alone (pagemap bit 56) and its parent has one there"
    )
    notes = []
    if a.get("incomplete"):
        notes.append(
            f"The walk of the dataset {a['incomplete']}: what it did not reach is counted outside it."
        )
    notes += [line[0].upper() + line[1:] + "." for line in a.get("also_held") or []]
    if a.get("parent") is not None:
        notes.append(
            "A recorded job's workers are read from outside while they run (every 2 s, or less often where "
            "a reading takes long): the table is the last generation's latest reading."
        )
    if (a.get("marked_by") or 0) > 1:
        notes.append(
            f"{a['marked_by']} processes marked their dataset (memprobe.mark_dataset); shown: the workers of "
            f"pid {a['parent']}, which copied the most."
        )
        notes += [p["sentence"][0].upper() + p["sentence"][1:] + "." for p in a.get("by_process") or []]
    if a.get("unread_workers"):
        notes.append(f"{len(a['unread_workers'])} worker(s) had ended before their pages could be read.")
    return View(
        s.run_id,
        a["sentence"],
        method,
        heads,
        rows,
        [_mb(x) for x in a["copied_mb"]] if each else [_mb(a["copied_mean_mb"])],
        _mb(a["copied_together_mb"]),
        " ".join(notes) or None,
    )
