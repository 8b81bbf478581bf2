"""Jupyter kernels forked from a process that imported torch, megatron-core and DeepSpeed once.

Every chapter's kernel otherwise spends ~10 CPU seconds importing them (megatron-core pulls in torch's compiler
stack): over the book's chapters that is minutes of `make test`. As `launch` (chapter 10) forks its ranks from a
fork server, `run_notebook` (tests/test_notebooks.py) starts each chapter's kernel as a fork of one such process:

- `serve SOCKET`: the server. It imports `PRELOAD` and ipykernel, then for each connection forks a child that becomes
  an ordinary ipykernel (its own session, the caller's working directory, environment and stdin/stdout/stderr).
- `connect SOCKET -f CONNECTION_FILE`: the command jupyter_client starts as "the kernel". It hands its directory,
  environment and standard streams to the server, forwards SIGINT/SIGTERM to the forked kernel and exits when it does.
  If it is killed, the kernel sees its socket close and ends with everything it started.

Nothing runs in the server before the fork but imports: no Python thread, no event loop, no ZeroMQ context (chapter
10's `launch` forks its ranks from such a server too). What a library reads from the environment when it is imported
is read once, in the server: a chapter that sets such a variable (`IMPORT_TIME_ENV`) gets a kernel of its own."""

import json
import os
import signal
import socket
import sys

KERNEL_PRELOAD = ("ipykernel.kernelapp",)  # with chapter 10's RANK_PRELOAD: what its forked ranks import once
IMPORT_TIME_ENV = ("TRITON_INTERPRET",)  # read when Triton is imported (here, in the server): a chapter that sets one
# runs in a kernel of its own (`kernel_manager(notebook_text)`)


def _recv_json(conn: socket.socket, fds: int = 0):
    msg, got, _, _ = socket.recv_fds(conn, 1 << 20, fds)
    return json.loads(msg), got


def _become_kernel(conn: socket.socket, listener: socket.socket):
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server's reaper would steal the kernel's subprocesses
    req, fds = _recv_json(conn, 3)
    for fd, std in zip(fds, (0, 1, 2)):
        os.dup2(fd, std)
        os.close(fd)
    os.setsid()  # the kernel's own group: what it starts ends with it
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = ["ipykernel_launcher", *req["argv"]]
    conn.sendall(json.dumps({"pid": os.getpid()}).encode())

    def watch():  # the `connect` process ended (or was killed): end this kernel and everything it started
        conn.recv(1)
        os.killpg(os.getpid(), signal.SIGKILL)

    import threading

    threading.Thread(target=watch, daemon=True).start()
    code = 0
    try:
        from ipykernel.kernelapp import IPKernelApp

        # as jupyter_client's launcher would say through JPY_PARENT_PID (read when ipykernel was imported, here, in the
        # server): the kernel's parent is the server, and it ends if the server does
        IPKernelApp.launch_instance(argv=[*req["argv"], f"--IPKernelApp.parent_handle={os.getppid()}"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(path: str):
    import ctypes
    import importlib

    ctypes.CDLL(None).prctl(
        1, signal.SIGKILL
    )  # PR_SET_PDEATHSIG: the server ends with the test process that started it
    from mtnlg.topology import RANK_PRELOAD

    for name in RANK_PRELOAD + KERNEL_PRELOAD:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    while True:
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        if os.fork() == 0:
            _become_kernel(conn, listener)
        conn.close()


def _reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def connect(path: str, argv: list[str]):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    header = json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "argv": argv}).encode()
    socket.send_fds(conn, [header], [0, 1, 2])
    pid = json.loads(conn.recv(1 << 16))["pid"]
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _: os.killpg(pid, s))  # the kernel's group, as jupyter_client signals a kernel
    while conn.recv(1):  # EOF: the kernel ended
        pass


class Server:
    """One `serve` process for this test process, started on first use. `kernel_manager()` is None (papermill's own
    kernels) if it cannot start, with MTNLG_PLAIN_KERNELS=1 set, or for a notebook that sets an `IMPORT_TIME_ENV`."""

    def __init__(self):
        self.proc, self.path = None, None

    def kernel_manager(self, notebook_text: str = ""):
        import atexit
        import subprocess
        import tempfile
        import time

        if os.environ.get("MTNLG_PLAIN_KERNELS") == "1" or any(v in notebook_text for v in IMPORT_TIME_ENV):
            return None
        if self.proc is None:
            self.path = os.path.join(tempfile.mkdtemp(prefix="mtnlg-kernels-"), "s")
            self.log = open(self.path + ".log", "w+")
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "serve", self.path], stdout=self.log, stderr=subprocess.STDOUT
            )
            atexit.register(self.proc.kill)
            while self.proc.poll() is None and not os.path.exists(self.path):  # listening once its socket exists
                time.sleep(0.05)
        if self.proc.poll() is not None:
            self.log.seek(0)
            print(f"preloaded kernels: the server ended ({self.log.read()[-2000:]}); plain kernels", file=sys.stderr)
            return None
        from jupyter_client.manager import AsyncKernelManager

        path = self.path

        class Preloaded(AsyncKernelManager):
            def format_kernel_cmd(self, extra_arguments=None):
                cmd = super().format_kernel_cmd(extra_arguments)  # [python, -m, ipykernel_launcher, -f, FILE]
                return [sys.executable, __file__, "connect", path, *cmd[cmd.index("-f") :]]

        return Preloaded


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        connect(sys.argv[2], sys.argv[3:])
