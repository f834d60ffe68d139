# sandlot code-interpreter kernel: runs notebook-style cells for one context.
#
# Started by guest/interpreter as `python3 -u -c <this file>`. It reads
# requests as JSON lines on fd 3 and writes messages as JSON lines on fd 4,
# so the user's own stdout/stderr (fd 1/2) never mix with the protocol.
# Messages already have the shape the E2B SDK parses; the Go side forwards
# them as they come, and "ready"/"done" frame the conversation.
# Standard library only, Python >= 3.8.
import sys

if sys.version_info < (3, 8):
    sys.stderr.write("the code interpreter needs Python >= 3.8, this is %s\n" % sys.version.split()[0])
    sys.exit(1)

import ast
import base64
import builtins
import codecs
import datetime
import io
import json
import linecache
import os
import signal
import threading
import time
import traceback
import types

REQ_FD, MSG_FD = 3, 4
MAX_CHUNK = 1 << 18  # split huge writes so no single protocol line is giant
LINE_WAIT = 0.2  # how long a line cut by print's two writes may wait to be whole
SYNC = "\x1b]sandlot-sync\x07"  # written to fd 1/2 to know captured output is drained
MAIN_THREAD = threading.get_ident()


class State:
    active = False  # a cell is running: output is forwarded, else dropped
    user = False  # user code is running: SIGINT may raise KeyboardInterrupt
    emitting = False  # main thread is writing a message: defer the interrupt
    pending = False  # an interrupt arrived while emitting
    child = False  # we are a fork()ed child of the kernel: no protocol access
    count = 0


LOCK = threading.RLock()


def now():
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_all(fd, data):
    while data:
        n = os.write(fd, data)
        data = data[n:]


def emit(msg, always=False):
    """Send one protocol message; a half-written line would desync Go."""
    if State.child:
        return
    main = threading.get_ident() == MAIN_THREAD
    line = (json.dumps(msg, allow_nan=False) + "\n").encode("utf-8")
    with LOCK:
        if not (State.active or always):
            return
        if main:
            State.emitting = True
        try:
            write_all(MSG_FD, line)
        finally:
            if main:
                State.emitting = False
    if main and State.pending and State.user:
        State.pending = False
        raise KeyboardInterrupt


def on_sigint(signum, frame):
    # Only user code is interrupted; the kernel's own loop must survive.
    if not State.user:
        return
    if State.emitting:
        State.pending = True
        return
    raise KeyboardInterrupt


class Buffer:
    """Collects one stream's captured output and emits it in batches."""

    def __init__(self, name):
        self.name = name
        self.parts, self.size = [], 0
        self.line_start = 0.0
        self.lock = threading.Lock()
        # Held from taking the parts to emitting them: two flushers (the
        # Flusher thread and the cell's end) must not emit out of order.
        self.emitting = threading.Lock()

    def write(self, text):
        with self.lock:
            if not self.parts or self.parts[-1].endswith("\n") or "\n" in text:
                self.line_start = time.monotonic()  # an unfinished line starts here
            self.parts.append(text)
            self.size += len(text)
            big = self.size >= MAX_CHUNK
        if big:
            self.flush()
        else:
            FLUSHER.kick()

    def line_age(self):
        """How long the buffered unfinished line has waited (0 if none)."""
        with self.lock:
            if not self.parts or self.parts[-1].endswith("\n"):
                return 0.0
            return time.monotonic() - self.line_start

    def flush(self, whole_lines=False):
        """Emit what is buffered; with whole_lines, keep an unfinished line."""
        with self.emitting:
            with self.lock:
                text = "".join(self.parts)
                cut = text.rfind("\n") + 1 if whole_lines else len(text)
                text, rest = text[:cut], text[cut:]
                self.parts, self.size = ([rest] if rest else []), len(rest)
            for i in range(0, len(text), MAX_CHUNK):
                emit({"type": self.name, "text": text[i:i + MAX_CHUNK], "timestamp": now()})
        return bool(rest)


class Flusher:
    """Coalesces output for a few ms so a print loop is not one message per line."""

    def __init__(self):
        self.event = threading.Event()

    def kick(self):
        self.event.set()

    def run(self):
        while True:
            self.event.wait()
            self.event.clear()
            time.sleep(0.02)
            # print() under -u writes the text and its newline apart: an
            # unfinished line is kept up to LINE_WAIT so it is sent whole.
            while self.flush_once():
                time.sleep(0.01)

    def flush_once(self):
        kept = False
        for b in BUFFERS.values():
            try:
                kept = b.flush(whole_lines=b.line_age() < LINE_WAIT) or kept
            except Exception:
                pass
        return kept


FLUSHER = Flusher()
BUFFERS = {}
PUMPS = {}  # fd -> (pipe inode, Event set when SYNC came through)


def capture_fd(fd, name):
    """Make fd 1/2 a pipe read by a pump thread. Python's print, C code and
    subprocesses all write there, so their output keeps its order."""
    r, w = os.pipe()
    os.dup2(w, fd)
    os.close(w)
    BUFFERS[name] = Buffer(name)
    done = threading.Event()
    PUMPS[fd] = (os.fstat(r).st_ino, done)
    threading.Thread(target=pump, args=(r, BUFFERS[name], done), daemon=True).start()


def pump(r, buf, done):
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    held = ""
    while True:
        try:
            data = os.read(r, 65536)
        except InterruptedError:
            continue
        if not data:
            return
        text = held + decoder.decode(data)
        while SYNC in text:
            before, text = text.split(SYNC, 1)
            if before:
                buf.write(before)
            done.set()
        held = ""
        for k in range(len(SYNC) - 1, 0, -1):  # keep a SYNC cut in half
            if text.endswith(SYNC[:k]):
                text, held = text[:-k], text[-k:]
                break
        if text:
            buf.write(text)


def drain_fds():
    """Wait until everything written to fd 1/2 so far has been pumped."""
    for fd, (ino, done) in PUMPS.items():
        try:
            if os.fstat(fd).st_ino != ino:
                continue  # user code redirected the fd; nothing of ours to drain
            done.clear()
            write_all(fd, SYNC.encode())
        except OSError:
            continue
        done.wait(5)


def flush_all():
    drain_fds()
    for b in BUFFERS.values():
        b.flush()


FORMATS = (
    ("_repr_html_", "html"), ("_repr_markdown_", "markdown"), ("_repr_svg_", "svg"),
    ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_pdf_", "pdf"),
    ("_repr_latex_", "latex"), ("_repr_json_", "json"), ("_repr_javascript_", "javascript"),
)
MIME = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
    "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
    "application/pdf": "pdf", "text/latex": "latex", "application/json": "json",
    "application/javascript": "javascript", "e2b/data": "data", "e2b/chart": "chart",
}


def encode_value(key, v):
    if isinstance(v, tuple) and len(v) == 2:
        v = v[0]  # (data, metadata) as IPython allows
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if key in ("json", "data", "chart"):
        try:
            json.dumps(v, allow_nan=False)  # NaN is not JSON; the SDK would choke
            return v
        except (TypeError, ValueError):
            return None
    return str(v)


def text_of(obj):
    try:
        text = repr(obj)
    except Exception as e:
        text = "<repr failed: %s>" % type(e).__name__
    # The E2B server strips the quotes of a string's repr; SDK users rely on it.
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        text = text[1:-1]
    return text


def bundle(obj, main):
    """The result message for obj, like IPython's display formatter."""
    out = {"type": "result", "text": text_of(obj)}
    extra = {}
    for attr, key in FORMATS:
        try:
            fn = getattr(obj, attr, None)
            v = encode_value(key, fn()) if callable(fn) and not isinstance(obj, type) else None
        except Exception:
            v = None
        if v is not None:
            out[key] = v
    try:
        fn = getattr(obj, "_repr_mimebundle_", None)
    except Exception:
        fn = None
    if callable(fn) and not isinstance(obj, type):
        try:
            data = fn(include=None, exclude=None)
            data = data[0] if isinstance(data, tuple) else data
            for mime, v in dict(data or {}).items():
                key = MIME.get(mime)
                v = encode_value(key or "extra", v)
                if key is None:
                    extra[mime] = v
                elif v is not None:
                    out[key] = v
        except Exception:
            pass
    if extra:
        out["extra"] = extra
    data = dataframe_data(obj)
    if data is not None:
        out["data"] = data
    out["is_main_result"] = main
    return out


def dataframe_data(obj):
    """A pandas DataFrame's columns as lists, E2B's `data` result (its
    template's e2b/data formatter); NaN and dates made JSON by pandas."""
    t = type(obj)
    if t.__name__ != "DataFrame" or not t.__module__.startswith("pandas"):
        return None
    try:
        split = json.loads(obj.to_json(orient="split", date_format="iso"))
        return {str(c): [row[i] for row in split["data"]] for i, c in enumerate(split["columns"])}
    except Exception:
        return None


def display(*objs, **kwargs):
    """IPython's display(): shows objects as non-main results."""
    flush_all()
    for obj in objs:
        emit(bundle(obj, False))


class Cell:
    """Compiles and runs one cell the way IPython does (last expression shown)."""

    def __init__(self, namespace):
        self.ns = namespace
        self.event_loop = None  # for top-level await, kept like IPython's

    def compile(self, code, name):
        tree = ast.parse(shell_lines(code), name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
            last = ast.Expression(body=tree.body.pop().value)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        body = compile(ast.Module(body=tree.body, type_ignores=[]), name, "exec", flags=flags)
        tail = compile(last, name, "eval", flags=flags) if last is not None else None
        return body, tail

    def run_code(self, c):
        value = eval(c, self.ns)
        if c.co_flags & 0x80 and isinstance(value, types.CoroutineType):  # CO_COROUTINE
            if self.event_loop is None:
                import asyncio
                self.event_loop = asyncio.new_event_loop()
            value = self.event_loop.run_until_complete(value)
        return value

    def run(self, code, name):
        body, tail = self.compile(code, name)
        self.run_code(body)
        value = self.run_code(tail) if tail is not None else None
        if value is not None:
            self.ns["_"] = value
            flush_all()
            emit(bundle(value, True))


def shell_lines(code):
    """IPython's line magics a notebook user types: `!cmd` runs cmd in a
    shell, `%pip ...` runs this Python's pip; both keep their indentation,
    and `{expr}` in them is expanded from the cell's namespace."""
    if "!" not in code and "%pip" not in code:
        return code
    out = []
    for line in code.split("\n"):
        body = line.lstrip()
        indent = line[:len(line) - len(body)]
        if body.startswith("!") and not body.startswith("!="):
            line = "%s__sandlot_shell__(%r)" % (indent, body[1:])
        elif body.startswith("%pip ") or body == "%pip":
            line = "%s__sandlot_pip__(%r)" % (indent, body[len("%pip"):])
        out.append(line)
    return "\n".join(out)


def expand(text):
    import string
    ns = sys.modules["__main__"].__dict__
    try:
        return string.Formatter().vformat(text, (), ns)
    except Exception:
        return text  # braces that are the shell's (awk '{...}'), as IPython leaves them


def shell(cmd):
    import subprocess
    flush_all()
    subprocess.call(expand(cmd), shell=True)  # output goes to fd 1/2, which are captured


def pip(args):
    import shlex
    import subprocess
    flush_all()
    # Into the sandbox's own Python, as on E2B: Debian's PEP 668 marker
    # would refuse it.
    env = dict(os.environ, PIP_BREAK_SYSTEM_PACKAGES="1")
    subprocess.call([sys.executable, "-m", "pip"] + shlex.split(expand(args)), env=env)


def error_message(e):
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next  # hide the kernel's own frames
    lines = traceback.format_exception(type(e), e, tb)
    try:
        value = str(e)
    except Exception:
        value = "<str failed>"
    return {"type": "error", "name": type(e).__name__, "value": value, "traceback": "".join(lines)}


def with_env(env, fn):
    """Run fn with env applied to os.environ, restoring it afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute(req, cell):
    State.count += 1
    name = "<cell-%d>" % State.count
    code = req.get("code") or ""
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    with LOCK:
        State.active = True
    emit({"type": "number_of_executions", "execution_count": State.count})
    os.environ.update(req.get("globals") or {})  # the sandbox env changed
    try:
        State.user = True
        with_env(req.get("env") or {}, lambda: cell.run(code, name))
        State.user = False
    except BaseException as e:
        State.user = False
        flush_all()
        emit(error_message(e))
    finally:
        State.user = False
        State.pending = False
    try:
        show_figures()  # after the result, as Jupyter's post-execute hook does
    except Exception as e:
        emit(error_message(e))
    flush_all()
    with LOCK:
        State.active = False
    emit({"type": "done"}, always=True)


def show_figures():
    """Like IPython's inline backend: figures a cell left open are displayed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None and getattr(plt, "show", None) is mpl_show:
        mpl_show()


def mpl_show(*args, **kwargs):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in list(plt.get_fignums()):
        fig = plt.figure(num)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png", bbox_inches="tight")
        except Exception as e:
            sys.stderr.write("figure %s could not be rendered: %s\n" % (num, e))
            continue
        flush_all()
        emit({"type": "result", "text": text_of(fig), "is_main_result": False,
              "png": base64.b64encode(buf.getvalue()).decode("ascii")})
    plt.close("all")


class PyplotHook:
    """Import hook: once matplotlib.pyplot is loaded with the headless Agg
    backend, plt.show() displays figures as png results instead of warning.
    (Setting MPLBACKEND would leak into subprocesses, which lack our backend.)"""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            try:
                if str(module.get_backend()).lower() == "agg":
                    module.show = mpl_show
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec


def after_fork_in_child():
    # A fork()ed child (multiprocessing) must not write protocol lines; its
    # prints still go to fd 1/2, which the parent's pumps forward.
    State.child = True
    for fd in (REQ_FD, MSG_FD):
        try:
            os.close(fd)
        except OSError:
            pass


def setup():
    diag = os.dup(2)  # the kernel's own crash output stays visible to Go
    for fd in (REQ_FD, MSG_FD):
        os.set_inheritable(fd, False)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # input() gets EOF instead of blocking forever
    os.close(devnull)
    capture_fd(1, "stdout")
    capture_fd(2, "stderr")
    threading.Thread(target=FLUSHER.run, daemon=True).start()
    for s in (sys.stdout, sys.stderr):
        s.reconfigure(encoding="utf-8", errors="backslashreplace")
    builtins.display = display
    builtins.__sandlot_shell__ = shell
    builtins.__sandlot_pip__ = pip
    sys.meta_path.insert(0, PyplotHook())
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=after_fork_in_child)
    signal.signal(signal.SIGINT, on_sigint)
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main  # so pickle finds classes defined in cells
    return diag, Cell(main.__dict__)


def serve():
    diag, cell = setup()
    requests = os.fdopen(REQ_FD, "rb")
    emit({"type": "ready", "pid": os.getpid(), "python": sys.version.split()[0]}, always=True)
    while True:
        try:
            line = requests.readline()
        except KeyboardInterrupt:
            continue
        if not line or State.child:
            os._exit(0)
        try:
            req = json.loads(line)
            execute(req, cell)
        except Exception:
            write_all(diag, traceback.format_exc().encode("utf-8", "replace"))
            os._exit(3)  # the protocol is broken; Go replaces this kernel


serve()
