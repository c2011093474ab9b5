"""``python -m kiln.boards``: see kiln.boards.loader."""

import sys

from kiln.boards.loader import main

sys.exit(main())
