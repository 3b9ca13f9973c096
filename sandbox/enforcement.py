"""Which limits bind the sandbox as a whole on this host, and which only each process.

`describe()` is what the bubblewrap backend logs when a sandbox starts and what a
`doctor`-style check can print: operators should not have to read the code to learn
that, say, memory is watched from the host rather than enforced by the kernel.
"""

from __future__ import annotations

from sandbox.base import SandboxLimits


def _mib(value: int) -> str:
    return f"{value / 1024**2:.0f} MiB"


def describe(limits: SandboxLimits, *, cgroup: str | None, why_not: str = "") -> list[str]:
    """One line per kind of limit; `cgroup` names the cgroup in use, if any."""
    if cgroup:
        whole = (f"whole sandbox, by the kernel ({cgroup}): memory {_mib(limits.memory_bytes)} "
                 f"(tmpfs and shared memory included, no swap), "
                 f"{limits.max_processes} processes")
    else:
        whole = (f"whole sandbox, by a host-side watch (no cgroup: {why_not}): memory "
                 f"{_mib(limits.memory_bytes)} (processes' anonymous, shared and swapped "
                 f"pages, /tmp, /dev/shm and open memfds; checked every 0.1 s or more, so "
                 f"a fast allocation can overshoot briefly; SysV shared memory no process "
                 f"maps is not seen), {limits.max_processes} processes and threads")
    return [
        whole,
        f"whole sandbox, by the kernel: /tmp {_mib(limits.tmp_bytes)} and /dev/shm "
        f"{_mib(limits.shm_bytes)} (sized tmpfs), the rest of / and /dev read-only",
        f"whole sandbox, by a host-side watch: disk {_mib(limits.disk_bytes)} for the "
        f"workspace and private dir, deleted-but-open files included",
        f"per process only (RLIMIT_*): address space {_mib(limits.memory_bytes)}, file size "
        f"{_mib(limits.max_file_bytes)}, CPU {limits.cpu_seconds} s; per uid: "
        f"{limits.max_processes} processes (RLIMIT_NPROC)",
    ]


def describe_host(limits: SandboxLimits | None = None) -> list[str]:
    """`describe()` for this host as it is now (probes cgroup v2 support)."""
    from sandbox.cgroup import available

    parent, why = available()
    return describe(limits or SandboxLimits(), cgroup=why if parent else None, why_not=why)
