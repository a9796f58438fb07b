"""The HTML report of a results store: SOL scores per tier, rooflines, per-problem table and a
leaderboard of solutions (`solforge report`). matplotlib draws the charts (`pip install
.[plot]`); SQLAlchemy reads the store (`.[store]`)."""

from solforge.report.data import ReportData, ReportError, gather
from solforge.report.html import render

__all__ = ["ReportData", "ReportError", "gather", "render"]
