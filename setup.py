"""Build of the optional C kernel (everything else is in pyproject.toml).

``clusterclip.sampling._kernel`` is built from the package's own source with the
Python C API only (no numpy headers). ``optional=True``: where no C compiler is
available the install still succeeds and the sampler uses its numpy path (the same
schedules, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("clusterclip.sampling._kernel",
                             ["src/clusterclip/sampling/_kernel.c"], optional=True)])
