"""`python -m kqp.proxy.bench`: the benchmark without going through kqp's own CLI."""

import sys

from . import main

sys.exit(main())
