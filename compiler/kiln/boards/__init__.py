"""Board descriptions (kiln.boards.loader, being split into modules)."""

from kiln.boards.loader import *  # noqa: F401,F403
