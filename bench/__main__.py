"""`python -m bench <name> [flags]` runs one benchmark of the suite; `python -m bench list` names them."""

import sys

from bench.suite import main

sys.exit(main())
