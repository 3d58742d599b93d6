"""Ctrl-C is raised where Python can take it: after an import, out of ``exec``, never lost.

Each test runs a small program in a fresh interpreter (signal handlers are per process) that
interrupts itself at a chosen place, the way a user's Ctrl-C can land anywhere.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from window_retriever.cli._interrupt import RETRY_SIGNAL, _Guard, interrupts_where_safe

PROGRAM = """
import os, signal, sys, threading, time
from window_retriever.cli._interrupt import RETRY_SIGNAL, _Guard, interrupts_where_safe

with interrupts_where_safe():
    try:
{body}
        held = threading.Lock()
        held.acquire()
        held.acquire(timeout=30)  # a wait only a real signal wakes: the interrupt must
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    time.sleep(0.1)  # no second interrupt comes once the first was raised
    print("done", flush=True)
given_back = signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
print("after", given_back, threading.active_count(), flush=True)
sys.exit(130)
"""


def run(tmp_path: Path, body: str, **modules: str) -> subprocess.CompletedProcess[str]:
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text), "utf-8")
    program = tmp_path / "program.py"  # a file: code from a string is put off (exec's)
    program.write_text(PROGRAM.format(body=textwrap.indent(textwrap.dedent(body), " " * 8)))
    return subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def test_an_interrupt_during_an_import_comes_once_the_module_is_imported(tmp_path: Path) -> None:
    """An interrupt inside importlib can leave the import lock held: the next import hangs."""
    done = run(
        tmp_path,
        "import slow",
        slow="""
        import os, signal
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):  # Python's handler would raise in here, mid-import
            pass
        open("imported", "w").close()
        """,
    )
    assert (tmp_path / "imported").exists(), done.stderr
    assert done.stdout.splitlines() == ["interrupted", "done", "after True 1"], done.stderr
    assert (done.returncode, done.stderr) == (130, "")


def test_an_interrupt_inside_exec_keeps_the_exit_status(tmp_path: Path) -> None:
    """Passed through ``exec``, an interrupt makes CPython 3.11 end the process by SIGINT."""
    done = run(
        tmp_path,
        """
        exec(
            "import os, signal\\n"
            "os.kill(os.getpid(), signal.SIGINT)\\n"
            "for _ in range(99_999): pass\\n"
            "open('executed', 'w').close()\\n"
        )
        """,
    )
    assert (tmp_path / "executed").exists(), done.stderr
    assert done.stdout.splitlines() == ["interrupted", "done", "after True 1"], done.stderr
    assert done.returncode == 130  # not -2


def test_an_interrupt_a_finaliser_drops_is_raised_again_without_a_traceback(
    tmp_path: Path,
) -> None:
    done = run(
        tmp_path,
        """
        class Dropped:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(100_000):  # the interrupt is raised in here, and dropped
                    pass

        Dropped()
        """,
    )
    assert done.stdout.splitlines() == ["interrupted", "done", "after True 1"], done.stderr
    assert "Exception ignored" not in done.stderr
    assert done.stderr == ""


def test_a_second_ctrl_c_ends_an_import_that_does_not_end(tmp_path: Path) -> None:
    (tmp_path / "stuck.py").write_text(
        "import time\nprint('importing', flush=True)\ntime.sleep(30)\n"
    )
    program = (
        "from window_retriever.cli._interrupt import interrupts_where_safe\n"
        "with interrupts_where_safe():\n"
        "    import stuck\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "importing\n"
    process.send_signal(signal.SIGINT)  # put off: the import has not ended
    time.sleep(0.3)
    assert process.poll() is None
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("a second Ctrl-C did not end a stuck import")
    assert (process.returncode, stderr) == (130, "window-retriever: interrupted\n")


def test_the_handlers_are_given_back_and_other_threads_are_left_alone() -> None:
    handler, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    with interrupts_where_safe():
        assert signal.getsignal(signal.SIGINT) is not handler
        assert sys.unraisablehook is not hook
    assert (signal.getsignal(signal.SIGINT), sys.unraisablehook) == (handler, hook)

    seen: list[object] = []

    def elsewhere() -> None:
        with interrupts_where_safe():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == [handler]


def test_a_retry_that_comes_after_the_interrupt_was_raised_is_ignored() -> None:
    """The helper may send one last retry as the main thread raises: it must not raise twice."""
    guard = _Guard(on_force=lambda: pytest.fail("not a second Ctrl-C"))
    try:
        guard.retry(RETRY_SIGNAL, None)  # nothing owed
    except KeyboardInterrupt:  # caught here: pytest would take it as the user's Ctrl-C
        pytest.fail("a retry raised an interrupt that was not owed")
    guard.pending = True
    with pytest.raises(KeyboardInterrupt):
        guard.retry(RETRY_SIGNAL, None)
    assert not guard.pending


def test_a_late_retry_signal_inside_exec_raises_nothing(tmp_path: Path) -> None:
    """A retry that comes after the interrupt was raised is not owed, wherever it lands."""
    (tmp_path / "program.py").write_text(
        textwrap.dedent(
            """
            import os, signal
            from window_retriever.cli._interrupt import interrupts_where_safe

            with interrupts_where_safe():
                try:  # the first Ctrl-C is put off inside exec, then raised after it
                    exec("os.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(99_999): pass")
                    for _ in range(10_000_000):
                        pass
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
                try:  # the helper's last retry, late, lands in exec'd code
                    exec("os.kill(os.getpid(), signal.SIGUSR2)\\nfor _ in range(99_999): pass")
                    for _ in range(1_000_000):
                        pass
                    print("no second interrupt", flush=True)
                except KeyboardInterrupt:
                    print("a second interrupt nobody sent", flush=True)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "program.py"], cwd=tmp_path, capture_output=True, text=True, timeout=20
    )
    assert done.stdout.splitlines() == ["interrupted", "no second interrupt"], done.stderr


def test_a_command_whose_parent_ignores_ctrl_c_ignores_it() -> None:
    """``command &`` in a shell script starts it with SIGINT ignored; Python keeps that."""
    ignored = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "from window_retriever.cli._interrupt import interrupts_where_safe\n"
            "with interrupts_where_safe():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(0.2)\n"
            "    print('still running', flush=True)\n",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (ignored.returncode, ignored.stdout) == (0, "still running\n"), ignored.stderr


def test_a_second_ctrl_c_during_the_clean_up_ends_the_process_at_once(tmp_path: Path) -> None:
    """Raised inside the clean-up of the first, a second interrupt could end it by a signal."""
    (tmp_path / "program.py").write_text(
        textwrap.dedent(
            """
            import os, signal, time
            from window_retriever.cli._interrupt import interrupts_where_safe

            with interrupts_where_safe():
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)
                except KeyboardInterrupt:
                    print("cleaning up", flush=True)
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)
                    print("cleaned up", flush=True)
            """
        )
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "program.py"], cwd=tmp_path, capture_output=True, text=True, timeout=20
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        130,
        "cleaning up\n",
        "window-retriever: interrupted\n",
    )
    assert time.monotonic() - began < 4


def test_once_interrupted_a_ctrl_c_while_python_shuts_down_ends_it_with_130() -> None:
    program = (
        "import os, signal, time\n"
        "from window_retriever.cli._interrupt import end_at_once_on_interrupt\n"
        "end_at_once_on_interrupt()  # the command returned 130\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=20, check=False
    )
    assert (done.returncode, done.stderr) == (130, "")  # not -2, and no traceback
    assert time.monotonic() - began < 4
