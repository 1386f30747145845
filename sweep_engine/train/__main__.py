import sys

from .loop import main

sys.exit(main())
