"""`python -m gpumeter`: the command line."""

import sys

from gpumeter.cli.main import main

sys.exit(main())
