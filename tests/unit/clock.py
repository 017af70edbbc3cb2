"""A clock a test moves by hand, for what takes one (Monitor, Escalation: `clock=`): no sleeping, no
timestamps shifted behind the code's back."""


class FakeClock:
    """clock() is `now`, which only advance() moves. It starts far from 0, so that code which takes 0 for
    "long ago" is caught."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, "a monotonic clock does not go back"
        self.now += seconds
