import sys

from simforcing.cli import main

sys.exit(main())
