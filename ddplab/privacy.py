"""Who else on this machine can reach a pool, and the folders only its owner may write.

Stdlib only at import: ranks use `folder_problem` and `private_folder` too (the compile cache
is checked again in every rank before torch.compile may use it).

    private_folder(path)     -> (path, None) once it is a folder only this user can use, else (None, why)
    compile_cache(wanted, fallback) -> (folder for the ranks' torch.compile, why `wanted` was refused)
    other_accounts()         -> login accounts of this machine other than this user's
    kernel_channel()         -> how the notebook's own kernel talks to Jupyter (private or not)
    tcp_listeners(pid), network_namespace(pid)   -> what a process listens on, and where
(report.py says all of it in words, for %ddp_status and %ddp_start.)
"""
import os
import stat

UID_MIN_DEFAULT = 1000
NO_LOGIN = ("nologin", "false", "sync", "shutdown", "halt")


def _owner(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return f"uid {uid}"


def folder_problem(path):
    """Why `path` is not a folder that only this user can write and read (0700, its own, reached
    through folders nobody else can swap), or None if it is."""
    me = os.getuid()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    except OSError as exc:
        return f"it cannot be checked ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != me:
        return f"it belongs to {_owner(st.st_uid)}"
    if st.st_mode & 0o077:
        return f"other users may use it (mode {stat.S_IMODE(st.st_mode):o})"
    parent = os.path.dirname(os.path.abspath(path))
    while True:  # a folder above it that others may write (and is not sticky, as /tmp is) lets them swap it
        try:
            pst = os.stat(parent)
        except OSError as exc:
            return f"{parent} cannot be checked ({exc.strerror})"
        writable_by_others = pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX
        if pst.st_uid not in (0, me) or writable_by_others:
            return f"{parent} above it can be changed by {_owner(pst.st_uid) if pst.st_uid not in (0, me) else 'others'}"
        if parent == os.path.dirname(parent):
            return None
        parent = os.path.dirname(parent)


def private_folder(path):
    """Make `path` (and the folders to it) if missing, as this user's only (0700); return (path,
    None) if it then is private, else (None, why not): nothing is ever used that someone else
    made or can change."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.lexists(path):
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:  # made meanwhile, by someone: checked below like any other
            pass
        except OSError as exc:
            return None, f"it cannot be made ({exc.strerror})"
    why = folder_problem(path)
    return (path, None) if why is None else (None, why)


def home_compile_cache():
    """~/.cache/ddplab/torchinductor (or under $XDG_CACHE_HOME): the user's own folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddplab", "torchinductor")


def torch_default_cache():
    """torch's own default, /tmp/torchinductor_USER (its cache_dir_utils.default_cache_dir): a name any
    account of the machine can take first. torch writes it into TORCHINDUCTOR_CACHE_DIR itself once
    it has used it, so that value there is not a choice of the user's."""
    import re
    import tempfile

    try:
        import getpass

        user = getpass.getuser()
    except (KeyError, OSError, ImportError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def default_compile_cache():
    """$TORCHINDUCTOR_CACHE_DIR if the user set it, else home_compile_cache() (never torch's default)."""
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen and os.path.abspath(chosen) != torch_default_cache():
        return chosen
    return home_compile_cache()


def compile_cache(wanted, last_resort):
    """The folder the ranks' torch.compile may use: `wanted` if it is private, else the user's own
    home_compile_cache(), else `last_resort()` (a new private folder). Returns (folder, None) or
    (the folder used, a sentence saying why `wanted` was refused)."""
    path, why = private_folder(wanted)
    if path is not None:
        return path, None
    refusals = [f"{wanted}: {why}"]
    for candidate in (home_compile_cache(), None):
        candidate = candidate if candidate is not None else last_resort()
        if os.path.abspath(candidate) == os.path.abspath(wanted):
            continue
        path, other_why = private_folder(candidate)
        if path is not None:
            return path, f"torch.compile's cache {wanted} was refused ({why}): the ranks use {path} instead"
        refusals.append(f"{candidate}: {other_why}")
    raise OSError("no private folder for torch.compile's cache: " + "; ".join(refusals))


def other_accounts(passwd="/etc/passwd", login_defs="/etc/login.defs"):
    """Login accounts of this machine other than this user's (uid >= UID_MIN, a login shell):
    the people who could connect to what listens on its loopback."""
    uid_min = UID_MIN_DEFAULT
    try:
        with open(login_defs) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "UID_MIN" and parts[1].isdigit():
                    uid_min = int(parts[1])
    except OSError:
        pass
    me, found = os.getuid(), []
    try:
        with open(passwd) as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if len(fields) < 7 or not fields[2].isdigit():
                    continue
                uid, shell = int(fields[2]), fields[6]
                if uid != me and uid >= uid_min and uid != 65534 and os.path.basename(shell) not in NO_LOGIN:
                    found.append(fields[0])
    except OSError:
        pass
    return found


KERNEL_FIX = ("c.KernelManager.transport = 'ipc' (or, with jupyter_client >= 8.10, "
              "c.KernelManager.transport_encryption = 'required') in jupyter_server_config.py")


def kernel_channel():
    """How this notebook's kernel talks to Jupyter: {"private": bool, "transport": "tcp" or "ipc",
    "encrypted": bool, "ip": ...}, or None outside a Jupyter kernel."""
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        return None
    if not IPKernelApp.initialized():
        return None
    app = IPKernelApp.instance()
    encrypted = bool(getattr(app, "curve_secretkey", None))
    return {"private": encrypted or app.transport == "ipc", "transport": app.transport, "encrypted": encrypted,
            "ip": app.ip}


def tcp_listeners(pid):
    """[(ip, port)] of the TCP sockets process `pid` listens on, read in its own network namespace
    (psutil reads the caller's: it would not see a rank's sockets in a private namespace)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and parts[9] in inodes:  # 0A: LISTEN
                        address, port = parts[1].split(":")
                        found.append((_ip(address, width), int(port, 16)))
        except OSError:
            continue
    return found


def _ip(hexa, width):
    import socket

    raw = bytes.fromhex(hexa)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def network_namespace(pid):
    """An id of the network namespace process `pid` lives in (compare two; None if unknown)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None
