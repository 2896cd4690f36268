import sys

from clusterclip.cli import main

sys.exit(main())
