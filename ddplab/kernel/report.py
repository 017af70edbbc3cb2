"""lab.report: what the notebook says about a running pool, in the pool's language: the ready line,
what protects each of its channels from other accounts, and what the user should hear at start."""
from collections.abc import Mapping, Sequence
from typing import Any

from ..shared.privacy import KERNEL_ENCRYPTED, KERNEL_IPC, kernel_channel, namespace_refusal, other_accounts
from ..shared.words import plural, ranks_text, say


class Report:
    def __init__(self, lab: Any) -> None:
        self.lab = lab  # the Lab that made this (lab.py imports this module, so the import contracts keep the type out)

    def ready(self) -> str:
        """"4 ranks ready in 2.1 s (gloo, 1 thread per rank)", and on how many hosts."""
        lab = self.lab
        counts = sorted({i.get("threads") for i in lab.info if i.get("threads")}) or [lab.threads]
        hosts = sorted({i.get("host") for i in lab.info if i.get("host")})
        say = lab.config.say
        threads = "-".join(map(str, sorted({counts[0], counts[-1]})))
        where = say(", on {n} hosts", n=len(hosts)) if len(hosts) > 1 else ""
        return say("{n} rank{s} ready in {seconds:.1f} s (gloo, {threads} {thread_s} per rank{where})", n=lab.world_size,
                   s="" if lab.world_size == 1 else "s",
                   seconds=lab.start_seconds, threads=threads, where=where, thread_s=plural(counts[-1], "thread"))

    def status(self) -> list[str]:
        """%ddp_status: the pool in one line, a row per rank, and what protects each channel."""
        lab = self.lab
        say = lab.config.say
        lines = [say("{n} ranks, backend gloo, rendezvous {where}, collective timeout {timeout:g} s, started in "
                     "{seconds:.1f} s", n=lab.world_size, where=lab.rendezvous, timeout=lab.timeout,
                     seconds=lab.start_seconds)]
        cols = ("rank", "engine", "pid", "host", "address", "threads", "state")
        rows = [[str(row[c]) for c in cols] for row in lab.status()]
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in [list(cols)] + rows]
        lines.append(say("who else can reach it:"))
        channels = self.protections()
        width = max(len(name) for name, _ in channels)
        lines += [f"  {name.ljust(width)}  {sentence}" for name, sentence in channels]
        return lines

    def check(self, found: Mapping[str, Sequence[int]]) -> list[str]:
        """%ddp_check's lines, from Debugger.check's {name: ranks that differ}."""
        lab = self.lab
        say, lang = lab.config.say, lab.config.lang
        if not found:
            return ["ddplab: " + say("no nn.Module on the ranks to compare")]
        return [f"ddplab: {name}: " + (say("{ranks} differ{s} from rank 0: the ranks' parameters drifted apart (not "
                                           "wrapped in DDP? a step taken on some ranks only?)",
                                           ranks=ranks_text(differ, lang), s="" if len(differ) > 1 else "s")
                                       if differ else say("identical on every rank"))
                for name, differ in found.items()]

    def protections(self) -> list[tuple[str, str]]:
        """What protects each channel of the pool from other accounts: (name, sentence) rows."""
        lab = self.lab
        lab.check_running()
        pool = lab.pool
        refused = pool.compile_refused or next((i["compile_refused"] for i in lab.info if i.get("compile_refused")),
                                               None)
        facts = {**pool.exposure(), "telemetry": lab.telemetry.address, "compile_refused": refused,
                 "kernel": kernel_channel(), "gate": gate_state(lab.info),
                 "compile_cache": pool.compile_cache or next((i["compile_cache"] for i in lab.info), None)}
        return protections(facts, lab.config.lang)

    def exposure(self) -> list[tuple[bool, str]]:
        """What the user should hear once the pool runs, as (warning?, sentence): a refused compile
        cache; and, on a machine with other accounts, whether this kernel's channel is private and
        what of the pool they can reach."""
        lab = self.lab
        say = lab.config.say
        found: list[tuple[bool, str]] = []
        refused = {i["compile_refused"] for i in lab.info if i.get("compile_refused")} | (
            {lab.pool.compile_refused} if lab.pool.compile_refused else set())
        found += [(True, text) for text in sorted(refused)]
        others = other_accounts()
        if not others:
            return found
        kernel = kernel_channel()
        if kernel is not None:
            found.append((not kernel["private"],
                          say("this machine has {n} other account(s); this kernel's channel: ", n=len(others))
                          + kernel_text(kernel, lab.config.lang)))
        facts = lab.pool.exposure()
        if facts["local"] and facts["network"] != "private":
            found.append((True, say("gloo listens on this machine's loopback ({why}), where its {n} other account(s) "
                                    "can connect: every connection of a group is checked to be yours before the group "
                                    "is used, and another account's is refused", why=facts["network_why"],
                                    n=len(others)) + admin_fix(lab.config.lang)))
        return found

    def notices(self) -> bool:
        """Messages dropped because they were not from this pool: each source once, in the view
        (run_state.notices), with its count. True if something is new."""
        lab = self.lab
        news = dict(lab.telemetry.news()) if lab.telemetry else {}
        for channel, count in (lab.pool.dropped if lab.pool else {}).items():
            news["ipyparallel", channel] = (f"{count} malformed message{'s' if count != 1 else ''} dropped on "
                                            f"ipyparallel's {channel} channel")
        changed = [lab.run_state.notice(topic, text + " (not from this pool's ranks: ignored)")
                   for topic, text in news.items()]
        say = lab.config.say
        if lab.telemetry is not None and lab.telemetry.refused:
            changed.append(lab.run_state.notice(("refused", "telemetry"), say(
                "{n} connection(s) without the pool's key refused by the telemetry socket", n=lab.telemetry.refused)))
        for account, (n, taken) in sorted(lab.live.refused.items()):
            changed.append(lab.run_state.notice(("refused", account), say(
                "the account {account} connected to the ranks' gloo ports {n} time(s) ({taken} took a rank's "
                "connection while a group formed): each refused before any data moved, the group formed without it",
                account=account, n=n, taken=taken)))
        return any(changed)


def admin_fix(lang: str = "en") -> str:
    """"; for a private network an administrator can ...", what to change where it is known."""
    refusal = namespace_refusal()
    if refusal is None:
        return ""
    cause, fix = refusal
    return say(lang, "; for a private network ({cause}), an administrator can run: {fix}", cause=cause, fix=fix)


def kernel_text(kernel: Mapping[str, Any], lang: str = "en") -> str:
    """One sentence on the kernel's channel (privacy.kernel_channel()), with what to set when it is
    not private."""
    if kernel["encrypted"]:
        return say(lang, "{transport}, encrypted (CurveZMQ)", transport=kernel["transport"])
    if kernel["transport"] == "ipc":
        return say(lang, "ipc socket files (only you can open them)")
    return say(lang, "TCP on {ip} without encryption: any account of this machine can connect to its ports and read "
                     "what cells print; an administrator can set {fix}", ip=kernel["ip"], fix=kernel_fix(lang))


def kernel_fix(lang: str = "en") -> str:
    """What an administrator sets for a private kernel channel (the settings themselves are code: as is)."""
    return say(lang, "{ipc} (or, with jupyter_client >= 8.10, {encrypted}) in jupyter_server_config.py",
               ipc=KERNEL_IPC, encrypted=KERNEL_ENCRYPTED)


def gate_state(info: Sequence[Mapping[str, Any]]) -> bool | str | None:
    """True if every rank put the accept gate up (gate.py), else why one did not (None: turned off)."""
    states = [i.get("gate") for i in info]
    if states and all(s is True for s in states):
        return True
    return next((s for s in states if isinstance(s, str)), None)


def protections(facts: Mapping[str, Any], lang: str = "en") -> list[tuple[str, str]]:
    """What protects each channel of a pool, as (name, sentence) rows for %ddp_status. facts: local
    (bool), network ("private"/"shared"), network_why, signed, encrypted (ipyparallel's), controller
    (its address), telemetry (its address), compile_cache, compile_refused, kernel (kernel_channel()
    or None)."""
    rows = []
    if facts["local"]:
        rows.append(("ipyparallel", say(lang, "socket files in the pool's private folder (no TCP port)")))
    else:
        sign = say(lang, "signed (HMAC-SHA256)" if facts["signed"] else "NOT signed!")
        crypt = say(lang, "encrypted (CurveZMQ)" if facts["encrypted"] else
                    "not encrypted (%ddp_start --encrypt, or a controller started with --IPController.enable_curve=True)")
        rows.append(("ipyparallel", say(lang, "TCP to {controller}, {signed}, {encrypted}", controller=facts["controller"],
                                        signed=sign, encrypted=crypt)))
    if facts["network"] == "private":
        rows.append(("gloo", say(lang, "the ranks live in a network namespace of their own: no other account can reach "
                                       "gloo's ports")))
    elif facts["local"]:
        gate = facts.get("gate")
        if gate is True:
            checked = say(lang, "on this machine's loopback ({why}): each rank answers gloo's accepts itself and closes "
                                "another account's connection before gloo sees it; each group's connections are "
                                "checked to be yours before it is used", why=facts["network_why"])
        else:
            checked = say(lang, "on this machine's loopback ({why}): before a group is used, each of its connections is "
                                "checked to be yours (another account's is refused and the group formed again without "
                                "it), and its ports then admit nobody", why=facts["network_why"])
            if gate:  # why the gate could not be put up
                checked += say(lang, "; the accept gate is not up ({why})", why=gate)
        rows.append(("gloo", checked + admin_fix(lang)))
    else:
        rows.append(("gloo", say(lang, "TCP between the hosts, unauthenticated (as in any PyTorch job): use a network "
                                       "you trust")))
    if facts["telemetry"].startswith("ipc://"):
        rows.append(("telemetry", say(lang, "a socket file in the pool's private folder")))
    else:
        rows.append(("telemetry", say(lang, "{address}, signed, each message newer than the last, {encrypted}",
                                      address=facts["telemetry"],
                                      encrypted=say(lang, "encrypted" if facts["encrypted"] else "not encrypted"))))
    if facts["compile_cache"]:
        cache = say(lang, "{folder} (yours only)", folder=facts["compile_cache"])
        if facts["compile_refused"]:
            cache += f"; {facts['compile_refused']}"
        rows.append(("torch.compile", cache))
    if facts.get("kernel") is not None:
        rows.append(("kernel", kernel_text(facts["kernel"], lang)))
    return rows
