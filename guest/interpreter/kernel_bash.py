# sandlot code-interpreter kernel for bash contexts.
#
# Started by guest/interpreter as `python3 -u -c <this file>`, with
# kernel.py's protocol (requests on fd 3, messages on fd 4, "ready" first,
# "done" after each cell). One bash process lives as long as the context,
# so variables, functions and the working directory persist between cells.
# Each cell is sourced from a file, then bash prints a marker (with the
# cell's exit status) on stdout and stderr, which ends the cell's output.
# A cell that exits non-zero is an error, as a failed command is.
import datetime
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading

REQ_FD, MSG_FD = 3, 4
MAX_CHUNK = 1 << 18


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def emit(msg):
    data = (json.dumps(msg) + "\n").encode("utf-8")
    while data:
        data = data[os.write(MSG_FD, data):]


class Stream:
    """Reads one of bash's outputs, emitting it until the cell's marker."""

    def __init__(self, name, f, marker):
        self.name, self.f, self.marker = name, f, marker.encode()
        self.status = None
        self.done = threading.Event()
        self.eof = False
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        pending = b""
        while True:
            chunk = os.read(self.f.fileno(), MAX_CHUNK)
            if not chunk:
                self.flush(pending)
                self.eof = True
                self.done.set()
                return
            pending = self.take(pending + chunk)

    def take(self, pending):
        """Emits what precedes a marker or cannot be one; returns the rest."""
        while True:
            i = pending.find(self.marker)
            end = pending.find(b"\n", i) if i >= 0 else -1
            if end < 0:
                break
            self.flush(pending[:i])
            self.status = int(pending[i + len(self.marker):end] or b"0")
            pending = pending[end + 1:]
            self.done.set()
        if 0 <= pending.find(self.marker):
            return pending  # the marker's status line is still coming
        j = pending.find(self.marker[:1])
        while j >= 0 and not self.marker.startswith(pending[j:]):
            j = pending.find(self.marker[:1], j + 1)
        j = len(pending) if j < 0 else j  # from j on, a marker may be starting
        self.flush(pending[:j])
        return pending[j:]

    def flush(self, data):
        if data:
            emit({"type": self.name, "text": data.decode("utf-8", "backslashreplace"), "timestamp": now()})

    def wait(self):
        self.done.wait()
        self.done.clear()


class Shell:
    """One bash and its two output streams."""

    def __init__(self):
        env = dict(os.environ)
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        self.marker = "\x1esandlot-%s:" % secrets.token_hex(8)
        self.bash = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.out = Stream("stdout", self.bash.stdout, self.marker)
        self.err = Stream("stderr", self.bash.stderr, self.marker)

    def run(self, script):
        """Runs script; the cell's exit status, or None if bash exited."""
        try:
            self.bash.stdin.write(script.encode())
            self.bash.stdin.flush()
        except BrokenPipeError:
            pass
        self.out.wait()
        self.err.wait()
        if self.out.eof or self.err.eof:
            self.bash.wait()
            return None
        return self.out.status


def exports(env):
    return "".join("export %s=%s\n" % (k, shell_quote(v)) for k, v in env.items())


def shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def execute(shell, req, count):
    """Runs one cell; returns the shell to use next (a new one if bash exited)."""
    emit({"type": "number_of_executions", "execution_count": count})
    env = req.get("env") or {}
    bad = [k for k in list(env) + list(req.get("globals") or {}) if not NAME.match(k)]
    if bad:
        emit({"type": "error", "name": "ValueError", "traceback": "",
              "value": "bash cannot set environment variable %r: not a shell variable name" % bad[0]})
        emit({"type": "done"})
        return shell
    status = shell.run(cell_script(shell.marker, req.get("code") or "", env, req.get("globals") or {}))
    if status is None:
        code = shell.bash.returncode
        emit({"type": "error", "name": "BashExited", "traceback": "",
              "value": "bash exited (status %s); a new shell was started, this context's variables are gone" % code})
        shell = Shell()
    elif status:
        emit({"type": "error", "name": "ExitCode", "value": "bash: the cell exited with status %d" % status,
              "traceback": ""})
    emit({"type": "done"})
    return shell


def cell_script(marker, code, env, globals_):
    """What bash runs for a cell: the code sourced from a file, with the
    per-execution env saved, set and restored around it (no subshell: the
    cell's state must persist), then the marker with its exit status."""
    fd, path = tempfile.mkstemp(prefix="sandlot-cell-", suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write(code + "\n")
    script = exports(globals_)
    script += "".join("__sandlot_saved_%d=${%s-__sandlot_unset}\n" % (i, k) for i, k in enumerate(env))
    script += exports(env)
    script += "source %s\n__sandlot_status=$?\nrm -f %s\n" % (shell_quote(path), shell_quote(path))
    for i, k in enumerate(env):
        script += ("if [ \"$__sandlot_saved_%d\" = __sandlot_unset ]; then unset %s; else export %s=\"$__sandlot_saved_%d\"; fi\n"
                   % (i, k, k, i))
    script += "printf '%s%%d\\n' \"$__sandlot_status\"; printf '%s%%d\\n' \"$__sandlot_status\" >&2\n" % (marker, marker)
    return script


def on_sigint(*_):
    # Ignored here while it is sent, or the kernel would signal itself forever.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.killpg(os.getpgid(0), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, on_sigint)


def serve():
    for fd in (REQ_FD, MSG_FD):
        os.set_inheritable(fd, False)
    # An interrupt from the agent goes to what the cell runs; bash itself
    # then exits (a non-interactive shell does), and the context restarts.
    signal.signal(signal.SIGINT, on_sigint)
    shell = Shell()
    requests = os.fdopen(REQ_FD, "rb")
    emit({"type": "ready", "pid": os.getpid(), "bash": True})
    count = 0
    for line in requests:
        count += 1
        shell = execute(shell, json.loads(line), count)
    shell.bash.kill()


serve()
