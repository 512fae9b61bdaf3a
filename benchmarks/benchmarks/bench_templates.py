"""Many distinct task shapes: one full cycle at 5,000 nodes with 1,200 distinct pending
templates (``_templates_data.templates_cluster``: mixed node shapes with 1-8 GPUs, gangs of
1-64 tasks with their own cpu / memory / GPU requests)."""

from __future__ import annotations

from gangsched import Config, schedule
from gangsched.scheduler import open_session

from ._templates_data import templates_cluster, templates_cluster_dict

SIZES = [(5000, 1200)]


class ManyTemplates:
    params = SIZES
    param_names = ("size",)
    timeout = 600

    def setup(self, size: tuple[int, int]) -> None:
        self.snap = templates_cluster(*size)
        self.config = Config.default()

    def time_cycle(self, size: tuple[int, int]) -> None:
        schedule(self.snap, self.config)

    def time_session_open(self, size: tuple[int, int]) -> None:
        open_session(self.snap)

    def track_templates(self, size: tuple[int, int]) -> int:
        return len(open_session(self.snap).templates)

    def peakmem_cycle(self, size: tuple[int, int]) -> None:
        schedule(self.snap, self.config)


def time_generate() -> None:
    templates_cluster_dict(1213, 300)
