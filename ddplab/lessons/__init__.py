"""Helpers the lesson notebooks (notebooks/NN_*.ipynb) use to make ideas visible.

- `ddplab.lessons.ranks`: runs inside ranks (imports torch only): parameter spread across
  ranks, a DDP communication hook that counts what it sends, a timeline recorder, timings.
- `ddplab.lessons.draw`: runs in the notebook (matplotlib): collectives before/after, sampler
  partitions, timelines, lines and bars, labelled in the language of `%ddp_start --lang`.
- `ddplab.lessons.check` (`ddplab.lessons.exercises`): an exercise's answer judged against the run.

Keep this file light: ranks import `ddplab.lessons.ranks` through it.
"""


def lab():
    """The Lab that `%ddp_start` started in this kernel, or None."""
    from .. import _magics

    for magics in _magics.values():
        if magics.lab is not None and magics.lab.running:
            return magics.lab
    return None


def lang():
    """"zh" if the running pool speaks Chinese (`--lang zh`, a notebook in a zh folder), else "en";
    in rank code, the language of the pool the rank belongs to."""
    import sys

    rank = sys.modules.get("ddplab.rank")
    if rank is not None and rank.RANK.formed:
        return rank.RANK.lang
    running = lab()
    if running is not None:
        return running.config.lang
    from ..shared.config import tunables

    return tunables().lang  # before %ddp_start: what the next pool will speak


def say(en, zh):
    """The text for the pool's language: say("loss", "损失")."""
    return zh if lang() == "zh" else en


COMPILE_NEEDS = 3 * 2**29  # bytes a session needs to run torch.compile beside its ranks: Inductor's gcc takes 0.5 GiB


def no_room_to_compile():
    """Why a lesson skips torch.compile here (in the pool's language), or None: the session's memory limit
    (a hub's 1 GiB) is under COMPILE_NEEDS, and the C++ compiler Inductor runs would push a rank out of memory."""
    from ..shared.system import memory_limit

    limit = memory_limit()
    if limit is None or limit >= COMPILE_NEEDS:
        return None
    return say(f"torch.compile was skipped: this session may use {limit / 2**30:.2f} GiB, and the C++ compiler "
               f"Inductor runs takes up to 0.5 GiB on top of the ranks (about {COMPILE_NEEDS / 2**30:.1f} GiB in all)",
               f"跳过了 torch.compile：这个会话最多可用 {limit / 2**30:.2f} GiB，而 Inductor 调用的 C++ 编译器在各个 rank "
               f"之外还要占用多达 0.5 GiB（总共约需 {COMPILE_NEEDS / 2**30:.1f} GiB）")


def check(key, answer=..., **run):
    """Judge your answer to exercise `key` ("4.2") against this run's numbers: right or wrong, and why
    (ddplab.lessons.exercises)."""
    from .exercises import check as judge

    return judge(key, answer, **run)


def predict(key, answer=...):
    """Commit your prediction for measurement `key` before the cell that measures it
    (ddplab.lessons.predict: that cell shows it beside what was measured)."""
    from .prediction import predict as commit

    return commit(key, answer)


def reveal(key, measured, unit="", right=None):
    """In the cell that measures `key`: your prediction beside the measurement, and how far apart."""
    from .prediction import reveal as show

    return show(key, measured, unit, right)


FRAMEWORKS = {"tensorflow": "TensorFlow", "jax": "JAX"}  # what lesson 16 runs beside torch (the frameworks extra)
INSTALL_FRAMEWORKS = 'pip install "ddplab[frameworks]"'


class MissingFramework(ModuleNotFoundError):
    """A lesson needs a framework ddplab's frameworks extra installs."""

    def _render_traceback_(self):  # IPython: the one line, no traceback
        return [f"{type(self).__name__}: {self}"]


def require_frameworks():
    """Lesson 16's first cell: TensorFlow and JAX are installed (`pip install "ddplab[frameworks]"`), or a
    one-line error that says what to install (in a notebook, "Run All" stops there)."""
    import importlib.util

    missing = [name for module, name in FRAMEWORKS.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingFramework(say(
            f"this lesson runs {' and '.join(missing)} beside torch, and they are not installed: run "
            f"{INSTALL_FRAMEWORKS} (about 1.7 GB on disk), then restart the kernel. Every other lesson runs without them",
            f"这一课要在 torch 旁边运行 {'和'.join(missing)}，而它们没有安装：运行 {INSTALL_FRAMEWORKS}（约占 1.7 GB 磁盘空间），"
            "然后重启内核。其他各课都不需要它们"))
    return sorted(FRAMEWORKS.values())
