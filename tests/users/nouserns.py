"""Run a command where user namespaces are refused, as on Ubuntu 24.04 (AppArmor), in Docker's default
seccomp profile, or with user.max_user_namespaces=0:

    python3 nouserns.py [--only-loopback] -- COMMAND ARGS...

A seccomp filter on this process and everything it starts refuses unshare(2) and clone(2) with
CLONE_NEWUSER (EPERM), and clone3(2) with ENOSYS so that the C library falls back to clone, as
Docker's profile does. It changes nothing on the machine: the filter dies with the processes.
--only-loopback refuses instead only to bring a network interface up (ioctl SIOCSIFFLAGS): a
namespace can then be made but not completed. Stdlib only: an ordinary account runs it with the
system's python3.
"""
import ctypes
import os
import platform
import struct
import sys

CLONE_NEWUSER = 0x10000000
SIOCSIFFLAGS = 0x8914
ARCH = {"x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435, "ioctl": 16}),
        "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435, "ioctl": 29})}
LD_W_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def program(only_loopback):
    arch, nr = ARCH[platform.machine()]
    code = [(LD_W_ABS, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, ALLOW)]  # another ABI: not ours to judge
    if only_loopback:
        code += [(LD_W_ABS, 0, 0, 0), (JEQ, 0, 3, nr["ioctl"]), (LD_W_ABS, 0, 0, 24), (JEQ, 0, 1, SIOCSIFFLAGS),
                 (RET, 0, 0, ERRNO | EPERM)]
    else:
        code += [(LD_W_ABS, 0, 0, 0), (JEQ, 0, 3, nr["unshare"]), (LD_W_ABS, 0, 0, 16), (JSET, 0, 1, CLONE_NEWUSER),
                 (RET, 0, 0, ERRNO | EPERM)]
        code += [(LD_W_ABS, 0, 0, 0), (JEQ, 0, 3, nr["clone"]), (LD_W_ABS, 0, 0, 16), (JSET, 0, 1, CLONE_NEWUSER),
                 (RET, 0, 0, ERRNO | EPERM)]
        code += [(LD_W_ABS, 0, 0, 0), (JEQ, 0, 1, nr["clone3"]), (RET, 0, 0, ERRNO | ENOSYS)]
    return code + [(RET, 0, 0, ALLOW)]


def install(only_loopback=False):
    code = program(only_loopback)
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in code))
    fprog = ctypes.create_string_buffer(struct.pack("HL", len(code), ctypes.addressof(buf)))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4  # (a pointer must not be cut to an int)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "could not install the seccomp filter")


if __name__ == "__main__":
    args = sys.argv[1:]
    only_loopback = "--only-loopback" in args[:args.index("--")]
    command = args[args.index("--") + 1:]
    install(only_loopback)
    os.execvp(command[0], command)
