"""Host CPU use during a cold start, every 0.5 s: busy cores of the whole host (/proc/stat) and CPU seconds per
second by process family (each train_gpt.py process by role, with its compile workers folded in). Linux only.
    python3 cpu_sampler.py OUT.tsv &   (stops when killed; run as .bench/cpu_sampler.py in this record's calls)"""
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from harness import cli  # noqa: E402
from harness.cli import UserError  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def host_busy():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f))
    idle = v[3] + v[4]
    return sum(v), idle


def procs():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            st = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        rest = st[st.rindex(")") + 2:].split()
        ppid, ticks = int(rest[1]), int(rest[11]) + int(rest[12])
        out[int(pid)] = (ppid, ticks, cmd)
    return out


def role_of(pid, table, cache):
    if pid in cache:
        return cache[pid]
    seen, p = [], pid
    role = None
    while p in table and p > 1 and role is None:
        ppid, _, cmd = table[p]
        if "train_gpt.py" in cmd:
            try:
                env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            except OSError:
                env = []
            helper = next((e.split(b"=", 1)[1].decode().split(":")[0] for e in env
                           if e.startswith(b"TRAIN_GPT_COMPILE_HELPER=")), "")
            rank = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"RANK=")), "?")
            role = f"{helper or 'run'}@{rank if not helper else table[ppid][2] and rank}"
            if helper:  # a helper has no RANK: name it by its run's
                try:
                    penv = open(f"/proc/{ppid}/environ", "rb").read().split(b"\0")
                    prank = next((e.split(b"=", 1)[1].decode() for e in penv if e.startswith(b"RANK=")), "?")
                except OSError:
                    prank = "?"
                role = f"{helper}@{prank}"
        seen.append(p)
        p = ppid
    for s in seen:
        cache[s] = role
    return role


@cli.program
def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise UserError(f"usage: python3 cpu_sampler.py OUT.tsv (a file to write); got {args}")
    out = open(args[0], "w", buffering=1)
    t0 = time.time()
    last_total, last_idle = host_busy()
    last_ticks = {}
    cache = {}
    ncpu = os.cpu_count()
    while True:
        time.sleep(0.5)
        total, idle = host_busy()
        busy = (1 - (idle - last_idle) / max(1, total - last_total)) * ncpu
        last_total, last_idle = total, idle
        table = procs()
        by_role = {}
        for pid, (ppid, ticks, cmd) in table.items():
            role = role_of(pid, table, cache)
            if role is None:
                continue
            d = ticks - last_ticks.get(pid, ticks if pid in last_ticks else 0)
            last_ticks[pid] = ticks
            by_role[role] = by_role.get(role, 0) + d / HZ / 0.5
        out.write(f"{time.time() - t0:.1f}\t{busy:.1f}\t" + " ".join(f"{k}={v:.2f}" for k, v in sorted(by_role.items())) + "\n")


if __name__ == "__main__":
    sys.exit(main())
