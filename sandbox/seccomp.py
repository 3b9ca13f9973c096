"""A seccomp filter for the sandbox: the kernel keyring is closed to it.

Keyrings are not namespaced by bwrap: every process inherits its parent's session
keyring, so a sandboxed command could read keys the worker (root or not) holds there
(seen: `keyctl read` of a key the worker had added to its session keyring), and the
per-uid user keyring would carry data from one run to the next run leased the same uid.
Docker's default profile refuses these three calls for the same reason; so do we,
with EPERM, as Docker does. The program is classic BPF, assembled here (stdlib only)
and handed to `bwrap --seccomp FD`.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# struct seccomp_data: int nr; __u32 arch; ...
_NR, _ARCH = 0, 4
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
X32_BIT = 0x40000000

# audit arch → (add_key, request_key, keyctl), per ABI a machine can run.
_ARCHES = {
    "x86_64": {0xC000003E: (248, 249, 250), 0x40000003: (286, 287, 288)},  # + i386
    "aarch64": {0xC00000B7: (217, 218, 219), 0x40000028: (309, 310, 311)},  # + arm
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's ABIs, or None where we do not know its numbers.

    A syscall from an ABI not listed gets ENOSYS, any x32 one EPERM: fail closed.
    """
    name = (machine or platform.machine()).lower()
    arches = _ARCHES.get(_ALIASES.get(name, name))
    if arches is None:
        return None
    deny = RET_ERRNO | errno.EPERM
    # (code, k, jump-to-deny-if-true); resolved once the layout is known.
    layout: list[tuple[int, int, int, int] | str] = [(_LD_ABS, _ARCH, 0, 0)]
    for arch, numbers in arches.items():
        block: list[tuple[int, int, int, int] | str] = [(_LD_ABS, _NR, 0, 0)]
        if arch == 0xC000003E:
            block.append("x32")
        block += [f"deny:{number}" for number in numbers]
        block.append((_RET, RET_ALLOW, 0, 0))
        layout.append((_JEQ, arch, 0, len(block)))
        layout += block
    layout.append((_RET, RET_ERRNO | errno.ENOSYS, 0, 0))  # an ABI we did not list
    deny_at = len(layout)
    out = []
    for index, item in enumerate(layout):
        if isinstance(item, tuple):
            out.append(_insn(item[0], item[1], item[2], item[3]))
        elif item == "x32":
            out.append(_insn(_JGE, X32_BIT, deny_at - index - 1, 0))  # x32: refused
        else:
            out.append(_insn(_JEQ, int(item.split(":")[1]), deny_at - index - 1, 0))
    out.append(_insn(_RET, deny))
    return b"".join(out)


def program_fd(machine: str | None = None) -> int | None:
    """A readable fd holding the filter (for `bwrap --seccomp FD`), or None."""
    code = program(machine)
    if code is None:
        return None
    fd = os.memfd_create("frognano-seccomp", os.MFD_CLOEXEC)
    os.write(fd, code)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
