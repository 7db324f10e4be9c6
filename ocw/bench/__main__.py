import sys

from ocw.bench.cli import main

sys.exit(main())
