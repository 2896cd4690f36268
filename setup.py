"""Build of the optional C kernels (everything else is in pyproject.toml).

``clusterclip.sampling._kernel`` (the sampler) and ``clusterclip.embedding._static``
(the fast embedder) are built from the package's own source with the Python C API only
(no numpy headers). ``optional=True``: where no C compiler is available the install
still succeeds and the sampler uses its numpy path, the embedder its Python and scipy
path (the same schedules and vectors, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("clusterclip.sampling._kernel",
                             ["src/clusterclip/sampling/_kernel.c"], optional=True),
                   Extension("clusterclip.embedding._static",
                             ["src/clusterclip/embedding/_static.c"], optional=True)])
