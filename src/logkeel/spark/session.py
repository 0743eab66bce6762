"""Starting a Spark session that can run logkeel's Python data sources."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from logkeel.spark import register

JAVA_PACKAGE = "openjdk-17-jre-headless"


class JavaMissingError(RuntimeError):
    """Spark needs a Java runtime and none was found."""


def require_java() -> str:
    """The `java` Spark will run; raises a message that says how to install one."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found:
        return found
    raise JavaMissingError(
        "Spark needs Java 17 or later and no `java` was found on PATH or in JAVA_HOME; "
        f"on Debian/Ubuntu: apt-get install {JAVA_PACKAGE}"
    )


def spark_session(
    master: str | None = None,
    app_name: str = "logkeel",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session (new, or the active one) with every logkeel format registered.

    Without ``master`` the session runs in this process on all cores (``local[*]``), unless
    ``spark-submit`` already chose a master.
    """
    require_java()
    # Spark starts Python workers with `python3` from PATH; the data sources need this
    # interpreter's packages (pyarrow, logkeel) in them.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Under spark-submit the JVM is already up with the master it was given.
        builder = builder.master("local[*]")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
