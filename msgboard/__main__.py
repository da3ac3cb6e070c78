"""``python -m msgboard``: the same as the ``msgboard`` command."""

from __future__ import annotations

import sys

from msgboard.cli import main

sys.exit(main())
