# Looks for a value everywhere a guest could hold it: every other
# process's environment, command line and writable memory, and every file
# of the trees a sandbox writes (/etc, /root, /home, /tmp, /run whole; /var,
# /mnt, /srv, /opt, /usr/local: what changed since the sandbox started). argv[1] is the value, reversed and base64-encoded, so no
# other process (the shell, envd) holds it as is; argv[2] is how many
# seconds back "since the sandbox started" reaches.
import base64
import os
import sys
import time

needle = base64.b64decode(sys.argv[1])[::-1]
since = time.time() - int(sys.argv[2])
me = os.getpid()
hits = []
CHUNK = 16 << 20


def scan_memory(pid):
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            # A value a process received is in memory it wrote: writable
            # or anonymous regions (not the read-only mappings of files).
            named = len(fields) > 5 and not fields[5].startswith("[")
            if "r" not in fields[1] or ("w" not in fields[1] and named) or hi - lo > 1 << 30 \
                    or fields[-1] in ("[vvar]", "[vsyscall]"):
                continue
            prev = b""
            for at in range(lo, hi, CHUNK):
                try:
                    mem.seek(at)
                    chunk = mem.read(min(CHUNK, hi - at))
                except (OSError, ValueError, OverflowError):
                    break
                if needle in prev[-len(needle):] + chunk:
                    hits.append(f"mem:{pid}:{fields[5] if len(fields) > 5 else 'anon'}")
                    return
                prev = chunk


for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != me):
    try:
        for what in ("environ", "cmdline"):
            with open(f"/proc/{pid}/{what}", "rb") as f:
                if needle in f.read():
                    hits.append(f"{what}:{pid}")
        scan_memory(pid)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass

always = ("/etc/", "/root/", "/home/", "/tmp/", "/run/")
tops = [os.path.join("/", x) for x in ("etc", "root", "home", "tmp", "run", "var", "mnt", "srv", "opt", "usr/local")]
for d, dirs, files in (w for top in tops for w in os.walk(top)):
    for name in files:
        path = os.path.join(d, name)
        try:
            st = os.lstat(path)
            if not os.path.isfile(path) or os.path.islink(path) or st.st_size > 50 << 20:
                continue
            if st.st_mtime < since and st.st_ctime < since and not path.startswith(always):
                continue
            with open(path, "rb") as f:
                if needle in f.read():
                    hits.append("file:" + path)
        except OSError:
            pass
print("CLEAN" if not hits else "FOUND " + " ".join(hits))
