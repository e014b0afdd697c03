"""Workspace-wide test settings: nothing reaches a hub, trackers and `datasets` write into the
session's folders, and torch uses one thread per worker (pytest-xdist runs two workers on two
cores); a fixture that installs a fake distribution; and a session that ends with a process a
test started still running fails, naming it."""

import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
# trackio's local store is where TRACKIO_DIR says when trackio is first imported: the session's
# own folder, never the user's cache
os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="retrain-tests-trackio-")
atexit.register(shutil.rmtree, os.environ["TRACKIO_DIR"], ignore_errors=True)
# `datasets` writes the Arrow copies of the tables tests read into its cache: the session's own
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="retrain-tests-datasets-")
atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], ignore_errors=True)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _no_cached_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests write their own ./plugins folders (the default [plugins] search path); forget any
    `plugins` package an earlier test imported, and undo sys.path additions afterwards."""
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))


def _forget_entry_points() -> None:
    from retrain.backends import catalog
    from retrain.registry import entry_points

    catalog._entry_points.cache_clear()
    entry_points.names.cache_clear()
    entry_points.lookup.cache_clear()


@pytest.fixture
def install_distribution(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """install_distribution(name, version, entry_points, files) -> the site folder.

    A distribution laid out as an installer leaves it (its modules beside a
    `<name>-<version>.dist-info` holding METADATA and entry_points.txt) in a fresh folder put
    first on sys.path: how a third-party package reaches retrain. `entry_points` maps a group to
    {name: "module:attr"}; `files` maps paths under the site folder to their text. retrain's
    entry-point caches are forgotten on install and afterwards, and so are the modules imported
    from the folder.
    """
    sites: list[Path] = []

    def install(name: str, version: str, entry_points: dict[str, dict[str, str]],
                files: dict[str, str]) -> Path:
        site = tmp_path_factory.mktemp("site-packages")
        for rel, text in files.items():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            (site / rel).write_text(text)
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{n} = {target}\n" for n, target in eps.items())
            for group, eps in entry_points.items()))
        monkeypatch.syspath_prepend(str(site))
        sites.append(site)
        _forget_entry_points()
        return site

    yield install
    _forget_entry_points()
    for mod in [m for m, v in sys.modules.items()
                if any(str(getattr(v, "__file__", None) or "").startswith(str(s)) for s in sites)]:
        del sys.modules[mod]


class _Served:
    httpd: Any

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _serve(owner: _Served, handler: type) -> str:
    """Serve `handler` on 127.0.0.1 from a daemon thread, kept on `owner`; the base URL."""
    import threading
    from http.server import ThreadingHTTPServer

    owner.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    owner.httpd.daemon_threads = True
    threading.Thread(target=owner.httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{owner.httpd.server_address[1]}"


class JudgeServer(_Served):
    """A real OpenAI-compatible chat endpoint on 127.0.0.1 (stdlib http.server, a thread) that
    answers as `mode` says: a reply text, or "garbage" (HTTP 200, not JSON), "stall" (no
    answer for `stall_s`), "503"/"401" (that status; `fail_first` > 0 fails only the first N
    requests, then says "yes"). It records every request body and header, and the most
    requests it held at once."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler

        self.mode, self.fail_first, self.stall_s, self.delay_s = "yes", 0, 30.0, 0.0
        self.requests: list[dict[str, object]] = []
        self.headers: list[dict[str, str]] = []
        self.busy = self.most_busy = 0
        lock, server = threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None: ...

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    server.busy += 1
                    server.most_busy = max(server.most_busy, server.busy)
                    n = len(server.requests)
                self.held = True
                try:
                    self._answer(n)
                finally:
                    self._release()

            def _release(self) -> None:
                # before the reply goes out: a client that reads it may send its next request
                # before this thread runs again, which is not a third request held at once
                with lock:
                    if self.held:
                        server.busy -= 1
                        self.held = False

            def _answer(self, n: int) -> None:
                mode = server.mode if not server.fail_first or n <= server.fail_first else "yes"
                time.sleep(server.delay_s)
                if mode == "stall":
                    time.sleep(server.stall_s)
                    return
                if mode in ("503", "401"):
                    self._send(int(mode), b'{"error": "nope"}')
                elif mode == "garbage":
                    self._send(200, b"<html>not a completion</html>")
                else:
                    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": mode}}]}
                    self._send(200, json.dumps(reply).encode())

            def _send(self, status: int, data: bytes) -> None:
                self._release()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.url = _serve(self, Handler) + "/v1"


@pytest.fixture
def judge_server():  # type: ignore[no-untyped-def]
    server = JudgeServer()
    yield server
    server.close()


class ClassifyServer(_Served):
    """A real server of vLLM's `POST /classify` contract on 127.0.0.1 (stdlib http.server, a
    thread), standing in for a reward model's server, answering as `mode` says: "ok" (per text,
    `logit(text)`, and `labels` logits when more than one), "503"/"401" (that status;
    `fail_first` > 0 fails only the first N requests), "garbage" (HTTP 200, not JSON), "stall"
    (no answer for `stall_s`). It records every request body (with its path) and header."""

    @staticmethod
    def logit(text: str) -> float:
        return sum(ch.isdigit() for ch in text) - 2.0

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler

        self.mode, self.fail_first, self.stall_s, self.labels = "ok", 0, 30.0, 1
        self.requests: list[dict[str, object]] = []
        self.headers: list[dict[str, str]] = []
        server, lock = self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None: ...

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with lock:
                    server.requests.append({"path": self.path, **body})
                    server.headers.append(dict(self.headers))
                    n = len(server.requests)
                mode = server.mode if not server.fail_first or n <= server.fail_first else "ok"
                if mode == "stall":
                    time.sleep(server.stall_s)
                    return
                if mode in ("503", "401"):
                    self._send(int(mode), b'{"error": "nope"}')
                elif mode == "garbage":
                    self._send(200, b"<html>not a classification</html>")
                else:
                    data = [{"index": i, "label": None, "num_classes": server.labels,
                             "probs": [server.logit(t) + k for k in range(server.labels)]}
                            for i, t in enumerate(body["input"])]
                    self._send(200, json.dumps({"object": "list", "data": data}).encode())

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.url = _serve(self, Handler)


@pytest.fixture
def rm_server():  # type: ignore[no-untyped-def]
    server = ClassifyServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def build_once(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """build_once(name, build) -> a folder that `build(folder)` filled, once per session.

    For an expensive artefact several tests only read (a trained run, a campaign): under
    pytest-xdist every worker asks, the first builds it under a lock in the session's shared
    temporary folder and the others wait and reuse it. A build that failed fails every test
    that asks, with the first failure's message, without building again."""
    import fcntl
    import shutil
    import traceback

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def build(name: str, make) -> Path:  # type: ignore[no-untyped-def]
        folder, lock = shared / f"shared-{name}", shared / f"shared-{name}.lock"
        done, failed = folder.with_suffix(".done"), folder.with_suffix(".failed")
        with open(lock, "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if not done.exists() and not failed.exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                try:
                    make(folder)
                except BaseException:
                    failed.write_text(traceback.format_exc())
                    raise
                done.touch()
        if failed.exists():
            pytest.fail(f"building the shared {name!r} failed (in another test):\n{failed.read_text()[-4000:]}")
        return folder

    return build


# -- no test leaves a process behind -----------------------------------------------------------
#
# The pytest process (xdist's controller under -n) becomes a child subreaper on Linux, so a
# process a test started and never stopped is re-parented to it when its own parent (a test
# worker, a double-forking daemon) exits. When the session ends, after every fixture is torn
# down and every worker has exited, whatever still runs below it is a stray: the session
# fails naming each one, and each is killed so it outlives the run by seconds, not hours.

_PR_SET_CHILD_SUBREAPER = 36
_STRAY_GRACE_S = 15.0
# started by multiprocessing for the life of their parent; they leave with it
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _become_subreaper() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live (not zombie) process below `root`: psutil where the
    environment has it, else /proc; {} where neither is available."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        found: dict[int, str] = {}
        try:
            children = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            return {}
        for child in children:
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                found[child.pid] = " ".join(child.cmdline()) or child.name()
            except psutil.Error:
                continue
        return found
    proc = Path("/proc")
    if not proc.is_dir():
        return {}
    parents: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        states[int(entry.name)] = fields[0]
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found = {}
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(parents.get(pid, []))
        if states.get(pid) in ("Z", "X"):
            continue
        try:
            cmdline = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[pid] = cmdline.strip() or f"[{pid}]"
    return found


def _strays() -> dict[int, str]:
    return {pid: cmd for pid, cmd in _descendants(os.getpid()).items()
            if not any(helper in cmd for helper in _HELPERS)}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Under -n, tests that share an expensive fixture (a trained run, a server) carry one
    # `xdist_group` mark and go to one worker, so the fixture is built once, not per worker.
    args = config.invocation_params.args
    chosen = any(str(a).startswith(("--dist", "-d")) for a in args)
    if getattr(config.option, "dist", "no") == "load" and not chosen:
        config.option.dist = "loadgroup"
    if hasattr(config, "workerinput") and not chosen:
        # a worker parsed the command line itself (dist "no" until xdist's own hooks run), so
        # it would not tag its tests' ids with their group: the controller would spread them
        config.option.loadgroup = True


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # xdist 3.8 tags a grouped test's id by assigning `item._nodeid`, which pytest 9 no longer
    # reads (the id is `item._id`): without this the scheduler sees no group and spreads them
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and hasattr(item, "_id") and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")
    if not hasattr(config, "workerinput"):  # the controller (or the only process)
        _become_subreaper()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):  # type: ignore[no-untyped-def]
    result = yield
    if hasattr(session.config, "workerinput"):
        return result  # the controller checks, once every worker has exited
    deadline = time.monotonic() + _STRAY_GRACE_S
    strays = _strays()
    while strays and time.monotonic() < deadline:  # processes a teardown signalled may still be exiting
        time.sleep(0.25)
        strays = _strays()
    if not strays:
        return result
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{pid}: {cmd[:300]}" for pid, cmd in sorted(strays.items())]
    message = ("the tests left these processes running (each test must stop what it starts; "
               "they are killed now):\n  " + "\n  ".join(lines))
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "stray processes", red=True)
        reporter.write_line(message)
    else:
        print(message, file=sys.stderr)
    for pid in strays:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return result
