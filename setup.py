"""The compiled record decoder (logkeel.records.columns), built with the machine's C compiler.

Optional: an install without a compiler or Python's headers still works and the pure-Python
decoder runs instead (scripts/setup installs both on Debian). Everything else is in
pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "logkeel.records._columns",
            ["src/logkeel/records/native/columns.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
