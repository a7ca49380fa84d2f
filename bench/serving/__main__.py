import sys

from .kinfer_bench import main

sys.exit(main())
