#!/usr/bin/env python3
"""Per-role syscall sets from `strace -ff -o DIR/t` output.
usage: roles.py DIR PROGRAM_REGEX [--after PREFIX] [--arg-of NAME ...]
A process = a pid whose trace shows a successful execve matching PROGRAM_REGEX (calls counted from
that execve on); its threads = tids it clone()d with CLONE_THREAD, recursively. With --after, the
main thread counts only from its first line starting with PREFIX, and threads only if created later.
"""
import os, re, sys, collections
d = sys.argv[1]; prog = re.compile(sys.argv[2]); after = None; argof = []
rest = sys.argv[3:]
while rest:
    a = rest.pop(0)
    if a == '--after': after = rest.pop(0)
    elif a == '--arg-of': argof.append(rest.pop(0))
files = {int(f.split('.')[-1]): os.path.join(d, f) for f in os.listdir(d) if re.match(r't\.\d+$', f)}
line_re = re.compile(r'^([a-z0-9_]+)\((.*)')
clone_re = re.compile(r'^(clone3?|fork|vfork)\((.*)\)\s+=\s+(\d+)')
ARGPOS = {'socket': 0, 'clone': 0, 'kill': 0, 'tgkill': 2, 'ioctl': 1, 'mprotect': 2, 'mmap': 2, 'prctl': 0, 'fcntl': 1, 'setsockopt': 2, 'getsockopt': 2}
def raw(pid):
    with open(files[pid], errors='replace') as f:
        return [l.rstrip('\n') for l in f]
def is_exec(l): return l.startswith('execve(') and l.rstrip().endswith('= 0') and prog.search(l.split(',')[0])
counts = collections.Counter(); argvals = collections.defaultdict(collections.Counter)
def walk(ls, active):
    for l in ls:
        m = line_re.match(l)
        if not m: continue
        if not active:
            if after and l.startswith(after): active = True
            else: continue
        name = m.group(1); counts[name] += 1
        if name in argof:
            parts = m.group(2).split(', ')
            i = ARGPOS.get(name, 0)
            if i < len(parts): argvals[name][parts[i][:50]] += 1
        c = clone_re.match(l)
        if c and 'CLONE_THREAD' in c.group(2) and int(c.group(3)) in files:
            walk(raw(int(c.group(3))), True)
procs = 0
for pid in sorted(files):
    ls = raw(pid)
    idx = next((i for i, l in enumerate(ls) if is_exec(l)), None)
    if idx is None: continue
    procs += 1
    walk(ls[idx:], after is None)
print(f"# {procs} processes, {len(counts)} syscalls", file=sys.stderr)
for name, n in sorted(counts.items()): print(name, n)
for name, vals in argvals.items(): print('##', name, dict(vals), file=sys.stderr)
