"""lab.history: what the ranks recorded, pulled from them exactly (the live view may skip points)."""
from .metrics import History


class Records:
    def __init__(self, lab):
        self.lab = lab

    def history(self):
        """Every point every rank logged with ddplab.log, exactly (pulled from the ranks)."""
        from .rank import call

        lab = self.lab
        ranks = lab.check_ranks(None)
        points = lab.view_on(ranks).apply_async(call, "history").get(timeout=lab.timeout)
        return History.from_ranks(dict(zip(ranks, points)), lab.live.cell_of)
