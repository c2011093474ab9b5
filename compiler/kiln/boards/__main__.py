"""``python -m kiln.boards``: see kiln.boards.command."""

import sys

from kiln.boards.command import main

sys.exit(main())
