"""Where clusterclip keeps what it writes, safely (formerly the module ``clusterclip.io``).

- :mod:`~clusterclip.storage.atomic`: atomic writes of files and folders, and the removal
  of the temporaries a killed run left;
- :mod:`~clusterclip.storage.records`: the ownership records (``.clusterclip-output``) that
  say which files a command wrote and may replace;
- :mod:`~clusterclip.storage.outputs`: the checks before an output folder or file is
  written, and the move of a finished folder into place;
- :mod:`~clusterclip.storage.jsonfile`: the one bounded reader of every JSON file;
- :mod:`~clusterclip.storage.digests`: SHA-256 of files, fingerprints of objects and arrays;
- :mod:`~clusterclip.storage.arrays`: ``.npy`` arrays read and written safely;
- :mod:`~clusterclip.storage.cache`: the folder of the on-disk caches.
"""
