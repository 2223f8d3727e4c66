"""The HTML report of a results folder, and the page comparing two folders."""

from __future__ import annotations

from memprobe.report.render import render, write_report

__all__ = ["render", "write_report"]
