"""Running Maven for the Java client (clients/java) and examples/java from the tests.

Maven runs in batch mode (-B) with a local repository that persists between runs, so only the
first run on a machine downloads (from Maven Central: grpc-java, protobuf-java, protoc and
protoc-gen-grpc-java for the build, JUnit): ``$HEADWATER_MAVEN_REPO``, else Maven's own
``~/.m2/repository``. Each JVM is capped (-Xmx) so a test run stays small on two cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JAVA_DIR = ROOT / "clients" / "java"
EXAMPLE_DIR = ROOT / "examples" / "java"
MAVEN_TIMEOUT_S = 1800  # a cold local repository downloads ~60 MB and builds on a loaded machine


def maven_repo() -> Path:
    """The persistent local repository every Maven run here uses."""
    configured = os.environ.get("HEADWATER_MAVEN_REPO")
    return Path(configured) if configured else Path.home() / ".m2" / "repository"


def mvn(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = MAVEN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``mvn -B`` in cwd with the persistent local repository; the completed process
    (output captured, not checked)."""
    exe = shutil.which("mvn")
    assert exe, "Maven (mvn) and a JDK 17 are needed for the Java client's tests"
    run_env = dict(env if env is not None else os.environ)
    run_env.setdefault("MAVEN_OPTS", "-Xmx512m -XX:TieredStopAtLevel=1")
    return subprocess.run(
        [
            "nice",
            "-n",
            "10",
            exe,
            "-B",
            "-Dstyle.color=never",
            f"-Dmaven.repo.local={maven_repo()}",
            *args,
        ],
        cwd=cwd,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def check(proc: subprocess.CompletedProcess[str], what: str) -> str:
    """Assert a Maven run passed; its output, without the terminal escapes Maven's console
    library writes even in batch mode."""
    assert proc.returncode == 0, f"{what} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    return re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)


def install_client() -> None:
    """Build clients/java (tests skipped) and install it into the local repository, for the
    example and the cross-language test's member program."""
    check(mvn(JAVA_DIR, "-q", "-DskipTests", "install"), "mvn install (clients/java)")


def member_classpath() -> str:
    """The classpath of clients/java's compiled main and test classes and dependencies
    (test scope), for running a test-side program (e.g. GroupMember) as its own JVM."""
    out = JAVA_DIR / "target" / "test-classpath.txt"
    check(
        mvn(
            JAVA_DIR,
            "-q",
            "test-compile",
            "dependency:build-classpath",
            "-Dmdep.includeScope=test",
            f"-Dmdep.outputFile={out}",
        ),
        "mvn test-compile dependency:build-classpath",
    )
    deps = out.read_text().strip()
    classes = [JAVA_DIR / "target" / "classes", JAVA_DIR / "target" / "test-classes"]
    return os.pathsep.join([*(str(c) for c in classes), deps])
