"""Class-data sharing for the driver JVM: Spark starts without parsing its classes anew.

A driver JVM loads and verifies some 10,000 classes from Spark's jars before the first
job; on this project's 2-core machines that was 5 of the 10 s a SparkSession took to
start, paid by every ``cec run``, ``cec recover`` and test (issue 16 item 3). Java's
dynamic class-data sharing (JDK 13+) writes the loaded classes to an archive at the
JVM's exit (``-XX:ArchiveClassesAtExit``) and maps them at the next start
(``-XX:SharedArchiveFile``).

How cec uses it, safely:

* The archive lives in ``$CEC_CACHE_DIR`` (default ``$XDG_CACHE_HOME/cec`` or
  ``~/.cache/cec``), named by a hash of the java binary and PySpark's jars: another JDK
  or Spark gets another archive. ``CEC_JVM_ARCHIVE=0`` turns all of this off.
* The first process with no archive asks its JVM to write one to a file of its own
  (``jvm-KEY.PID.part``). When cec owns the session, it ends the JVM itself after
  ``spark.stop()`` (closing the gateway's stdin, as PySpark's own exit does) and waits
  for it: only a JVM that exited with status 0 wrote a whole archive, and only then is
  the part renamed to ``jvm-KEY.jsa`` (atomic). A truncated archive makes the JVM
  crash at start, so a part that was not finished (a kill during the dump) is never
  used: later starts delete parts whose process is gone.
* The JVM's own CDS messages are silenced; an archive that does not match (a changed
  class path) is ignored by the JVM, which then starts the slow way.
* An archive's file time is when it was last used (refreshed once a day); one of
  another key unused for 30 days (an old JDK, Spark or virtual environment) is
  removed by the next start.

A user's own ``spark.driver.extraJavaOptions`` replaces cec's, archive included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark
import xxhash
from pyspark import SparkContext

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
DUMP_WAIT_S = 120.0
#: an archive of another key not used for this long is removed (see _drop_unused)
UNUSED_S = 30 * 24 * 3600.0
USED_RESOLUTION_S = 24 * 3600.0


def cache_dir() -> Path:
    if env := os.environ.get("CEC_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cec"


def enabled() -> bool:
    return os.environ.get("CEC_JVM_ARCHIVE", "1").strip().lower() not in ("0", "false", "no",
                                                                            "off")


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    exe = Path(home) / "bin" / "java" if home else None
    if exe is None or not exe.exists():
        found = shutil.which("java")
        exe = Path(found) if found else None
    return exe.resolve() if exe is not None else None


def archive_key() -> str | None:
    """A hash of what the archive depends on: the java binary and Spark's jars."""
    java = _java()
    if java is None:
        return None
    h = xxhash.xxh64()
    for path in [java, *sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))]:
        with contextlib.suppress(OSError):
            st = path.stat()
            h.update(f"{path}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    h.update(f"{pyspark.__version__}|{os.environ.get('SPARK_HOME', '')}".encode())
    return h.hexdigest()


@dataclass
class Archive:
    """What a session start does with the archive: use it, or write one at exit."""

    options: str  # JVM options to add to the driver's
    part: Path | None = None  # written at the JVM's exit: rename it once that succeeded
    final: Path | None = None


def plan() -> Archive | None:
    """The options for the next driver JVM; None if disabled or nothing can be done."""
    if not enabled():
        return None
    key = archive_key()
    if key is None:
        return None
    root = cache_dir()
    final = root / f"jvm-{key}.jsa"
    _drop_unused(root, final)
    if final.is_file():
        _mark_used(final)
        return Archive(f"-XX:SharedArchiveFile={final} {QUIET}")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    _drop_stale_parts(root)
    part = root / f"jvm-{key}.{os.getpid()}.part"
    return Archive(f"-XX:ArchiveClassesAtExit={part} {QUIET}", part, final)


def _mark_used(final: Path) -> None:
    """The archive's time is when it was last used (refreshed at most once a day)."""
    with contextlib.suppress(OSError):
        if time.time() - final.stat().st_mtime > USED_RESOLUTION_S:
            os.utime(final)


def _drop_unused(root: Path, keep: Path) -> None:
    """Remove the archives of other JDKs or Spark installations (another key) not used
    for :data:`UNUSED_S`: an upgrade or a new virtual environment leaves its old one
    behind, about 150 MB each. One removed while a JVM maps it stays mapped there."""
    now = time.time()
    with contextlib.suppress(OSError):
        for path in root.glob("jvm-*.jsa"):
            with contextlib.suppress(OSError):
                if path != keep and now - path.stat().st_mtime > UNUSED_S:
                    path.unlink()


def _drop_stale_parts(root: Path) -> None:
    for p in root.glob("jvm-*.part"):
        try:
            pid = int(p.name.rsplit(".", 2)[1])
        except (IndexError, ValueError):
            continue
        if not _alive(pid):
            p.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def finish(archive: Archive | None) -> None:
    """After ``spark.stop()``: if this JVM writes an archive, end it, wait, keep it.

    Says what it waits for after a few seconds; never raises (an archive is an
    optimization: any failure only leaves the next start as slow as this one).
    """
    if archive is None or archive.part is None or archive.final is None:
        return
    gateway = SparkContext._gateway
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if proc is None:
        return
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # PythonGatewayServer exits on EOF of its stdin
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            print(f"cec: waiting for the JVM to write its class archive {archive.part} "
                  "(once per installation)", file=sys.stderr, flush=True)
            code = proc.wait(timeout=DUMP_WAIT_S)
    except (OSError, subprocess.TimeoutExpired):
        return
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
    if code == 0 and archive.part.is_file() and archive.part.stat().st_size > 0:
        with contextlib.suppress(OSError):
            os.replace(archive.part, archive.final)
    else:
        archive.part.unlink(missing_ok=True)
